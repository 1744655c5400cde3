"""The load verdict (sim/metrics/verdict.py): exact verdicts on hand-made request rows, and the
same verdict whatever the run keeps (per-step rows or not, streamed or not)."""
import numpy as np
import pandas as pd
import pytest

from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.metrics.verdict import LoadFold, judge_load


def rows(arrival, start, service):
    arrival = np.asarray(arrival, float)
    start = np.asarray(start, float)
    return pd.DataFrame({"status": "finished", "arrival_s": arrival, "first_scheduled_s": start,
                         "finish_s": start + service})


def verdict(req: pd.DataFrame, replicas: int = 1) -> dict:
    f = LoadFold(float(req["finish_s"].max()))
    f.add(req)
    return judge_load(f, replicas)


def test_stable_every_request_starts_on_arrival():
    # 100 requests, one a second, each served at once in 0.5 s: nothing ever waits
    a = np.arange(100.0)
    v = verdict(rows(a, a, 0.5))
    assert v["state"] == "stable"
    assert v["knob"] is None
    ev = v["evidence"]
    assert ev["peak_queue"] == 0 and ev["queue_at_last_arrival"] == 0
    assert ev["offered_rps"] == pytest.approx(1.0)
    assert ev["drain_s"] == pytest.approx(0.5) and ev["drain_excess_s"] == 0.0


def test_overloaded_one_server_half_as_fast_as_arrivals():
    # one a second for 200 s, served one at a time in 2 s each: request k starts at 2k, so the
    # queue grows by half a request a second until the last arrival, and drains 200 s after it
    a = np.arange(200.0)
    v = verdict(rows(a, 2 * a, 2.0), replicas=1)
    assert v["state"] == "overloaded"
    ev = v["evidence"]
    assert ev["queue_growth_rps"] == pytest.approx(0.5, abs=0.02)
    assert ev["queue_growth_share"] == pytest.approx(0.5, abs=0.02)
    assert ev["queue_at_last_arrival"] == pytest.approx(100, abs=1)
    assert ev["drain_s"] == pytest.approx(201.0)  # last arrival 199 s, last finish 400 s
    assert ev["served_rps"] == pytest.approx(200 / 400.0)
    assert "served 0.5 req/s" in v["knob"] and "about 2 replicas (now 1)" in v["knob"]


def test_overloaded_by_the_drain_alone():
    # a queue of 100 at the last arrival (all arrived at once at the end of a quiet
    # span) but served one per 2 s: it drains for 200 s after an arrival span of 100 s
    quiet = np.arange(0.0, 100.0, 10.0)
    burst = np.full(100, 100.0)
    a = np.concatenate([quiet, burst])
    start = np.concatenate([quiet, 100.0 + 2 * np.arange(100)])
    v = verdict(rows(a, start, 2.0))
    assert v["state"] == "overloaded"
    assert v["evidence"]["drain_excess_s"] == pytest.approx(198.0)  # 200 s of drain less the 2 s service
    assert "ended" in v["why"]


def test_backlogged_burst_that_drains_before_the_last_arrival():
    # 50 requests at t=0 served one per second, then one every 10 s from 60 s to 200 s, served at once
    burst_a = np.zeros(50)
    burst_s = np.arange(50.0)
    late = np.arange(60.0, 201.0, 10.0)
    v = verdict(rows(np.concatenate([burst_a, late]), np.concatenate([burst_s, late]), 1.0))
    assert v["state"] == "backlogged"
    ev = v["evidence"]
    assert ev["peak_queue"] == 49 and ev["queue_at_last_arrival"] == 0
    assert "headroom" in v["knob"]


def test_a_small_queue_is_not_a_backlog():
    # 9 requests waiting at most (below the 10-request floor) is stable
    a = np.zeros(10)
    v = verdict(rows(a, np.arange(10.0), 1.0))
    assert v["state"] == "stable" and v["evidence"]["peak_queue"] == 9


def test_rejected_requests_never_wait():
    req = rows(np.arange(30.0), np.arange(30.0), 0.5)
    rej = pd.DataFrame({"status": "rejected", "arrival_s": np.zeros(40), "first_scheduled_s": np.nan,
                        "finish_s": np.nan})
    v = verdict(pd.concat([req, rej], ignore_index=True))
    assert v["state"] == "stable" and v["evidence"]["arrived"] == 70 and v["evidence"]["completed"] == 30


def test_batches_fold_to_the_same_verdict():
    a = np.arange(200.0)
    req = rows(a, 2 * a, 2.0)
    whole = verdict(req)
    f = LoadFold(float(req["finish_s"].max()))
    for part in (req.iloc[150:], req.iloc[:70], req.iloc[70:150]):
        f.add(part)
    assert judge_load(f) == whole


OVER = tiny_config(workload=uniform_workload(400.0, 600, 2000, 200), output={"plots": False, "progress": False})


def test_an_overloaded_run_says_so_in_every_output_mode(tmp_path):
    full = simulate(OVER).summary
    assert full["verdict"]["state"] == "overloaded"
    assert any(w.startswith("verdict: overloaded") for w in full["warnings"])
    rowless = simulate({**OVER, "output": {**OVER["output"], "step_records": False}}).summary
    streamed = simulate({**OVER, "output": {**OVER["output"], "step_records": False, "stream": True}},
                        out=tmp_path).summary
    assert rowless["verdict"] == full["verdict"] == streamed["verdict"]


def test_a_light_run_is_stable():
    s = simulate(tiny_config()).summary
    assert s["verdict"]["state"] == "stable" and not any(w.startswith("verdict") for w in s["warnings"])


def test_capacity_never_calls_an_overloaded_probe_within_slos():
    from sim.sweep.capacity import SearchSettings, judge

    s = {"requests": {"arrived": 500, "completed": 500}, "ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.01},
         "verdict": {"state": "stable", "why": "x"}}
    settings = SearchSettings()
    assert judge(s, settings) == (True, "within SLOs")
    over = {**s, "verdict": {"state": "overloaded", "why": "the waiting queue was still growing"}}
    ok, why = judge(over, settings)
    assert not ok and why == "overloaded: the waiting queue was still growing"
    assert judge({**s, "verdict": {"state": "backlogged", "why": "y"}}, settings)[0]


def test_worst_verdict():
    from sim.metrics.verdict import worst_verdict

    assert worst_verdict(["stable", "overloaded", "backlogged"]) == "overloaded"
    assert worst_verdict(["stable", None]) == "stable" and worst_verdict([None]) is None


def test_a_queue_is_material_by_the_seconds_of_arrivals_it_holds():
    a = np.arange(0.0, 100.0, 0.01)  # 100 req/s for 100 s
    half = verdict(rows(a, a + 0.5, 0.1))  # every request waits 0.5 s: ~50 waiting, half a second of arrivals
    assert half["state"] == "stable" and half["evidence"]["material_queue"] == pytest.approx(100, rel=1e-3)
    assert 45 <= half["evidence"]["peak_queue"] <= 51
    two = verdict(rows(a, a + 2.0, 0.1))  # 2 s of arrivals waiting, steadily: backlogged, not overloaded
    assert two["state"] == "backlogged"
