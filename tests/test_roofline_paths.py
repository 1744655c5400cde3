"""The roofline's shortcuts price exactly as its general path: decode runs in one loop,
the step aggregates of common batch shapes, the dense part cached by tokens and by sequences,
memoised prefill attention. Every comparison is exact (==), on models with plain, sliding-window
and MLA attention, MoE, several dtypes and efficiency factors."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.catalog import get_hardware, get_model
from sim.cost import roofline
from sim.cost.memory import kv_bytes_per_token_per_gpu
from sim.cost.profiled import ProfiledCostModel, Table, table_key
from sim.cost.roofline import LOOP_STEPS, VECTOR_STEPS, RooflineCostModel, RooflineParams
from sim.types import BatchShape

CASES = {
    "8b": ("llama-3.1-8b", "h100-sxm", {}),
    "70b-tp4-pp2": ("llama-3.1-70b", "h200-sxm", {"tp": 4, "pp": 2}),
    "8b-fp8": ("llama-3.1-8b", "h100-sxm", {"dtype": "fp8", "kv_dtype": "fp8"}),
    "8b-a100": ("llama-3.1-8b", "a100-80gb", {"act_dtype": "fp16"}),
    "8b-fp4-kv": ("llama-3.1-8b", "b200", {"kv_dtype": "nvfp4"}),  # fractional bytes: the general path
    "8b-floor": ("llama-3.1-8b", "h100-sxm", {"params": RooflineParams(kernel_floor_s=2e-4)}),
    "8b-compute-bound": ("llama-3.1-8b", "l40s", {"params": RooflineParams(attn_eff=1e-4)}),
    # decode attention's FLOPs and bytes per KV token close to the ridge, on either side of it
    "8b-ridge-flops": ("llama-3.1-8b", "h100-sxm", {"params": RooflineParams(attn_eff=0.0114)}),
    "8b-ridge-bytes": ("llama-3.1-8b", "h100-sxm", {"params": RooflineParams(attn_eff=0.0117)}),
    "window": ("mistral-7b", "h100-sxm", {}),
    "window-moe": ("gpt-oss-120b", "h200-sxm", {"tp": 2, "dtype": "mxfp4"}),
    "mla": ("deepseek-v3", "h200-sxm", {"tp": 8, "dtype": "fp8"}),
    "moe": ("qwen3-30b-a3b", "h100-sxm", {}),
}
cases = st.sampled_from(sorted(CASES))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build(case: str) -> RooflineCostModel:
    model, hw, kw = CASES[case]
    return RooflineCostModel(get_model(model), get_hardware(hw), **kw)


def test_the_short_run_loop_is_taken_where_decode_is_memory_bound():
    took = {c: build(c)._memory_bound_terms()[1] for c in CASES}
    assert took == {"8b": True, "70b-tp4-pp2": True, "8b-fp8": True, "8b-a100": True, "8b-fp4-kv": False,
                    "8b-floor": True, "8b-compute-bound": False, "8b-ridge-flops": False, "8b-ridge-bytes": True,
                    "window": False, "window-moe": False, "mla": False, "moe": True}


@SETTINGS
@given(case=cases, contexts=st.lists(st.integers(0, 60_000), min_size=1, max_size=64),
       steps=st.one_of(st.integers(0, VECTOR_STEPS + 8), st.integers(LOOP_STEPS - 8, LOOP_STEPS + 8)))
def test_decode_totals_are_each_steps_total(case, contexts, steps):
    cm = build(case)
    n, kv, longest = len(contexts), sum(contexts) + len(contexts), max(contexts) + 1
    want = [cm.decode_step(n, kv + j * n, longest + j).total for j in range(steps)]
    got = cm.decode_totals(n, kv, longest, steps)
    assert isinstance(got, list) == (steps < (LOOP_STEPS if cm._memory_bound_terms().series else VECTOR_STEPS))
    assert [float(x) for x in got] == want
    assert [float(x) for x in cm.decode_series(n, kv, longest, steps)["total"]] == want
    assert [cm.decode_total(n, kv + j * n, longest + j) for j in range(steps)] == want
    # the decode step is the step of that batch shape
    assert cm.step_time(BatchShape((1,) * n, tuple(contexts))) == cm.decode_step(n, kv, longest)


def aggregates(shape: BatchShape, cm: RooflineCostModel) -> tuple:
    """``_price``'s arguments for a batch shape, one sequence at a time (the reference); the last
    is the swap term's seconds: blocks x bytes per block per GPU / one direction of the host link."""
    tokens = dec_n = dec_kv = dec_max = 0
    chunks = []
    for q, c in zip(shape.new_tokens, shape.context_lens):
        tokens += q
        if q == 1:
            dec_n += 1
            dec_kv += c + 1
            dec_max = max(dec_max, c + 1)
        else:
            chunks.append((q, c))
    swapped = shape.blocks_swapped_in + shape.blocks_swapped_out
    if swapped:
        block_bytes = cm.block_size * kv_bytes_per_token_per_gpu(cm.model, cm.tp, cm.pp, cm.kv_dtype)
        swapped = swapped * block_bytes / cm.hw.host_bw
    return (tokens, len(shape.new_tokens), chunks, dec_n, dec_kv, dec_max, swapped)


