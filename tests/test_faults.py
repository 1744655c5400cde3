"""Faults and autoscaling: exact outcomes on tiny cases, invariants on random fault schedules."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from sim import simulate
from sim.cli import main
from sim.cluster.autoscale import Decision, FleetLog, decide, desired_replicas
from sim.cluster.faults import FaultSchedule, scale_columns, scale_step
from sim.config import Autoscale, FaultEvent, load_config
from sim.engine import Engine
from sim.metrics.records import requests_frame, steps_frame
from sim.errors import ConfigError
from sim.types import COMPONENTS, BatchShape, StepTime

PROMPT = 100


def two_requests(tmp_path, output=12, replicas=1, faults=(), on_crash="requeue", **sections):
    """Two requests of a 100-token prompt arriving together at t = 0 (a generic trace)."""
    path = tmp_path / "two.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{PROMPT},{output}\n0,{PROMPT},{output}\n")
    return tiny_config(workload={"trace": {"path": str(path)}}, cluster={"replicas": replicas},
                       faults={"on_crash": on_crash, "events": list(faults)}, **sections)


def prices(cfg):
    """(prefill of both prompts of ``n`` tokens each, decode step of both at context ``c``)."""
    cost = Engine(load_config(cfg)).cost
    prefill = lambda n: cost.step_time(BatchShape((n, n), (0, 0))).total  # noqa: E731
    decode = lambda c: cost.step_time(BatchShape((1, 1), (c, c))).total  # noqa: E731
    return prefill, decode


# ---------------------------------------------------------------------------------- exact cases

@pytest.mark.parametrize("fast_forward", [True, False])
def test_crash_requeues_both_requests_and_restart_recomputes_them(tmp_path, fast_forward):
    out_tokens, down = 12, 0.5
    base = two_requests(tmp_path, out_tokens, engine={"fast_forward": fast_forward})
    prefill, decode = prices(base)
    p = prefill(PROMPT)
    t_c = p + decode(PROMPT) + 0.5 * decode(PROMPT + 1)  # inside the second decode step
    cfg = two_requests(tmp_path, out_tokens, faults=[{"kind": "crash", "at_s": t_c, "replica": 0, "duration_s": down}],
                       engine={"fast_forward": fast_forward})
    res = simulate(cfg)
    f = res.summary["faults"]
    assert f["requeued"] == 2 and f["lost"] == 0 and f["by_kind"] == {"crash": 1}
    assert [(e["event"], e["t_s"]) for e in f["timeline"]] == [("crash", t_c), ("restart", t_c + down)]
    # the crash discarded the second decode step: 2 tokens each survive; at the restart the replica
    # recomputes prompt + 2 generated tokens and samples the 3rd token, then decodes the rest
    t = t_c + down + prefill(PROMPT + 2)
    for c in range(PROMPT + 2, PROMPT + out_tokens - 1):
        t += decode(c)
    for r in res.requests.itertuples():
        assert r.status == "finished" and r.generated_tokens == out_tokens
        assert r.first_token_s == pytest.approx(p, rel=1e-12)
        assert r.finish_s == pytest.approx(t, rel=1e-12)
        assert r.max_itl_s == pytest.approx(t_c + down + prefill(PROMPT + 2) - (p + decode(PROMPT)), rel=1e-12)


def test_crash_with_lose_loses_both_with_the_reason(tmp_path):
    cfg = two_requests(tmp_path, faults=[{"kind": "crash", "at_s": 0.01, "replica": 0, "duration_s": 1}], on_crash="lose")
    res = simulate(cfg)
    s = res.summary["requests"]
    assert (s["arrived"], s["completed"], s["rejected"], s["lost"]) == (2, 0, 0, 2)
    assert s["lost_reasons"] == {"replica_crash": 2} and res.summary["faults"]["lost_reasons"] == {"replica_crash": 2}
    assert set(res.requests.status) == {"lost"}
    assert res.requests.reject_reason.str.startswith("replica_crash: replica 0 failed at 0.01 s").all()
    assert res.summary["sim"]["simulated_s"] == 0.01  # the restart timer does not stretch the run


def test_crash_requeues_to_the_other_replica(tmp_path):
    cfg = two_requests(tmp_path, replicas=2, faults=[{"kind": "crash", "at_s": 0.01, "replica": 0, "duration_s": 100}])
    res = simulate(cfg)
    assert res.summary["faults"]["requeued"] == 1
    assert list(res.requests.replica) == [1, 1]  # request 0 moved from replica 0 to replica 1
    assert (res.requests.status == "finished").all()
    # the restart at t = 100.01 lies beyond the last request's end: not applied, run not stretched
    assert [e["event"] for e in res.summary["faults"]["timeline"]] == ["crash"]
    assert res.summary["sim"]["simulated_s"] < 100


def test_straggler_multiplies_every_step_in_its_window(tmp_path):
    prefill, decode = prices(two_requests(tmp_path, 4))
    p = prefill(PROMPT)
    cfg = two_requests(tmp_path, 4, faults=[{"kind": "straggler", "at_s": p, "replica": 0, "duration_s": 10, "factor": 3}])
    res = simulate(cfg)
    t = p + sum(3 * decode(c) for c in range(PROMPT, PROMPT + 3))  # the prefill started before the window
    assert res.requests.finish_s.tolist() == pytest.approx([t, t], rel=1e-12)
    assert res.summary["faults"]["by_kind"] == {"straggler": 1}


def test_degraded_link_slows_only_the_communication(tmp_path):
    base = two_requests(tmp_path, 3, parallelism={"tp": 2})
    cost = Engine(load_config(base)).cost
    st0 = cost.step_time(BatchShape((PROMPT, PROMPT), (0, 0)))
    assert st0.comm > 0
    cfg = two_requests(tmp_path, 3, parallelism={"tp": 2}, faults=[{"kind": "degraded_link", "at_s": 0, "duration_s": 1e-6, "factor": 5}])
    res = simulate(cfg)
    ttft = res.requests.first_token_s.iloc[0]
    assert ttft == pytest.approx(st0.total + 4 * st0.comm, rel=1e-12)  # only the step starting at t = 0
    slowed = res.steps.iloc[0]
    assert slowed.t_comm_s == pytest.approx(5 * st0.comm, rel=1e-12) and slowed.t_gemm_s == st0.gemm


def test_degraded_link_slows_a_disaggregated_kv_transfer(tmp_path):
    sections = dict(cluster={"replicas": 2, "prefill_replicas": 1, "kv_transfer_gbps": 1.0})
    path = tmp_path / "one.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,1000,3\n")
    base = tiny_config(workload={"trace": {"path": str(path)}}, **sections)
    ok = simulate(base).requests.iloc[0]
    slow = simulate({**base, "faults": {"events": [{"kind": "degraded_link", "at_s": 0, "duration_s": 5, "factor": 4}]}}).requests.iloc[0]
    eng = Engine(load_config(base))
    transfer = 1000 * eng.model.kv_bytes_per_token("bf16") / 1e9
    assert slow.finish_s - ok.finish_s == pytest.approx(3 * transfer, rel=1e-9)


# ---------------------------------------------------------------------------------- config errors

@pytest.mark.parametrize("event,needle", [
    ({"kind": "crash", "at_s": 1, "duration_s": 1}, "needs replica"),
    ({"kind": "crash", "at_s": 1, "replica": 0}, "needs duration_s"),
    ({"kind": "straggler", "at_s": 1, "replica": 0, "duration_s": 1}, "needs factor"),
    ({"kind": "straggler", "at_s": 1, "replica": 0, "duration_s": 1, "factor": 0.5}, "faults.events.0.factor"),
    ({"kind": "crash", "at_s": -1, "replica": 0, "duration_s": 1}, "faults.events.0.at_s"),
    ({"kind": "melt", "at_s": 1}, "faults.events.0.kind"),
    ({"kind": "crash", "at_s": 1, "replica": 3, "duration_s": 1}, "faults.events.0.replica: 3 is not one of the 2 replicas"),
])
def test_bad_fault_is_one_clear_error(event, needle):
    with pytest.raises(ConfigError) as e:
        load_config(tiny_config(cluster={"replicas": 2}, faults={"events": [event]}))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_autoscale_is_one_clear_error():
    with pytest.raises(ConfigError, match="max_replicas .1. is below min_replicas .2."):
        load_config(tiny_config(cluster={"autoscale": {"enabled": True, "min_replicas": 2, "max_replicas": 1}}))
    with pytest.raises(ConfigError, match="replicas .5. must lie within"):
        load_config(tiny_config(cluster={"replicas": 5, "autoscale": {"enabled": True, "max_replicas": 4}}))


def test_cli_rejects_a_bad_fault_before_running(capsys):
    rc = main(["run", "--quiet", "--set", "faults.on_crash=retry"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "faults.on_crash" in err


# ---------------------------------------------------------------------------------- pure pieces

def test_schedule_factors_multiply_and_edges_end_runs():
    events = [FaultEvent(kind="straggler", at_s=1, replica=0, duration_s=2, factor=2),
              FaultEvent(kind="straggler", at_s=2, replica=0, duration_s=2, factor=3),
              FaultEvent(kind="degraded_link", at_s=0, duration_s=5, factor=4)]
    s = FaultSchedule(events)
    assert s.factors(0, 0.5) == (1.0, 4.0)
    assert s.factors(0, 2.5) == (6.0, 4.0) and s.factors(1, 2.5) == (1.0, 4.0)
    assert s.factors(0, 3.0) == (3.0, 4.0) and s.factors(0, 5.0) == (1.0, 1.0)
    assert [s.next_edge(0, t) for t in (0, 1, 2.5, 4, 5)] == [1, 2, 3, 5, float("inf")]
    assert s.next_edge(1, 0) == 5


def test_scaled_columns_equal_scaled_steps():
    rng = np.random.default_rng(0)
    sts = [StepTime(0.0, *rng.random(len(COMPONENTS))) for _ in range(20)]
    sts = [StepTime(sum(getattr(x, c) for c in COMPONENTS), *(getattr(x, c) for c in COMPONENTS)) for x in sts]
    cols = {c: np.array([getattr(x, c) for x in sts]) for c in ("total", *COMPONENTS)}
    for compute, link in ((1.0, 1.0), (2.5, 1.0), (1.0, 3.0), (1.7, 4.2)):
        scaled = scale_columns(cols, compute, link)
        for i, x in enumerate(sts):
            y = scale_step(x, compute, link)
            assert [getattr(y, c) for c in ("total", *COMPONENTS)] == [scaled[c][i] for c in ("total", *COMPONENTS)]
            assert y.total == pytest.approx(sum(getattr(y, c) for c in COMPONENTS), rel=1e-12)
    assert scale_step(sts[0], 1.0, 1.0) is sts[0]


def test_autoscale_decision_is_ceil_of_outstanding_over_target():
    a = Autoscale(enabled=True, min_replicas=1, max_replicas=4, target_outstanding=10)
    assert [desired_replicas(n, a) for n in (0, 1, 10, 11, 35, 1000)] == [1, 1, 1, 2, 4, 4]
    assert decide(25, 1, [], a) == Decision(add=2)
    assert decide(5, 3, [0, 2], a) == Decision(remove=(2, 0))
    assert decide(5, 3, [1], a) == Decision(remove=(1,))  # nothing busy to drain
    assert decide(15, 2, [0, 1], a) == Decision()
    # too few idle: the busy ones with the fewest outstanding requests drain (ties: highest index)
    assert decide(5, 4, [1], a, busy={0: 3, 2: 1, 3: 1}) == Decision(remove=(1,), drain=(3, 2))
    # draining replicas count as leaving, and come back before any new one is provisioned
    assert decide(5, 3, [], a, busy={0: 2}, draining=[1, 2]) == Decision()
    assert decide(25, 3, [], a, busy={0: 9}, draining=[1, 2]) == Decision(undrain=(1, 2))
    assert decide(35, 3, [], a, busy={0: 9}, draining=[2]) == Decision(add=1, undrain=(2,))


def test_fleet_gpu_hours_count_provisioned_time_only():
    f = FleetLog(gpus_per_replica=2)
    f.provisioned.update({0: 0.0, 1: 100.0, 2: 200.0})
    f.released[1] = 400.0
    f.record(0.0, 1, 1)
    f.record(100.0, 2, 1)
    assert f.gpu_hours(1000.0) == pytest.approx(2 * (1000 + 300 + 800) / 3600)
    assert f.gpu_hours(150.0) == pytest.approx(2 * (150 + 50) / 3600)
    assert [r[:3] for r in f.frame_rows(1000.0)] == [(0.0, 1, 1), (100.0, 2, 1), (1000.0, 2, 1)]


# ---------------------------------------------------------------------------------- autoscaling

def test_autoscaler_adds_replicas_after_cold_start_and_pays_for_them():
    cold, interval = 2.0, 1.0
    cfg = tiny_config(cluster={"replicas": 1, "autoscale": {"enabled": True, "min_replicas": 1, "max_replicas": 3,
                                                            "target_outstanding": 4, "interval_s": interval,
                                                            "cold_start_s": cold}},
                      workload={"rate": 40.0, "num_requests": 300, "output": {"kind": "fixed", "value": 200}},
                      cost={"usd_per_gpu_hour": 2.0})
    res = simulate(cfg)
    a = res.summary["autoscale"]
    assert res.summary["requests"]["completed"] == 300
    assert a["peak_provisioned"] == 3 and a["replicas_started"] >= 3
    series = a["series"]
    assert all(p["t_s"] % interval == 0 for p in series[1:-1])  # decisions happen on the interval
    added = next(p["t_s"] for p in series if p["provisioned"] > 1)
    served = next(p["t_s"] for p in series if p["serving"] > 1)
    assert served == added + cold  # the new replica serves after exactly the cold start
    assert set(res.requests.replica) >= {0, 1, 2}
    assert not (res.requests.first_scheduled_s[res.requests.replica == 1] < added + cold).any()
    # cost: each replica only while provisioned, less than the peak fleet over the whole run
    assert res.summary["cost"]["gpu_hours"] == a["gpu_hours"] < 3 * res.summary["sim"]["simulated_s"] / 3600
    assert res.summary["cost"]["usd"] == pytest.approx(2.0 * a["gpu_hours"])
    assert series[-1]["gpu_hours"] == pytest.approx(a["gpu_hours"])


def test_autoscaler_drains_busy_replicas_under_load():
    """A balancing router keeps every replica busy, so none is ever idle and, without draining,
    a fleet scaled up stays at its peak; draining brings it down while requests still arrive
    (the router stops sending to a draining replica, which is released once empty and paid for
    until then), without dropping a request."""
    cfg = tiny_config(cluster={"replicas": 1, "router": "least_loaded", "autoscale": {
        "enabled": True, "min_replicas": 1, "max_replicas": 6, "interval_s": 5, "target_outstanding": 2,
        "cold_start_s": 30}}, workload={"rate": 25.0, "num_requests": 3000})
    eng = Engine(load_config(cfg))
    out = eng.run()
    req = requests_frame(out)
    assert (req.status == "finished").all() and len(req) == 3000
    fleet = out.fleet
    assert fleet.drained >= 1 and set(eng.dynamics.draining) == set()
    sizes = [p for _, p, _ in fleet.series]
    assert max(sizes) == 6 and min(sizes[sizes.index(6):]) < 6  # down from the peak while requests arrive
    for idx, t_release in fleet.released.items():  # a released replica took no request after its release
        assert not (req[req.replica == idx].arrival_s > t_release).any()
    last = {i: req[req.replica == i].finish_s.max() for i in fleet.released}
    for idx, t_release in fleet.released.items():  # and held none: it finished all it had
        assert last[idx] != last[idx] or last[idx] <= t_release + 1e-9


# ---------------------------------------------------------------------------------- invariants

fault_event = st.one_of(
    st.builds(lambda t, r, d: {"kind": "crash", "at_s": t, "replica": r, "duration_s": d},
              st.floats(0, 6), st.integers(0, 2), st.floats(0.01, 3)),
    st.builds(lambda t, r, d, f: {"kind": "straggler", "at_s": t, "replica": r, "duration_s": d, "factor": f},
              st.floats(0, 6), st.integers(0, 2), st.floats(0.01, 3), st.floats(1, 5)),
    st.builds(lambda t, d, f: {"kind": "degraded_link", "at_s": t, "duration_s": d, "factor": f},
              st.floats(0, 6), st.floats(0.01, 3), st.floats(1, 5)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(fault_event, max_size=5), on_crash=st.sampled_from(["requeue", "lose"]),
       router=st.sampled_from(["round_robin", "least_loaded"]), setup=st.sampled_from(["plain", "autoscale", "disagg", "closed"]),
       seed=st.integers(0, 50), threshold=st.sampled_from([None, 1, 16, 128]), replicas=st.sampled_from([1, 3]))
def test_every_request_is_conserved_and_fast_forward_stays_exact(events, on_crash, router, setup, seed, threshold,
                                                                 replicas):
    """Crashes, stragglers and degraded links on every kind of fleet, with any prefill chunking
    (``long_prefill_token_threshold`` 1 re-prefills a crashed request one token a step, which
    the fast paths once took for decodes), open and closed loops."""
    events = [e for e in events if e.get("replica", 0) < replicas]
    cluster = {"replicas": replicas, "router": router}
    workload = {"rate": 15.0, "num_requests": 60, "output": {"kind": "uniform", "min": 1, "max": 150}}
    if setup == "autoscale":
        cluster["autoscale"] = {"enabled": True, "min_replicas": 1, "max_replicas": 5, "target_outstanding": 3,
                                "interval_s": 0.7, "cold_start_s": 0.4}
    elif setup == "disagg":
        cluster["prefill_replicas"] = 1
    elif setup == "closed":
        workload["closed_loop"] = {"clients": 6, "think_time_s": 0.2}
    if setup == "disagg" and replicas == 1:
        cluster["replicas"] = 2
    base = tiny_config(cluster=cluster, parallelism={"tp": 2}, faults={"on_crash": on_crash, "events": events}, seed=seed,
                       kv={"num_gpu_blocks": 120}, workload=workload,
                       scheduler={"name": "vllm_v1", "long_prefill_token_threshold": threshold})
    runs = []
    for ff in (True, False):
        cfg = load_config({**base, "engine": {"fast_forward": ff}})
        eng = Engine(cfg)
        out = eng.run()
        runs.append((eng, out))
        req = requests_frame(out)
        assert len(req) == 60
        assert set(req.status) <= {"finished", "rejected", "lost"}  # arrived = completed + rejected + lost
        lost = req[req.status == "lost"]
        if on_crash == "requeue":
            assert lost.empty
        assert lost.reject_reason.str.match(r"(replica_crash|no_replica): ").all()
        if events:
            assert out.faults["lost"] == len(lost)
        done = req[req.status == "finished"]
        assert (done.generated_tokens == done.output_tokens).all() and (done.first_token_s <= done.finish_s).all()
        for rep in eng.replicas:  # nothing left queued anywhere
            assert not rep.scheduler.has_work()
            if rep.up:
                assert rep.kv.num_used == 0
    (e1, o1), (e2, o2) = runs
    pd.testing.assert_frame_equal(requests_frame(o1), requests_frame(o2), check_exact=True)
    pd.testing.assert_frame_equal(steps_frame(o1).drop(columns="cost_source"), steps_frame(o2).drop(columns="cost_source"), check_exact=True)
    assert o1.simulated_s == o2.simulated_s and e1.dynamics.log.requeued == e2.dynamics.log.requeued
    event(f"requeued: {e1.dynamics.log.requeued > 0}, lost: {bool(e1.dynamics.log.lost)}, setup: {setup}")
