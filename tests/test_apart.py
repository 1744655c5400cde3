"""Replicas that share nothing run apart, without simpy's event loop (``sim.apart``): the
results are identical to simpy's loop running the same replicas ahead of its clock, whatever
the chunk of arrivals read at a time, with arrivals at the same instant and arrivals at the
exact end of a step (which come first: the plan made then sees them)."""
import json
from contextlib import contextmanager

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.apart as apart
import sim.engine as engine
from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.scheduler import REGISTRY


@contextmanager
def patched(**attrs):
    """Engine runs with ``attrs`` set on each engine before it runs (``apart``) or module
    constants replaced (``APART_CHUNK``)."""
    real_run, chunk = engine.Engine.run, apart.APART_CHUNK
    flags = {k: v for k, v in attrs.items() if k != "APART_CHUNK"}

    def run(self):
        for k, v in flags.items():
            setattr(self, k, v)
        return real_run(self)

    engine.Engine.run = run
    apart.APART_CHUNK = attrs.get("APART_CHUNK", chunk)
    try:
        yield
    finally:
        engine.Engine.run, apart.APART_CHUNK = real_run, chunk


def same(a, b):
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    x, y = dict(a.summary), dict(b.summary)
    for s in (x, y):
        s["sim"] = {k: v for k, v in s["sim"].items() if k != "wall_s"}
    assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)


def runs(cfg, chunk: int):
    """(apart with ``chunk`` arrivals read at a time, simpy's loop): both running ahead."""
    with patched(APART_CHUNK=chunk):
        apart = simulate(cfg)
    with patched(apart=False):
        loop = simulate(cfg)
    return apart, loop


def write_trace(path, rows):
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a!r},{p},{o}\n" for a, p, o in rows))
    return str(path)


cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(sorted(REGISTRY)),
    "blocks": st.integers(30, 600),
    "replicas": st.integers(1, 4),
    "rate": st.floats(1.0, 300.0),
    "n": st.integers(1, 60),
    "pmax": st.integers(1, 500),
    "omax": st.integers(1, 120),
    "seed": st.integers(0, 1000),
    "rows": st.booleans(),
    "chunk": st.sampled_from([1, 2, 5, 4096]),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_apart_is_simpys_loop_on_random_configs(p):
    cfg = tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]}, scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"]}, workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]),
        output={"step_records": p["rows"], "plots": False, "progress": False})
    apart, loop = runs(cfg, p["chunk"])
    same(apart, loop)
    assert apart.summary["requests"]["arrived"] == p["n"]


def test_arrivals_at_the_same_instant(tmp_path):
    """Bursts: several requests at one timestamp, for one replica and for several."""
    rows = [(t, 50 + 10 * i, 5 + i) for t in (0.0, 0.5, 0.5000001, 2.0) for i in range(5)]
    for replicas in (1, 3):
        cfg = tiny_config(cluster={"replicas": replicas},
                          workload={"trace": {"path": write_trace(tmp_path / "burst.csv", rows)}})
        for chunk in (1, 3, 4096):
            same(*runs(cfg, chunk))


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


def test_an_arrival_at_the_end_of_a_step_joins_the_plan_made_then(tmp_path):
    """Arrivals at the exact end of a step: the plan made then admits them, apart, under simpy's
    loop running ahead, and stepping one step at a time. With two replicas the replica waits for
    the end of a run it scheduled before the arrival before it was (simpy orders the events of
    one instant by when they were scheduled: arrivals are URGENT, so they still come first)."""
    one = tie_trace(tmp_path / "one.csv", 1, [(0.0, 300, 40)], [(0, 3, 1), (0, 12, 2), (0, 20, 1)])
    two = tie_trace(tmp_path / "two.csv", 2, [(0.0, 300, 40), (0.001, 50, 10)], [(0, 5, 1)])
    for cfg, tied in ((one, range(1, 5)), (two, [2])):
        apart, loop = runs(cfg, 4096)
        same(apart, loop)
        stepped = simulate({**cfg, "engine": {"fast_forward": False}})
        same(apart, stepped)
        req = apart.requests.set_index("request_id")
        for rid in tied:  # admitted by the plan made at its arrival, the end of the step before
            assert req.loc[rid, "first_scheduled_s"] == req.loc[rid, "arrival_s"]
            assert req.loc[rid, "arrival_s"] in set(apart.steps["start_s"])