# (small contexts: ties between a chunk's and the decodes' longest)
seqs = st.lists(st.tuples(st.one_of(st.just(1), st.integers(0, 5000)),
                          st.one_of(st.integers(0, 4), st.integers(0, 40_000))), max_size=40)


@SETTINGS
@given(case=cases, seqs=seqs, swap_in=st.integers(0, 3), swap_out=st.integers(0, 3))
def test_step_time_prices_the_shapes_aggregates_as_each_operator_does(case, seqs, swap_in, swap_out):
    cm = build(case)
    shape = BatchShape(tuple(q for q, _ in seqs), tuple(c for _, c in seqs), swap_in, swap_out)
    agg = aggregates(shape, cm)
    spy = build(case)
    spy._price = lambda *args: args
    assert spy.step_time(shape) == agg
    st_ = cm.step_time(shape)
    assert st_ == cm._price(*agg)
    tokens, n, chunks, dec_n, dec_kv, dec_max, _ = agg
    full, win, W = cm.layers_full, cm.layers_window, cm.shapes.window
    ad = full * cm.attn_decode(dec_n, dec_kv, dec_max) if dec_n else 0.0
    if win and dec_n:
        ad = ad + win * cm.attn_decode(dec_n, min(dec_kv, dec_n * W), min(dec_max, W))
    assert st_.attn_decode == ad
    ap = full * roofline.RooflineCostModel._attn_prefill(cm, chunks, 0) if chunks else 0.0
    if win and chunks:
        ap += win * cm._attn_prefill(chunks, W)
    assert st_.attn_prefill == ap


def dense_terms(cm: RooflineCostModel, tokens: int, num_seqs: int) -> tuple[float, float, float]:
    """(gemm, other_gpu, comm) with every operator priced for this step (the reference)."""
    s, L = cm.shapes, cm.model.num_layers
    gemm = L * sum(cm.gemm(op, tokens) for op in s.attn_gemms)
    if s.dense_layers:
        gemm += s.dense_layers * (cm.gemm("gate_up", tokens) + cm.gemm("down", tokens))
    if s.moe_layers:
        moe = cm.moe(tokens) + cm.gemm("router", tokens)
        if s.shared_experts:
            moe += cm.gemm("shared_gate_up", tokens) + cm.gemm("shared_down", tokens)
        gemm += s.moe_layers * moe
    gemm = gemm + cm.gemm("lm_head", num_seqs)
    other = L * (2 * cm.elementwise("rmsnorm", tokens) + cm.elementwise("silu_mul", tokens)
                 + cm.elementwise("rotary", tokens) + cm.elementwise("kv_write", tokens))
    if s.qk_norm:  # Qwen3's per-head q/k RMSNorm
        other += L * (cm.elementwise("q_norm", tokens) + cm.elementwise("k_norm", tokens))
    other += cm.elementwise("embedding", tokens) + cm.elementwise("rmsnorm", num_seqs) + cm.sampling(num_seqs)
    comm = L * 2 * cm.collective("all_reduce", tokens * s.hidden * cm.cb, cm.tp)
    comm += cm.collective("all_gather", num_seqs * s.vocab * 4, cm.tp)
    if cm.pp > 1:
        comm += (cm.pp - 1) * (tokens * s.hidden * cm.cb / cm.hw.link_bw + cm.p.allreduce_latency_s)
    return gemm, other, comm


