"""The kernel-database pricing of MoE and MLA models (``sim.cost.kerneldb_moe``).

Tests that read the database skip with a reason when aiconfigurator-core (extra kernels-db) is
not installed."""
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from test_kerneldb import DECODE_RUNS, assert_decode_runs_are_single_steps
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost import kerneldb, kerneldb_moe
from sim.cost import kerneldb_data as kd
from sim.cost import make_cost_model
from sim.types import BatchShape

needs_db = pytest.mark.skipif(kd.package_root() is None,
                              reason="aiconfigurator-core (a dependency) is not installed")


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


def _cm(model, hw="h200-sxm", tp=8, dtype="fp8", framework="vllm"):
    cfg = load_config({"model": model, "hardware": hw, "dtype": dtype, "parallelism": {"tp": tp},
                       "cost": {"model": "kerneldb", "framework": framework}})
    return make_cost_model(cfg, get_model(model), get_hardware(hw))


def _table(family, table, system="h200_sxm", framework="vllm"):
    """The table the model reads: the framework version it prices with, else the newest."""
    have = kd.versions(system, family, framework, table)
    _, fv = kd.resolve("h200-sxm", framework, None)
    v = fv if fv in have else have[-1]
    return pd.read_parquet(kd.data_dir(system) / family / framework / v / f"{table}.parquet")


def _moe_ms(df, tokens, hidden, inter, topk, experts, tp, dtype):
    r = df[(df.num_tokens == tokens) & (df.hidden_size == hidden) & (df.inter_size == inter) & (df.topk == topk)
           & (df.num_experts == experts) & (df.moe_tp_size == tp) & (df.moe_ep_size == 1)
           & (df.distribution == "balanced") & (df.moe_dtype == dtype)]
    assert len(r)
    return r.latency.min()


def test_weight_formats_follow_the_published_checkpoints():
    assert kerneldb_moe.weight_formats(get_model("deepseek-v3"), "fp8") == ("fp8_block", "fp8_block")
    assert kerneldb_moe.weight_formats(get_model("qwen3-235b-a22b"), "fp8") == ("fp8_block", "fp8_block")
    assert kerneldb_moe.weight_formats(get_model("gpt-oss-120b"), "mxfp4") == ("bfloat16", "w4a16_mxfp4")
    assert kerneldb_moe.weight_formats(get_model("mixtral-8x7b"), "fp8") == ("fp8", "fp8")
    # block-scaled fp8 checkpoints (config.json weight_block_size [128, 128])
    for mid in ("glm-5", "minimax-m2.5", "kimi-k2"):
        assert kerneldb_moe.weight_formats(get_model(mid), "fp8") == ("fp8_block", "fp8_block")
    # per-channel / dynamic fp8: per-tensor GEMM table, block-scaled MoE rows
    assert kerneldb_moe.weight_formats(get_model("llama-4-scout"), "fp8") == ("fp8", "fp8_block")
    # Kimi-K2.5's int4 experts (group 32, weight-only): the int4_wo MoE rows, bf16 GEMMs elsewhere
    assert kerneldb_moe.weight_formats(get_model("kimi-k2.5"), "int4") == ("bfloat16", "int4_wo")
    assert not kerneldb_moe.handles(get_model("llama-3.1-70b"))
    assert kerneldb_moe.handles(get_model("qwen3-30b-a3b")) and kerneldb_moe.handles(get_model("deepseek-r1"))


@needs_db
@pytest.mark.parametrize("model,tp,dtype,framework,moe_dtype", [
    ("deepseek-v3", 8, "fp8", "sglang", "fp8_block"),
    ("qwen3-30b-a3b", 1, "fp8", "vllm", "fp8_block"),
    ("gpt-oss-120b", 2, "mxfp4", "vllm", "w4a16_mxfp4"),
    ("gpt-oss-120b", 1, "mxfp4", "trtllm", "w4a16_mxfp4"),  # no w4a8_mxfp4_mxfp8 kernel on Hopper
    ("qwen3-235b-a22b", 4, "bf16", "trtllm", "bfloat16"),
])
def test_routed_experts_are_the_moe_table_at_the_real_shape_and_format(model, tp, dtype, framework, moe_dtype):
    cm = _cm(model, tp=tp, dtype=dtype, framework=framework)
    m = get_model(model)
    df = _table("moe", "moe_perf", framework=framework)
    for tokens in (1, 64, 4096):
        ms = _moe_ms(df, tokens, m.hidden_size, m.expert_intermediate, m.experts_top_k, m.num_experts, tp, moe_dtype)
        assert cm.moe(tokens) == pytest.approx(ms / 1e3, rel=1e-12)
    assert cm.out_of_range_total() == 0 and cm.moe_dtype == moe_dtype


