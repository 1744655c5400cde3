"""Every run either completes or rejects with a reason, however small the KV pool: every
scheduler x preemption mode x prefix caching x disaggregation, with requests sized around the
pool and its watermark (the fuzzing that found the "made no progress" livelock of issue 10)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import load_config
from sim.engine import Engine
from sim.metrics.records import requests_frame
from sim.metrics.summary import summarize
from sim.scheduler import REGISTRY

POLICIES = sorted(REGISTRY)


@st.composite
def tiny_configs(draw):
    name = draw(st.sampled_from(POLICIES))
    block_size = draw(st.sampled_from([4, 16]))
    blocks = draw(st.integers(2, 40))
    pool = blocks * block_size  # tokens
    knobs = {"max_num_batched_tokens": draw(st.sampled_from([32, 1024])), "max_num_seqs": draw(st.sampled_from([2, 64]))}
    if name == "sarathi":
        knobs["chunk_size"] = draw(st.sampled_from([4, 32]))
    if name == "orca":
        knobs["reserve"] = "max_output_tokens"
    disagg = draw(st.booleans())
    prefix = draw(st.booleans())
    watermark = draw(st.sampled_from([0.0, 0.1, 0.3]))
    if draw(st.booleans()):  # lengths spread over the pool: some fit, some wait, some never fit
        prompt = {"kind": "uniform", "min": max(1, pool // 4), "max": max(2, pool * 3 // 4)}
        output = {"kind": "uniform", "min": 1, "max": max(2, pool // 3)}
    else:  # prompts that just fill what the watermark leaves: a preempted or handed-off one may never fit again
        kept = int(watermark * blocks)
        edge = max(1, (blocks - kept) * block_size)
        prompt = {"kind": "uniform", "min": max(1, edge - block_size), "max": edge}
        output = {"kind": "uniform", "min": 1, "max": max(2, kept * block_size)}
    workload = {"rate": draw(st.sampled_from([10.0, 1000.0])), "num_requests": draw(st.integers(1, 12)),
                "prompt": prompt, "output": output}
    if prefix:
        workload["system_prompts"] = {"count": 2, "tokens": max(1, pool // 3)}
    return {
        "model": "llama-2-7b", "hardware": "h100-sxm",
        "scheduler": {"name": name, **knobs},
        "kv": {"block_size": block_size, "num_gpu_blocks": blocks,
               "watermark": watermark,
               "preemption": draw(st.sampled_from(["recompute", "swap"])),
               "swap_space_gib": draw(st.sampled_from([0.0005, 1.0])),  # 1 MiB holds 2 blocks of 16 tokens
               "prefix_caching": prefix},
        "cluster": ({"replicas": draw(st.integers(2, 3)), "prefill_replicas": 1} if disagg
                    else {"replicas": draw(st.sampled_from([1, 2]))}),
        "workload": workload,
        "seed": draw(st.integers(0, 10_000)),
        "output": {"plots": False, "progress": False},
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_configs())
def test_every_request_completes_or_is_rejected_with_a_reason(data):
    cfg = load_config(data)
    eng = Engine(cfg)
    out = eng.run()  # never raises
    req = requests_frame(out)
    assert set(req["status"]) <= {"finished", "rejected"}
    rejected = req[req["status"] == "rejected"]
    assert rejected["reject_reason"].map(lambda r: bool(r) and ":" in r).all()  # "code: detail"
    done = req[req["status"] == "finished"]
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    s = summarize(out, req, None, 0.0)["requests"]
    assert s["arrived"] == cfg.workload.num_requests == s["completed"] + s["rejected"] and s["unfinished"] == 0
    assert sum(s["rejected_by_reason"].values()) == s["rejected"]
    for rep in eng.replicas:  # nothing left behind
        assert not rep.scheduler.has_work() and rep.kv.held == {} and rep.kv.swapped == {} and rep.kv.num_used == 0
    # bounded steps: each step computes at least one token, and a request computes its prompt and
    # output at most once per admission
    work = int(((req["prompt_tokens"] + req["output_tokens"]) * (1 + req["preemptions"])).sum())
    assert out.steps.count <= work
