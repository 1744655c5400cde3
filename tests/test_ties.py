"""Arrivals at one instant, and arrivals at the exact end of a step: the arrival comes first
(arrivals are URGENT events), so the plan made then sees it, whether the replica runs ahead of
simpy's clock (``Engine.runs_ahead``), waits for the clock at every step and run, or steps one
step at a time (fast paths off)."""
import json

import pandas as pd

from conftest import tiny_config
from sim import simulate
from sim.engine import Engine


def same(a, b):
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    x, y = dict(a.summary), dict(b.summary)
    for s in (x, y):
        s["sim"] = {k: v for k, v in s["sim"].items() if k != "wall_s"}
    assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)


def runs(cfg, monkeypatch):
    """(running ahead, waiting for the clock at every step and run)."""
    ahead = simulate(cfg)
    with monkeypatch.context() as m:
        m.setattr(Engine, "_wait", lambda self, *args: True)
        loop = simulate(cfg)
    return ahead, loop


def write_trace(path, rows):
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a!r},{p},{o}\n" for a, p, o in rows))
    return str(path)


def test_arrivals_at_the_same_instant(tmp_path, monkeypatch):
    """Bursts: several requests at one timestamp, for one replica and for several."""
    rows = [(t, 50 + 10 * i, 5 + i) for t in (0.0, 0.5, 0.5000001, 2.0) for i in range(5)]
    for replicas in (1, 3):
        cfg = tiny_config(cluster={"replicas": replicas},
                          workload={"trace": {"path": write_trace(tmp_path / "burst.csv", rows)}})
        ahead, loop = runs(cfg, monkeypatch)
        same(ahead, loop)
        same(ahead, simulate({**cfg, "engine": {"fast_forward": False}}))


def tie_trace(path, replicas: int, rows: list, ties: list) -> dict:
    """A config whose trace is ``rows`` and then, for each (replica, k, burst) of ``ties``, that
    many requests arriving at the exact end of the replica's step k (read back from the step rows
    of a run of the requests before them: a later arrival changes no earlier step). Round robin
    sends the j-th request to replica j % replicas."""
    rows = list(rows)
    for rep, k, burst in ties:
        cfg = tiny_config(cluster={"replicas": replicas},
                          workload={"trace": {"path": write_trace(path, rows)}})
        steps = simulate(cfg).steps
        steps = steps[steps["replica"] == rep].reset_index()
        end = float(steps["start_s"][k] + steps["duration_s"][k])  # the engine's end of the step
        assert end > rows[-1][0]
        rows += [(end, 20 + 10 * j, 30 - 20 * j) for j in range(burst)]
    return tiny_config(cluster={"replicas": replicas}, workload={"trace": {"path": write_trace(path, rows)}})


def test_an_arrival_at_the_end_of_a_step_joins_the_plan_made_then(tmp_path, monkeypatch):
    """Arrivals at the exact end of a step: the plan made then admits them, running ahead,
    waiting for the clock, and stepping one step at a time. With two replicas the replica waits for
    the end of a run it scheduled before the arrival before it was (simpy orders the events of
    one instant by when they were scheduled: arrivals are URGENT, so they still come first)."""
    one = tie_trace(tmp_path / "one.csv", 1, [(0.0, 300, 40)], [(0, 3, 1), (0, 12, 2), (0, 20, 1)])
    two = tie_trace(tmp_path / "two.csv", 2, [(0.0, 300, 40), (0.001, 50, 10)], [(0, 5, 1)])
    for cfg, tied in ((one, range(1, 5)), (two, [2])):
        ahead, loop = runs(cfg, monkeypatch)
        same(ahead, loop)
        stepped = simulate({**cfg, "engine": {"fast_forward": False}})
        same(ahead, stepped)
        req = ahead.requests.set_index("request_id")
        for rid in tied:  # admitted by the plan made at its arrival, the end of the step before
            assert req.loc[rid, "first_scheduled_s"] == req.loc[rid, "arrival_s"]
            assert req.loc[rid, "arrival_s"] in set(ahead.steps["start_s"])