@needs_db
def test_a_whole_prompt_costs_the_mla_module_at_that_length():
    """vLLM / TRT-LLM: the module's attention part plus the qkv_a, q_b, o GEMMs of the step give
    back the measured attention-block time at a table point."""
    for framework in ("vllm", "trtllm"):
        cm = _cm("deepseek-v3", framework=framework)
        mod = _table("mla", "mla_context_module_perf", framework=framework)
        gen = _table("mla", "mla_generation_module_perf", framework=framework)
        mod, gen = (df[(df.num_heads == 16) & (df.gemm_type == "fp8_block") & (df.kv_cache_dtype == "bfloat16")]
                    for df in (mod, gen))
        for b, isl in ((1, 4096), (4, 1024)):
            ms = mod[(mod.batch_size == b) & (mod.isl == isl)].latency.min()
            t = cm.attn_prefill([(isl, 0)] * b) + sum(cm.gemm(op, b * isl) for op in ("qkv_a", "q_b", "o"))
            assert t == pytest.approx(ms / 1e3, rel=1e-9), framework
        for b, kv in ((64, 4096), (1, 1024)):
            ms = gen[(gen.batch_size == b) & (gen.step == kv)].latency.min()
            t = cm.attn_decode(b, b * kv) + sum(cm.gemm(op, b) for op in ("qkv_a", "q_b", "o"))
            assert t == pytest.approx(ms / 1e3, rel=1e-9), framework
        assert cm.out_of_range_total() == 0


@needs_db
def test_sglang_mla_decode_is_the_kernel_plus_both_absorption_bmms():
    cm = _cm("deepseek-v3", framework="sglang")
    gen = _table("mla", "generation_mla_perf", framework="sglang")
    bmm = _table("mla_bmm", "mla_bmm_perf", framework="sglang")
    for b, past in ((64, 4095), (8, 1023)):
        k = gen[(gen.num_heads == 16) & (gen.kv_cache_dtype == "bfloat16") & (gen.batch_size == b)
                & (gen.step == past)].latency.min()
        bb = bmm[(bmm.num_heads == 16) & (bmm.num_tokens == b) & (bmm.bmm_dtype == "fp8")]
        pre = bb[bb.op_name == "mla_gen_pre"].latency.min()
        post = bb[bb.op_name == "mla_gen_post"].latency.min()
        assert cm.attn_decode(b, b * (past + 1)) == pytest.approx((k + pre + post) / 1e3, rel=1e-9)
    ctx = _table("mla", "context_mla_perf", framework="sglang")
    k = ctx[(ctx.num_heads == 16) & (ctx.kv_cache_dtype == "bfloat16") & (ctx.batch_size == 1)
            & (ctx.isl == 4096)].latency.min()
    n, kk = cm.shapes.gemms["kv_b"]
    assert cm.attn_prefill([(4096, 0)]) == pytest.approx(k / 1e3 + cm._gemm_mnk(4096, n, kk, cm.gemm_dtype), rel=1e-9)


@needs_db
def test_shared_experts_dense_layers_and_router_come_from_the_gemm_table():
    cm = _cm("deepseek-v3", framework="trtllm")
    s, m = cm.shapes, cm.model
    t = 256
    gemm, _, _ = cm._dense_terms(t, 4)
    want = m.num_layers * sum(cm._gemm_mnk(t, *s.gemms[op], "fp8_block") for op in ("qkv_a", "q_b", "o"))
    want += 3 * sum(cm._gemm_mnk(t, *s.gemms[op], "fp8_block") for op in ("gate_up", "down"))
    want += 58 * (cm.moe(t) + cm._gemm_mnk(t, *s.gemms["router"], "bfloat16")
                  + sum(cm._gemm_mnk(t, *s.gemms[op], "fp8_block") for op in ("shared_gate_up", "shared_down")))
    want += cm._gemm_mnk(4, *s.gemms["lm_head"], "bfloat16")
    assert (s.dense_layers, s.moe_layers) == (3, 58)
    assert gemm == pytest.approx(want, rel=1e-12)


