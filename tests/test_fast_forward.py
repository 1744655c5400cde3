"""The decode fast-forward is exact: with it on or off, every request record, every step record
and the summary (but its wall time) are identical, for every scheduler and KV policy."""
import json

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config, trace_path, uniform_workload
from sim import simulate
from sim.scheduler import REGISTRY


def both(cfg):
    on = simulate({**cfg, "engine": {"fast_forward": True}})
    off = simulate({**cfg, "engine": {"fast_forward": False}})
    return on, off


def assert_identical(on, off):
    pd.testing.assert_frame_equal(on.requests, off.requests, check_exact=True)
    pd.testing.assert_frame_equal(on.steps, off.steps, check_exact=True)
    a, b = dict(on.summary), dict(off.summary)
    a["sim"] = {k: v for k, v in a["sim"].items() if k != "wall_s"}
    b["sim"] = {k: v for k, v in b["sim"].items() if k != "wall_s"}
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(sorted(REGISTRY)),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "prefix": st.booleans(),
    "blocks": st.integers(30, 600),
    "block_size": st.sampled_from([4, 16]),
    "replicas": st.integers(1, 3),
    "rate": st.floats(1.0, 300.0),
    "n": st.integers(1, 50),
    "pmax": st.integers(1, 500),
    "omax": st.integers(1, 120),
    "seed": st.integers(0, 1000),
    "rows": st.booleans(),  # without step rows, runs also go on past finishes
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_fast_forward_is_exact_on_random_configs(p):
    cfg = tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]}, scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"], "preemption": p["preemption"],
            "prefix_caching": p["prefix"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]),
        output={"step_records": p["rows"], "plots": False, "progress": False})
    assert_identical(*both(cfg))


def test_fast_forward_is_exact_on_the_azure_trace():
    path = trace_path("AzureLLMInferenceTrace_conv.csv")
    cfg = tiny_config(workload={"trace": {"path": str(path), "num_requests": 1500}})
    on, off = both(cfg)
    assert_identical(on, off)
    assert on.summary["sim"]["steps"] > 10_000


def test_long_runs_priced_with_arrays_are_exact(monkeypatch):
    """Few requests with long outputs give decode runs long enough for the vectorised prices."""
    from sim.cost.roofline import RooflineCostModel

    calls = []
    real = RooflineCostModel.decode_series

    def spy(self, *a):
        out = real(self, *a)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(RooflineCostModel, "decode_series", spy)
    cfg = tiny_config(workload={"rate": 0.5, "num_requests": 6, "prompt": {"kind": "fixed", "value": 300},
                                "output": {"kind": "uniform", "min": 200, "max": 900}},
                      kv={"num_gpu_blocks": 200})
    assert_identical(*both(cfg))
    assert any(calls)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.integers(2, 3), router=st.sampled_from(["round_robin", "least_loaded"]),
       think=st.sampled_from([0.0, 0.2]), seed=st.integers(0, 1000))
def test_fast_forward_is_exact_for_closed_loop_clients_on_several_replicas(replicas, router, think, seed):
    """A completion on one replica lets a client send to another in the middle of that one's run
    (a case the closed-loop fast-forward once got wrong): results match stepping one at a time."""
    cfg = tiny_config(seed=seed, cluster={"replicas": replicas, "router": router}, kv={"num_gpu_blocks": 400},
                      workload={"num_requests": 40, "prompt": {"kind": "uniform", "min": 16, "max": 600},
                                "output": {"kind": "uniform", "min": 1, "max": 200},
                                "closed_loop": {"clients": 7, "think_time_s": think}})
    assert_identical(*both(cfg))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_fast_forward_is_exact_with_overlapped_scheduling(p):
    """TRT-LLM's overlap scheduler and vLLM's async scheduling remember when they last planned;
    runs (and batches started without a plan) must leave them deciding exactly as single steps
    would."""
    sched = ({"name": "trtllm", "overlap_scheduler": True, "enable_chunked_prefill": p["prefix"]} if p["seed"] % 2
             else {"name": "vllm_v1", "async_scheduling": True})
    cfg = tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]}, scheduler=sched,
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"], "preemption": p["preemption"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]))
    assert_identical(*both(cfg))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 50), st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), max_size=12),
       st.sampled_from([1, 2, 4, 16]), st.integers(0, 40), st.integers(0, 200))
def test_used_and_peak_used_count_the_grown_blocks(start_used, grown, bs, steps, used_end):
    """``DecodeRun.used``, ``used_at`` and ``peak_used`` (read from ``grown``: a request got a
    block at its first step and every ``bs`` steps after) against blocks counted step by step;
    ``peak_used`` is the max of ``used`` with the last step's value replaced by what the pool held
    at the run's end."""
    from sim.fastforward import DecodeRun

    at = [first + t * bs for first, blocks in grown for t in range(blocks)]  # each block's step
    expect = [start_used + sum(1 for k in at if k <= j) for j in range(steps)]
    run = DecodeRun([], [0.0] * (steps + 1), None, start_used, grown, bs, "roofline", steps)
    assert run.used == expect
    assert [run.used_at(j) for j in range(steps)] == expect
    if steps:
        expect[-1] = used_end
        assert run.peak_used(used_end) == max(expect)
    else:
        assert run.peak_used(used_end) == used_end

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(at=st.floats(0.5, 12.0), duration=st.floats(0.05, 3.0), threshold=st.sampled_from([1, 2, 16]),
       clients=st.integers(1, 2), seed=st.integers(0, 20))
