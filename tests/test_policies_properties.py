"""Invariants of every scheduler x KV policy on hundreds of small random configs, run through the
engine with a tiny KV pool so that preemption, swapping and eviction happen."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import load_config
from sim.engine import Engine
from sim.metrics.records import requests_frame, steps_frame
from sim.scheduler import REGISTRY

POLICIES = sorted(REGISTRY)


def budget_of(cfg) -> int | None:
    """The step token budget a policy promises (vllm v0 and static admit an over-budget
    recompute alone, so they promise none)."""
    k = cfg.scheduler.knobs()
    if cfg.scheduler.name in ("vllm", "static"):
        return None
    return k.chunk_size if cfg.scheduler.name == "sarathi" else k.max_num_batched_tokens


@st.composite
def configs(draw):
    name = draw(st.sampled_from(POLICIES))
    knobs = {"max_num_batched_tokens": draw(st.sampled_from([64, 128, 512])),
             "max_num_seqs": draw(st.sampled_from([2, 8, 64]))}
    if name == "sarathi":
        knobs["chunk_size"] = draw(st.sampled_from([16, 48]))
    if name in ("sjf", "srpt", "lookahead"):
        knobs["predictor"] = draw(st.sampled_from(["oracle", "noisy", "bucketed"]))
    if name in ("sjf", "srpt"):
        knobs["aging_s"] = draw(st.sampled_from([0.5, 5.0]))
    if name == "vllm_v1":
        knobs["long_prefill_token_threshold"] = draw(st.sampled_from([None, 8]))
    block_size = draw(st.sampled_from([4, 16]))
    blocks = draw(st.integers(160, 480)) // block_size  # a pool of 160-480 tokens
    if name == "orca":  # it reserves llama-2-7b's whole 4,096-token context per request
        knobs["reserve"] = draw(st.sampled_from(["max_output_tokens", "context"]))
        block_size, blocks = 16, draw(st.integers(256, 600))
    prefix = draw(st.booleans())
    workload = {"rate": draw(st.sampled_from([5.0, 100.0, 1000.0])), "num_requests": draw(st.integers(5, 40)),
                "prompt": {"kind": "uniform", "min": 1, "max": 60},
                "output": {"kind": "uniform", "min": 1, "max": 40}}
    if prefix:
        workload["system_prompts"] = {"count": 2, "tokens": draw(st.sampled_from([64, 70]))}
    return {
        "model": "llama-2-7b", "hardware": "h100-sxm",
        "scheduler": {"name": name, **knobs},
        "kv": {"block_size": block_size, "num_gpu_blocks": blocks,
               "watermark": draw(st.sampled_from([0.0, 0.05])),
               "preemption": draw(st.sampled_from(["recompute", "swap"])),
               "swap_space_gib": draw(st.sampled_from([0.01, 1.0])),
               "prefix_caching": prefix, "eviction": draw(st.sampled_from(["lru", "lfu", "fifo"]))},
        "cluster": {"replicas": draw(st.sampled_from([1, 1, 2]))},
        "workload": workload,
        "seed": draw(st.integers(0, 1000)),
        "output": {"plots": False, "progress": False},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_invariants_hold_for_every_scheduler_and_kv_policy(data):
    cfg = load_config(data)
    eng = Engine(cfg)
    out = eng.run()
    req, steps = requests_frame(out), steps_frame(out)
    # every request completes or is rejected with a reason
    assert set(req["status"]) <= {"finished", "rejected"}
    assert req.loc[req["status"] == "rejected", "reject_reason"].map(bool).all()
    done = req[req["status"] == "finished"]
    assert (done["generated_tokens"] == done["output_tokens"]).all()  # exactly its output tokens
    # memory never exceeds the pool, and every block comes back
    assert (steps["kv_blocks_used"] <= cfg.kv.num_gpu_blocks).all()
    for rep in eng.replicas:
        assert rep.kv.held == {} and rep.kv.swapped == {} and rep.kv.num_used == 0
        if cfg.kv.prefix_caching:
            assert rep.kv.num_referenced == 0
    budget = budget_of(cfg)
    if budget is not None:
        assert (steps["num_tokens"] <= budget).all()
    assert (done["cached_tokens"] < done["prompt_tokens"]).all()  # the last prompt token is computed


@st.composite
def scenarios(draw):
    name = draw(st.sampled_from(POLICIES))
    reqs = draw(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 12), st.integers(0, 2), st.integers(0, 3)),
                         min_size=1, max_size=12))
    return name, reqs, draw(st.sampled_from([0, 6])), draw(st.booleans()), draw(st.sampled_from([8, 16, 40]))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_step_invariants_on_hand_made_requests(sc):
    """Without the engine: each step stays within the budget and the pool, and all blocks return."""
    from policy_kit import make, req, step

    name, specs, swap, prefix, budget = sc
    knobs = {"chunk_size": budget} if name == "sarathi" else {"max_num_batched_tokens": budget}
    if name == "orca":
        knobs["reserve"] = "max_output_tokens"
    s = make(name, 12, 4, swap_blocks=swap, prefix=prefix, **knobs)
    rs = [req(i, p, o, arrival=0.0, priority=prio, hashes=(h, i) if prefix else None, max_out=o)
          for i, (p, o, prio, h) in enumerate(specs)]
    for r in rs:
        if s.reject_reason(r) is None:
            s.add(r)
    steps = 0
    while s.has_work():
        plan = step(s, float(steps))
        steps += 1
        assert steps < 2000, "no progress"
        assert s.kv.num_used <= 12 and s.kv.swap_used <= swap
        if name not in ("vllm", "static"):
            assert plan.total_tokens <= budget
    assert s.kv.num_used == 0 and not s.kv.held and not s.kv.swapped
    for r in rs:
        assert r.status.value in ("finished", "waiting")  # waiting only if rejected up front
        if r.status.value == "finished":
            assert r.num_generated == r.spec.output_tokens


def test_trtllm_refuses_what_it_could_never_admit():
    """Regression (hypothesis found it: a 9-token prompt under an 8-token budget never ran): TRT-LLM
    without chunked prefill refuses a prompt over max_num_tokens, and GUARANTEED_NO_EVICT refuses a
    sequence whose whole-sequence reservation exceeds the pool."""
    from policy_kit import make, req

    s = make("trtllm", 12, 4, max_num_batched_tokens=8)
    assert s.reject_reason(req(0, 9, 1, arrival=0.0, max_out=1)).startswith("exceeds_token_budget")
    assert s.reject_reason(req(1, 8, 1, arrival=0.0, max_out=1)) is None
    big = make("trtllm", 12, 4, max_num_batched_tokens=64)
    assert big.reject_reason(req(2, 8, 41, arrival=0.0, max_out=41)).startswith("exceeds_kv_capacity")
    chunked = make("trtllm", 12, 4, max_num_batched_tokens=8, enable_chunked_prefill=True)
    assert chunked.reject_reason(req(3, 9, 1, arrival=0.0, max_out=1)) is None


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from([n for n in POLICIES if hasattr(REGISTRY[n], "chunk")]),
       budget=st.integers(1, 10_000), prompt=st.integers(1, 64), generated=st.integers(0, 64),
       cap=st.one_of(st.none(), st.integers(1, 64)))
def test_chunk_keeps_single_tokens_holds(name, budget, prompt, generated, cap):
    """``schedule_running`` skips ``chunk`` for a decode token when the policy says
    ``chunk(r, 1, budget)`` is always 1 (``chunk_keeps_single_tokens``): every policy that says
    so must keep it, whatever the request's progress, budget or knobs."""
    from policy_kit import make, req

    knobs = {"long_prefill_token_threshold": cap} if cap is not None and "long_prefill_token_threshold" in \
        REGISTRY[name].Knobs.model_fields else {}
    s = make(name, 64, 4, **knobs)
    if not getattr(s, "chunk_keeps_single_tokens", False):
        return
    r = req(0, prompt, generated + 2)
    r.num_generated = generated
    r.num_computed = prompt + generated - 1  # one token to compute: a decode (or the prompt's last)
    assert s.chunk(r, 1, budget) == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(POLICIES), seed=st.integers(0, 10_000), blocks=st.integers(6, 40),
       budget=st.integers(4, 64))