@needs_db
def test_deepseek_under_auto_is_priced_by_the_database_and_says_what_is_not(tmp_path):
    cfg = {"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8", "parallelism": {"tp": 8},
           "cost": {"model": "auto", "framework": "trtllm"},
           "workload": {"rate": 5.0, "num_requests": 4, "prompt": {"kind": "fixed", "value": 200},
                        "output": {"kind": "fixed", "value": 4}},
           "output": {"plots": False, "progress": False}}
    res = simulate(cfg, out=tmp_path, plots=False, progress=False)
    assert res.summary["sim"]["cost_model"] == "kerneldb"
    cm = res.summary["cost_model"]
    assert cm["gemm_dtype"] == "fp8_block" and cm["moe_dtype"] == "fp8_block"
    notes = " | ".join(cm["notes"])
    assert "norms, activation, rotary, embedding, KV write, sampling, logits all-gather: roofline" in notes
    assert "MLA attention: trtllm" in notes
    assert json.loads((tmp_path / "summary.json").read_text())["cost_model"]["notes"] == cm["notes"]


@needs_db
def test_dense_models_never_reach_the_moe_module(monkeypatch):
    """Dense Llama keeps the base class and its prices: the MoE/MLA rows are not even read."""
    def boom(*a, **k):
        raise AssertionError("kerneldb_moe.load called for a dense model")

    monkeypatch.setattr(kerneldb_moe, "load", boom)
    cm = _cm("llama-3.1-70b", tp=4, framework="vllm")
    assert type(cm) is kerneldb.KernelDbCostModel
    assert cm.step_time(BatchShape((1,) * 8, (1000,) * 8)).source == "kerneldb"


@needs_db
def test_the_moe_cache_file_holds_exactly_what_the_parquet_gives(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    system, version = kd.resolve("h200-sxm", "sglang", None)
    first = kerneldb_moe.load(system, "sglang", version)
    again = kerneldb_moe.load(system, "sglang", version)
    fresh = kerneldb_moe.derive(system, "sglang", version)
    assert len(list(tmp_path.rglob(f"*{kerneldb_moe.CACHE_TAG}.npz"))) == 1
    assert set(first) == set(again) == set(fresh)
    for k in fresh:
        np.testing.assert_array_equal(again[k], fresh[k])


@needs_db
def test_sliding_window_prefill_is_the_windowed_context_table():
    cm = _cm("gpt-oss-120b", tp=1, dtype="mxfp4", framework="vllm")
    a = _table("attention", "context_attention_perf", framework="vllm")
    a = a[(a.window_size > 0) & (a.attn_dtype == "bfloat16")]
    a = a[a.kernel_source == a.kernel_source.value_counts().idxmax()]
    a = a[(a.window_size == 128) & (a.num_heads == 64) & (a.num_key_value_heads == 8) & (a.head_dim == 64)
          & (a.kv_cache_dtype == "bfloat16")]
    for b, isl in ((1, 1024), (4, 4096)):
        ms = a[(a.batch_size == b) & (a.isl == isl)].latency.min()
        assert cm.attn_prefill_window([(isl, 0)] * b) == pytest.approx(ms / 1e3, rel=1e-9)
    # a chunk after cached tokens costs its share of the windowed query-key pairs
    whole = cm.attn_prefill_window([(2048, 0)])
    assert cm.attn_prefill_window([(1024, 1024)]) == pytest.approx(whole * (1024 * 128) / cm._attended(2048, 0, 128))


@needs_db
@pytest.mark.parametrize("model,hw,tp,dtype", [("gpt-oss-120b", "h100-sxm", 1, "mxfp4"),
                                               ("deepseek-v3", "h200-sxm", 8, "fp8")])
def test_fast_forward_is_exact_for_moe_and_mla(model, hw, tp, dtype):
    from test_fast_forward import assert_identical, both

    cfg = tiny_config(model=model, hardware=hw, dtype=dtype, parallelism={"tp": tp},
                      cost={"model": "kerneldb", "framework": "sglang"},
                      workload={"rate": 3.0, "num_requests": 12, "prompt": {"kind": "uniform", "min": 16, "max": 600},
                                "output": {"kind": "uniform", "min": 1, "max": 150}})
    on, off = both(cfg)
    assert_identical(on, off)
    assert on.summary["sim"]["steps_by_cost_source"] == {"kerneldb": on.summary["sim"]["steps"]}
    a = make_cost_model(load_config(cfg), get_model(model), get_hardware(hw))
    ctx = (100, 2000, 517)
    assert a.step_time(BatchShape((1,) * 3, ctx, tp=tp)) == a.decode_step(3, sum(c + 1 for c in ctx), max(ctx) + 1)


@needs_db
@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from([(m, fw) for m in ({"model": "gpt-oss-120b", "hw": "h100-sxm", "tp": 1, "dtype": "mxfp4"},
                                              {"model": "deepseek-v3"}) for fw in kd.FRAMEWORKS]),
       runs=DECODE_RUNS)