def test_a_crashed_request_re_prefilled_token_by_token_is_no_decode(at, duration, threshold, clients, seed):
    """A request that had emitted tokens when its replica crashed prefills again from scratch;
    with ``long_prefill_token_threshold`` 1 it gets one token a step, like a decode, and the fast
    paths once ran it as one (it finished ~9 s early on a closed loop of one client)."""
    cfg = tiny_config(seed=seed, scheduler={"long_prefill_token_threshold": threshold},
                      workload={"closed_loop": {"clients": clients}, "num_requests": 12,
                                "prompt": {"kind": "uniform", "min": 200, "max": 800},
                                "output": {"kind": "uniform", "min": 20, "max": 300}},
                      faults={"events": [{"kind": "crash", "at_s": at, "replica": 0, "duration_s": duration}]})
    assert_identical(*both(cfg))


def test_the_crash_found_by_fuzzing_is_exact():
    """The fuzzing harness's case: one client, threshold 1, a crash in the middle of a decode."""
    cfg = tiny_config(scheduler={"long_prefill_token_threshold": 1},
                      workload={"closed_loop": {"clients": 1}, "num_requests": 30,
                                "prompt": {"kind": "fixed", "value": 1000}, "output": {"kind": "fixed", "value": 400}},
                      faults={"events": [{"kind": "crash", "at_s": 6.3, "replica": 0, "duration_s": 1.3}]})
    on, off = both(cfg)
    assert on.summary["requests"]["completed"] == 30
    assert_identical(on, off)


prefix_cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(["vllm_v1", "sarathi", "priority", "orca", "vllm"]),
    "eviction": st.sampled_from(["lru", "lfu", "fifo"]),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "blocks": st.integers(40, 400),
    "block_size": st.sampled_from([4, 16]),
    "budget": st.sampled_from([32, 128, 2048]),
    "prompts": st.integers(1, 4),
    "prompt_tokens": st.integers(16, 300),
    "rate": st.floats(2.0, 200.0),
    "n": st.integers(2, 40),
    "pmax": st.integers(1, 300),
    "omax": st.integers(2, 150),
    "seed": st.integers(0, 1000),
    "rows": st.booleans(),
})


def assert_prefix_case_exact(p: dict, **kv) -> None:
    """A ``prefix_cases`` draw (with ``kv`` keys added to its cache) runs identically with fast
    paths on and off; a config the models refuse is no case."""
    sched = {"name": p["scheduler"]}
    if p["scheduler"] != "vllm":
        sched["max_num_batched_tokens"] = p["budget"]
    wl = uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"])
    wl["system_prompts"] = {"count": p["prompts"], "tokens": p["prompt_tokens"]}
    cfg = tiny_config(
        seed=p["seed"], scheduler=sched, workload=wl,
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"], "preemption": p["preemption"],
            "prefix_caching": True, "eviction": p["eviction"], **kv},
        output={"step_records": p["rows"], "plots": False, "progress": False})
    try:
        on, off = both(cfg)
    except Exception as e:  # a config the models refuse (a prompt the pool can never hold) is no case here
        if type(e).__name__ in ("ConfigError", "CapacityError", "MemoryShortfall"):
            return
        raise
    assert_identical(on, off)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix_cases)
def test_fast_forward_is_exact_with_prefix_hits_and_a_queue(p):
    """Shared system prompts (prefix hits), chunked prefill and tight pools, so that decode runs
    start while requests wait and their growth evicts cached blocks, some of them the waiting
    head's hits (the fast-forward stops before such a step: ``KVManager.evicts_watched``), under
    every eviction policy: identical to single steps."""
    assert_prefix_case_exact(p)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix_cases, st.sampled_from([4, 30, 300]), st.sampled_from([None, 0.01]))
def test_fast_forward_is_exact_with_a_tiered_cache_and_a_queue(p, host_blocks, disk_gib):
    """As above with a host tier (small ones drop, so the waiting head's lower-tier hit can
    shrink; every GPU eviction can make it grow) and sometimes a disk tier under it: decode runs
    stop before a step that could move the head's hit (``TieredKVManager.evicts_watched``)."""
    kv = {"num_cpu_blocks": host_blocks}
    if disk_gib:
        kv.update(disk_offload_gib=disk_gib, disk_read_gbps=5.0)
    assert_prefix_case_exact(p, **kv)