def profiled() -> ProfiledCostModel:
    """A profiled model with a few small tables, so that many queries fall out of range."""
    def tab(lo, hi):
        return Table(np.array([lo, hi], dtype=float), np.array([2e-6, 9e-5]))
    tables = {table_key("gemm", "bf16", 1, "qkv"): tab(16, 512), table_key("gemm", "bf16", 1, "lm_head"): tab(1, 64),
              table_key("elementwise", "bf16", 1, "rmsnorm"): tab(8, 4096),
              table_key("sampling", "bf16", 1, "greedy"): tab(1, 16)}
    return ProfiledCostModel(get_model("llama-3.1-8b"), get_hardware("h100-sxm"), tables)


@SETTINGS
@given(case=st.sampled_from(sorted(CASES) + ["profiled"]),
       pairs=st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 200)), min_size=1, max_size=30))
def test_dense_part_cached_by_tokens_and_by_sequences_is_the_whole(case, pairs):
    make = profiled if case == "profiled" else (lambda: build(case))
    cm, ref = make(), make()
    for tokens, n in pairs:
        o, r = cm._oor, ref._oor
        assert cm._dense_terms(tokens, n) == dense_terms(ref, tokens, n)
        assert cm._oor - o == ref._oor - r  # out-of-range queries counted as if priced again


@pytest.mark.parametrize("entries", [1, 3, 1 << 16])
def test_memoised_prefill_attention_is_the_priced_one(monkeypatch, entries):
    monkeypatch.setattr(roofline, "PREFILL_MEMO_ENTRIES", entries)
    rng = np.random.default_rng(0)
    for case in ("8b", "window", "mla"):
        cm, W = build(case), build(case).shapes.window
        for _ in range(200):
            chunks = [(int(q), int(c)) for q, c in rng.integers(2, 300, size=(rng.integers(1, 4), 2))]
            window = int(rng.choice([0, W]))
            assert cm.attn_prefill(chunks, window) == cm._attn_prefill(chunks, window)
            assert len(cm._prefill_memo) <= entries


@pytest.mark.parametrize("entries", [1, 3, 1 << 16])
def test_memoised_fixed_part_of_a_step_prices_as_a_fresh_model(monkeypatch, entries):
    """One model pricing many steps (their fixed parts memoised, the memo emptied when full)
    returns what a fresh model returns for each step alone; subclasses that price prefill
    attention otherwise (profiled tables: out-of-range counts) keep no memo."""
    monkeypatch.setattr(roofline, "STEP_MEMO_ENTRIES", entries)
    assert profiled()._step_memo is None
    rng = np.random.default_rng(1)
    for case in ("8b", "70b-tp4-pp2", "window", "mla", "moe", "8b-compute-bound"):
        cm = build(case)
        assert cm._step_memo is not None
        for _ in range(150):
            n = int(rng.integers(1, 6))
            q = int(rng.choice([2, 7, 300]))  # few chunk sizes: steps repeat
            contexts = [int(x) for x in rng.integers(0, 3, size=n)]
            tokens = (q,) + (1,) * (n - 1)
            shape = BatchShape(tokens, tuple(contexts), int(rng.integers(0, 2)), 0)
            o = cm._oor
            assert cm.step_time(shape) == build(case).step_time(shape)
            assert cm._oor == o
            assert len(cm._step_memo) <= entries