def test_decode_runs_are_priced_as_single_steps(case, runs):
    """MoE with sliding-window layers (gpt-oss) and MLA (DeepSeek-V3: the module table of vLLM
    and TRT-LLM, SGLang's kernel plus absorption BMMs) as the dense models."""
    kw, framework = case
    assert_decode_runs_are_single_steps(lambda: _cm(framework=framework, **kw), runs)


@needs_db
def test_moe_table_prices_the_experts_from_another_frameworks_rows():
    """``cost.moe_table``: TRT-LLM's B200 collection times fp8_block experts with DeepGEMM only; its
    TRTLLM MoE backend runs the trtllm-gen kernels the vLLM collection times (FlashInfer)."""
    def cm(framework, moe_table="framework"):
        cfg = load_config(tiny_config(model="deepseek-r1", hardware="b200", dtype="fp8", parallelism={"tp": 8},
                                      cost={"model": "kerneldb", "framework": framework, "moe_table": moe_table}))
        return make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))

    own, other, vllm = cm("trtllm"), cm("trtllm", "vllm"), cm("vllm")
    assert other.moe(64) == vllm.moe(64) and other.moe(64) < own.moe(64)
    assert any("(cost.moe_table)" in n and "vllm" in n for n in other.notes)
    assert other.attn_decode(8, 8 * 1000, 1000) == own.attn_decode(8, 8 * 1000, 1000)  # the rest: TRT-LLM's
    assert cm("trtllm", "trtllm").moe(64) == own.moe(64)


@needs_db
def test_nvfp4_deepseek_r1_and_kimi_price_their_attention_projections_in_bf16():
    """NVIDIA's NVFP4 DeepSeek-R1 and Kimi-K2.5 checkpoints keep ``self_attn`` unquantised: the
    attention projections from the bf16 GEMM table, the shared experts, dense MLPs and routed
    experts in nvfp4; other nvfp4 models keep nvfp4 projections."""
    assert kerneldb_moe.attention_format(get_model("deepseek-r1"), "nvfp4") == "bfloat16"
    assert kerneldb_moe.attention_format(get_model("kimi-k2.5"), "nvfp4") == "bfloat16"
    assert kerneldb_moe.attention_format(get_model("deepseek-r1"), "fp8") is None
    assert kerneldb_moe.attention_format(get_model("deepseek-v3"), "nvfp4") is None
    cm = _cm("deepseek-r1", hw="b200", tp=8, dtype="nvfp4", framework="trtllm")
    s, m = cm.shapes, cm.model
    t = 4
    gemm = cm._gemm_terms(t, t)  # (every GEMM of the step, before the decode steps' expert overlap)
    want = m.num_layers * sum(cm._gemm_mnk(t, *s.gemms[op], "bfloat16") for op in ("qkv_a", "q_b", "o"))
    want += 3 * sum(cm._gemm_mnk(t, *s.gemms[op], "nvfp4") for op in ("gate_up", "down"))
    want += 58 * (cm.moe(t) + cm._gemm_mnk(t, *s.gemms["router"], "bfloat16")
                  + sum(cm._gemm_mnk(t, *s.gemms[op], "nvfp4") for op in ("shared_gate_up", "shared_down")))
    want += cm._gemm_mnk(t, *s.gemms["lm_head"], "bfloat16")
    assert gemm == pytest.approx(want, rel=1e-12)
    assert cm._gemm_mnk(t, *s.gemms["qkv_a"], "bfloat16") < cm._gemm_mnk(t, *s.gemms["qkv_a"], "nvfp4")
    assert any("attention projections: bfloat16" in n for n in cm.notes)
    # a decode step at a table point of the bf16 MLA module costs that module (its GEMMs are the bf16 ones)
    gen = pd.read_parquet(kd.data_dir("b200_sxm") / "mla" / "trtllm" / cm.meta["mla"].split()[1]
                          / "mla_generation_module_perf.parquet")
    gen = gen[(gen.num_heads == 16) & (gen.gemm_type == "bfloat16")
              & (gen.kv_cache_dtype == ("fp8" if cm.kv_fp8 else "bfloat16"))]
    b, kv = 8, 1024
    ms = gen[(gen.batch_size == b) & (gen.step == kv)].latency.min()
    assert cm.attn_decode(b, b * kv) + sum(cm.gemm(op, b) for op in ("qkv_a", "q_b", "o")) \
        == pytest.approx(ms / 1e3, rel=1e-9)
    other = _cm("deepseek-v3", hw="b200", tp=8, dtype="nvfp4", framework="trtllm")
    assert other.gemm("qkv_a", t) == other._gemm_mnk(t, *s.gemms["qkv_a"], "nvfp4")


