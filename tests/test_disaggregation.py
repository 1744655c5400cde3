"""Prefill/decode disaggregation (Splitwise, ISCA'24; DistServe, OSDI'24): exact timing of one
request, invariants on random configs, and the known result (no prefill-decode interference)."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_run_invariants, tiny_config, uniform_workload
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import build_config, load_config
from sim.cost.roofline import RooflineCostModel
from sim.engine import Engine
from sim.errors import ConfigError
from sim.scheduler import REGISTRY
from sim.types import BatchShape


@pytest.mark.parametrize("scheduler", ["vllm", "vllm_v1"])
def test_single_request_prefills_transfers_then_decodes(scheduler):
    prompt, output = 1000, 4
    cfg = tiny_config(cluster={"replicas": 2, "prefill_replicas": 1}, scheduler={"name": scheduler},
                      workload={"num_requests": 1, "prompt": {"kind": "fixed", "value": prompt},
                                "output": {"kind": "fixed", "value": output}})
    res = simulate(cfg)
    r = res.requests.iloc[0]
    m, hw = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    cm = RooflineCostModel(m, hw)
    prefill = cm.step_time(BatchShape((prompt,), (0,))).total
    transfer = prompt * m.kv_bytes_per_token() / hw.host_bw
    decodes = sum(cm.step_time(BatchShape((1,), (prompt + i,))).total for i in range(output - 1))
    assert r.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert r.e2e_s == pytest.approx(prefill + transfer + decodes, rel=1e-9)
    assert r.replica == 1  # finished on the decode replica
    assert list(res.steps.replica) == [0] + [1] * (output - 1)


def test_one_token_requests_never_leave_the_prefill_replica():
    cfg = tiny_config(cluster={"replicas": 2, "prefill_replicas": 1},
                      workload={"num_requests": 5, "output": {"kind": "fixed", "value": 1}})
    res = simulate(cfg)
    assert (res.requests.replica == 0).all() and (res.requests.status == "finished").all()


def test_needs_a_decode_replica():
    with pytest.raises(ConfigError, match="prefill_replicas"):
        build_config({"cluster": {"replicas": 2, "prefill_replicas": 2}})


cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(sorted(REGISTRY)),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "blocks": st.integers(40, 400),
    "replicas": st.integers(2, 4),
    "rate": st.floats(1.0, 200.0),
    "n": st.integers(1, 40),
    "pmax": st.integers(1, 500),
    "omax": st.integers(1, 80),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_invariants_under_disaggregation(p):
    cfg = load_config(tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"], "prefill_replicas": p["replicas"] // 2},
        scheduler={"name": p["scheduler"]}, kv={"num_gpu_blocks": p["blocks"], "preemption": p["preemption"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"])))
    eng = Engine(cfg)
    out = eng.run()
    assert_run_invariants(eng, out)
    assert eng.disagg is None or eng.disagg.in_flight == 0


def test_disaggregation_removes_prefill_interference_from_decode():
    """DistServe's motivation: colocated prefills stall running decodes (long ITL tail); with the
    same GPUs split into a prefill and decode pools, decode steps are never interrupted."""
    wl = {"rate": 14.0, "num_requests": 800, "prompt": {"kind": "lognormal", "median": 1020, "sigma": 0.5, "max": 8192},
          "output": {"kind": "lognormal", "median": 129, "sigma": 1.0, "max": 2048}}
    colo = simulate(tiny_config(cluster={"replicas": 3}, workload=wl)).summary
    dis = simulate(tiny_config(cluster={"replicas": 3, "prefill_replicas": 1}, workload=wl)).summary
    assert dis["itl_s"]["p99"] < 0.5 * colo["itl_s"]["p99"]
    assert dis["tpot_s"]["p99"] < colo["tpot_s"]["p99"]
    assert dis["ttft_s"]["p50"] > colo["ttft_s"]["p50"]  # one prefill replica instead of three


def test_prefill_replicas_never_decode_while_every_decode_replica_is_down():
    """2 prefill + 2 decode replicas, both decode replicas down from 5 s to 15 s: the requests
    they held and the transfers that land meanwhile wait for a decode replica (counted), none
    is decoded by a prefill-only replica, every request completes, and nothing starts decoding
    again before the restart."""
    from sim.config import load_config
    from sim.engine import Engine
    from sim.metrics.records import requests_frame, steps_frame

    cfg = tiny_config(cluster={"replicas": 4, "prefill_replicas": 2}, workload={
        "rate": 10.0, "num_requests": 300, "prompt": {"kind": "uniform", "min": 16, "max": 400},
        "output": {"kind": "fixed", "value": 200}},
        faults={"events": [{"kind": "crash", "at_s": 5.0, "replica": r, "duration_s": 10.0} for r in (2, 3)]})
    eng = Engine(load_config(cfg))
    out = eng.run()
    steps, req = steps_frame(out), requests_frame(out)
    assert steps[steps.replica < 2].decode_tokens.sum() == 0
    assert (req.status == "finished").all() and len(req) == 300
    f = eng.dynamics.log
    assert f.parked_for_decode > 0 and not eng.dynamics.parked_decode
    down = steps[(steps.start_s >= 5.0) & (steps.start_s < 15.0)]
    assert down.decode_tokens.sum() == 0  # nobody decodes while the decode pool is down
    late = steps[(steps.replica >= 2) & (steps.start_s >= 15.0)]
    assert late.prefill_tokens.sum() > 0  # the decode replicas recompute the parked requests' KV