def test_decode_batch_is_the_plan_schedule_would_make(name, seed, blocks, budget):
    """``Scheduler.decode_batch`` lets the engine skip planning: whenever it names a batch and the
    pool holds the blocks its tokens need, ``schedule`` must plan exactly one token for each of
    those requests, in that order, and nothing else."""
    import copy

    import numpy as np
    from policy_kit import make, req, step

    rng = np.random.default_rng(seed)
    knobs = {} if name in ("vllm", "static") else {"max_num_batched_tokens": budget}
    if name == "sarathi":
        knobs = {"chunk_size": budget}
    if name == "trtllm" and seed % 2:
        knobs["overlap_scheduler"] = True
    if name == "vllm_v1" and seed % 2:
        knobs["async_scheduling"] = True
    s = make(name, blocks, 4, **knobs)
    pending = [req(i, int(rng.integers(1, 12)), int(rng.integers(1, 12)), arrival=0.0, max_out=12) for i in range(8)]
    checked = 0
    for t in range(200):
        if pending and rng.random() < 0.3:
            r = pending.pop()
            if s.reject_reason(r) is None:
                s.add(r)
        if not s.has_work():
            if not pending:
                break
            continue
        reqs = s.decode_batch()
        if reqs is not None:
            kv = s.kv
            need = sum(1 for r in reqs if r.num_computed + 1 > kv.held[r.id] * kv.block_size)
            if need <= kv.num_free:
                plan = copy.deepcopy(s).schedule(float(t))
                ids = [r.id for r in reqs]
                assert list(plan.num_new_tokens.items()) == [(i, 1) for i in ids]
                assert not (plan.preempted or plan.aborted or plan.swapped_in or plan.cached_tokens)
                checked += 1
        step(s, float(t))
    if name == "vllm_v1" and blocks >= 30 and budget >= 16:  # room for a pure decode batch: it is met
        assert checked