@needs_db
def test_trtllm_deepseek_layers_run_their_norms_inside_the_all_reduce():
    """TRT-LLM's DeepSeek-V3 decoder layer (TP > 1, no attention DP) fuses the post-attention and
    next-layer RMSNorm into the all-reduce: a step's elementwise part is the unfused one less two
    norms per layer; vLLM, TP 1 and attention-DP ranks keep them."""
    m = get_model("deepseek-r1")
    assert kerneldb_moe.trtllm_norm_in_allreduce("trtllm", m, 8, 1)
    assert not kerneldb_moe.trtllm_norm_in_allreduce("trtllm", m, 8, 2)
    assert not kerneldb_moe.trtllm_norm_in_allreduce("trtllm", m, 1, 1)
    assert not kerneldb_moe.trtllm_norm_in_allreduce("vllm", m, 8, 1)
    assert not kerneldb_moe.trtllm_norm_in_allreduce("trtllm", get_model("qwen3-235b-a22b"), 8, 1)
    trt = _cm("deepseek-r1", tp=8, framework="trtllm")
    assert trt.engine["fused"] == frozenset({"rmsnorm"})
    assert _cm("deepseek-r1", tp=8, framework="vllm").engine["fused"] == frozenset()
    for tokens in (1, 64):
        other, _ = trt._other_and_comm(tokens, tokens)
        trt.engine = {**trt.engine, "fused": frozenset()}
        unfused, _ = trt._other_and_comm(tokens, tokens)
        trt.engine = {**trt.engine, "fused": frozenset({"rmsnorm"})}
        assert other == pytest.approx(unfused - m.num_layers * 2 * trt.elementwise("rmsnorm", tokens), rel=1e-12)
        assert other < unfused


@needs_db
def test_trtllm_decode_steps_overlap_shared_and_routed_experts():
    """TRT-LLM's DeepSeek-V3 MoE layer runs the shared experts on a second stream beside the router
    and routed experts when the step is CUDA-graph captured (decode only): such a step's GEMM time
    is the sum less, per MoE layer, the shorter of the two; a step with a prefill chunk, vLLM and
    attention-DP ranks keep the sum."""
    m = get_model("deepseek-r1")
    assert kerneldb_moe.trtllm_shared_overlap("trtllm", m, 1) and not kerneldb_moe.trtllm_shared_overlap("trtllm", m, 8)
    assert not kerneldb_moe.trtllm_shared_overlap("vllm", m, 1)
    assert not kerneldb_moe.trtllm_shared_overlap("trtllm", get_model("qwen3-235b-a22b"), 1)
    cm = _cm("deepseek-r1", tp=8, framework="trtllm")
    assert cm.shared_overlap and not _cm("deepseek-r1", tp=8, framework="vllm").shared_overlap
    for n in (1, 8, 64):
        routed = cm.moe(n) + cm.gemm("router", n)
        shared = cm.gemm("shared_gate_up", n) + cm.gemm("shared_down", n)
        gemm, _, _ = cm._dense_terms(n, n)
        assert gemm == pytest.approx(cm._gemm_terms(n, n) - 58 * min(routed, shared), rel=1e-12)
        assert gemm < cm._gemm_terms(n, n)
    gemm, _, _ = cm._dense_terms(1024, 1)  # a prefill chunk: not captured, the sum
    assert gemm == cm._gemm_terms(1024, 1)
    assert cm.out_of_range_total() == 0
