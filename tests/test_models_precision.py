"""Models people serve now (MoE with shared experts and dense first layers, MLA, sliding windows,
cards from a Hugging Face config.json) and precision (weight dtype apart from activation, KV and
communication dtypes; fp4 formats; GPU support; driver-reported usable memory)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import DTYPE_BYTES, CatalogError, ModelCard, get_hardware, get_model
from sim.config import load_config
from sim.cost.memory import kv_bytes_per_token_per_gpu, plan_memory, weights_per_gpu
from sim.cost.ops import expert_tokens
from sim.cost.roofline import RooflineCostModel, RooflineParams
from sim.errors import CapacityError, ConfigError
from sim.types import BatchShape

H100, A100, B200 = get_hardware("h100-sxm"), get_hardware("a100-80gb"), get_hardware("b200")


def tiny(**kw) -> ModelCard:
    base = dict(id="tiny", name="tiny", hf_repo="x/tiny", num_layers=2, hidden_size=4, num_attention_heads=2,
                num_kv_heads=1, head_dim=2, intermediate_size=8, vocab_size=10, max_context=64, params_b=0.0,
                source="test")
    return ModelCard(**{**base, **kw})


# ---------------------------------------------------------------------------- parameter counts

# published totals and active parameters (sources in each card's header comment)
PUBLISHED = [("qwen3-8b", 8.2, None), ("qwen3-32b", 32.8, None), ("llama-3.3-70b", 70.6, None),
             ("qwen3-30b-a3b", 30.5, 3.3), ("qwen3-235b-a22b", 235.0, 22.0), ("deepseek-v3", 671.0, 37.0),
             ("deepseek-r1", 671.0, 37.0), ("gpt-oss-120b", 116.8, 5.1)]


@pytest.mark.parametrize("mid,total_b,active_b", PUBLISHED)
def test_derived_parameter_counts_match_published(mid, total_b, active_b):
    m = get_model(mid)
    assert abs(m.total_params / 1e9 - total_b) / total_b < 0.01
    if active_b is not None:
        active = m.active_params
        if mid == "gpt-oss-120b":  # OpenAI counts active parameters without the input embedding
            active -= m.vocab_size * m.hidden_size
        assert abs(active / 1e9 - active_b) / active_b < 0.02


# published figures are rounded to their last digit: the derived count must round to them. These
# vendors count active parameters without the input embedding (sources in each card's header)
ROUNDED = [("kimi-k2", 1000, 1000, 32, 1), ("kimi-k2.5", 1000, 1000, 32, 1), ("glm-5", 740, 10, 40, 1),
           ("minimax-m2.5", 230, 10, 10, 1)]


@pytest.mark.parametrize("mid,total_b,total_unit,active_b,active_unit", ROUNDED)
def test_new_moe_cards_round_to_the_published_figures(mid, total_b, total_unit, active_b, active_unit):
    m = get_model(mid)
    assert round(m.total_params / 1e9 / total_unit) * total_unit == total_b
    assert round((m.active_params - m.vocab_size * m.hidden_size) / 1e9 / active_unit) * active_unit == active_b


def test_glm5_total_lacks_only_the_sparse_attention_indexer():
    # published 744B; the card leaves out DSA's lightning indexer (per layer: q from the q latent to
    # 32 heads of 128, one key of 128 and 32 head weights from the hidden state), which it does not price
    m = get_model("glm-5")
    indexer = m.num_layers * (m.q_lora_rank * 32 * 128 + m.hidden_size * 128 + m.hidden_size * 32)
    assert abs((m.total_params + indexer) / 1e9 - 744) < 0.5


@pytest.mark.parametrize("mid,total_b", [("llama-4-scout", 109), ("llama-4-maverick", 400)])
def test_llama4_cards_match_the_published_figures(mid, total_b):
    # Meta's totals include the vision encoder, which the text-only card does not serve: the text
    # model is at most 1.5% below them; 17B active (embedding and head included) to 2%
    m = get_model(mid)
    assert -0.015 < m.total_params / 1e9 / total_b - 1 <= 0.002
    assert abs(m.active_params / 1e9 / 17 - 1) < 0.02


def test_llama4_interleaves_moe_and_chunks_attention():
    scout, maverick = get_model("llama-4-scout"), get_model("llama-4-maverick")
    assert (scout.moe_layers, scout.dense_layers, maverick.moe_layers, maverick.dense_layers) == (48, 0, 24, 24)
    assert maverick.intermediate_size == 16384 and maverick.expert_intermediate == 8192  # dense MLP vs expert
    assert (scout.sliding_window, scout.window_layers) == (8192, 36)  # 3 of 4 layers chunked, every 4th global
    # the difference between the two: 24 layers of (128 - 16) more experts, minus 24 of them going dense
    assert maverick.total_params - scout.total_params == 24 * (129 * maverick.expert_params + 5120 * 128) \
        - 48 * (17 * scout.expert_params + 5120 * 16) + 24 * maverick.dense_mlp_params


def test_moe_with_shared_experts_and_dense_first_layer_counts_by_hand():
    m = tiny(num_experts=4, experts_top_k=2, moe_intermediate_size=3, num_shared_experts=1, first_dense_layers=1)
    # attention 4*(4+2*2) + 4*4 = 48 per layer; dense MLP 3*4*8 = 96; expert 3*4*3 = 36;
    # MoE layer (4 + 1) * 36 + router 4*4 = 196; norms 8 per layer; embedding 40 + head 40 + final norm 4
    assert m.total_params == 2 * (48 + 8) + 96 + 196 + 40 + 40 + 4 == 488
    assert m.active_params == 488 - (4 - 2) * 36 == 416


@settings(max_examples=60, deadline=None)
@given(E=st.integers(1, 64), k=st.integers(1, 8), shared=st.integers(0, 2), dense=st.integers(0, 3),
       layers=st.integers(3, 6))
def test_active_never_exceeds_total_and_differs_by_untouched_experts(E, k, shared, dense, layers):
    k = min(k, E)
    m = tiny(num_layers=layers, num_experts=E, experts_top_k=k, moe_intermediate_size=3, num_shared_experts=shared,
             first_dense_layers=dense)
    assert m.total_params - m.active_params == (layers - dense) * (E - k) * m.expert_params
    assert (m.active_params == m.total_params) == (k == E or dense == layers)


# ---------------------------------------------------------------------------- KV cache


def test_mla_kv_is_one_latent_per_token_replicated_over_tp():
    ds = get_model("deepseek-v3")
    assert ds.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70272
    assert kv_bytes_per_token_per_gpu(ds, 8, 1, "bf16") == kv_bytes_per_token_per_gpu(ds, 1, 1, "bf16") == 70272
    q = get_model("qwen3-8b")
    assert q.kv_bytes_per_token() == 36 * 2 * 8 * 128 * 2 == 147456
    assert kv_bytes_per_token_per_gpu(q, 8, 1, "fp8") == 36 * 2 * 1 * 128 * 1


def test_usable_memory_block_count_by_hand():
    """Llama-3.1-8B on one A100-80GB, bf16, block 16, utilization 0.9, 2048 batched tokens, 256 seqs.

    GPU 79.25 GiB (driver-reported) = 85,094,039,552 B; x 0.9 = 76,584,635,596.8
    weights 8,030,261,248 params x 2 B = 16,060,522,496
    activations 2 B x (2*4096 + (32+2*8)*128 + 3*14336) x 2048 + 256 x 128256 x 4 = 234,881,024 + 131,334,144
    runtime overhead 1 GiB = 1,073,741,824
    left 59,084,156,108.8 B / (16 x 131,072 B) = 28,173.x -> 28,173 blocks
    (the datasheet's 80 GiB would give 28,519: 346 blocks, 5,536 tokens too many)."""
    p = plan_memory(get_model("llama-3.1-8b"), A100, tp=1, pp=1, dtype="bf16", kv_dtype="bf16", block_size=16,
                    gpu_memory_utilization=0.9, max_num_batched_tokens=2048, max_num_seqs=256)
    assert p.gpu_bytes == 85_094_039_552
    assert p.weights_bytes == 16_060_522_496 and p.activation_bytes == 366_215_168
    assert p.num_gpu_blocks == 28173


def test_every_hardware_card_states_where_its_usable_memory_comes_from():
    from sim.catalog import list_hardware

    for h in list_hardware():
        assert h.usable_memory_gib is None or (h.usable_memory_source and h.usable_memory_gib < h.memory_gib), h.id


# ---------------------------------------------------------------------------- precision


def test_block_scaled_fp4_bytes():
    assert DTYPE_BYTES["nvfp4"] == 4.5 / 8  # 4-bit values + one fp8 scale per 16
    assert DTYPE_BYTES["mxfp4"] == 4.25 / 8  # 4-bit values + one 8-bit scale per 32


def test_kv_and_communication_default_to_activations_not_weights():
    cfg = load_config({"dtype": "fp8"})
    assert (cfg.dtype, cfg.kv_dtype, cfg.comm_dtype) == ("fp8", "bf16", "bf16")
    cfg = load_config({"dtype": "fp8", "kv": {"dtype": "fp8"}, "precision": {"communication": "fp8"}})
    assert (cfg.kv_dtype, cfg.comm_dtype) == ("fp8", "fp8")


def test_fp8_weights_keep_a_bf16_all_reduce():
    m = get_model("llama-3.1-70b")
    shape = BatchShape((1,) * 16, (500,) * 16, tp=4)
    bf16 = RooflineCostModel(m, H100, tp=4, dtype="bf16").step_time(shape)
    fp8 = RooflineCostModel(m, H100, tp=4, dtype="fp8").step_time(shape)
    assert fp8.comm == bf16.comm  # weights changed, the all-reduce did not
    assert fp8.gemm < bf16.gemm  # half the weight bytes in a memory-bound decode step
    p = RooflineParams(allreduce_latency_s=0.0)
    c16 = RooflineCostModel(m, H100, tp=4, params=p).step_time(shape).comm
    c8 = RooflineCostModel(m, H100, tp=4, params=p, comm_dtype="fp8").step_time(shape).comm
    ring = 2 * 3 / 4 * 16 * 8192 / (H100.link_bw * p.mem_eff)  # one all-reduce of 16 tokens, per byte/element
    assert c16 - c8 == pytest.approx(80 * 2 * ring)  # 80 layers x 2 all-reduces, one byte saved per element


def test_fp8_weights_count_linear_layers_at_one_byte_and_embeddings_at_two():
    m = get_model("llama-3.1-8b")
    linear = m.num_layers * (m.attn_params_per_layer + m.mlp_params_per_layer)
    rest = 2 * m.vocab_size * m.hidden_size + (2 * m.num_layers + 1) * m.hidden_size
    assert weights_per_gpu(m, 1, 1, "fp8") == linear * 1 + rest * 2
    assert weights_per_gpu(m, 1, 1, "bf16") == (linear + rest) * 2


def test_gpt_oss_fits_one_h100_in_mxfp4_only():
    m = get_model("gpt-oss-120b")
    kw = dict(tp=1, pp=1, kv_dtype="bf16", block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192,
              max_num_seqs=256)
    p = plan_memory(m, H100, dtype="mxfp4", **kw)
    experts = m.moe_layers * m.num_experts * m.expert_params
    assert p.weights_bytes == pytest.approx(experts * 4.25 / 8 + (m.total_params - experts) * 2)
    assert 60 < p.weights_bytes / 2**30 < 63  # about 61 GiB, the size vLLM reports loading it on one H100
    with pytest.raises(CapacityError, match="gpt-oss-120b does not fit"):
        plan_memory(m, H100, dtype="bf16", **kw)


@pytest.mark.parametrize("dtype,hw,ok", [("fp8", "a100-80gb", False), ("nvfp4", "h100-sxm", False),
                                         ("nvfp4", "b200", True), ("mxfp4", "a100-80gb", True),
                                         ("fp8", "l40s", True), ("fp8", "mi300x", True)])
def test_dtype_needs_hardware_support(dtype, hw, ok):
    cfg = {"model": "gpt-oss-120b" if dtype == "mxfp4" else "llama-3.1-8b", "hardware": hw, "dtype": dtype}
    if ok:
        assert load_config(cfg).dtype == dtype
    else:
        with pytest.raises(ConfigError, match=f"dtype {dtype}: .* has no {dtype} tensor cores"):
            load_config(cfg)


def test_mxfp4_needs_an_moe_model():
    with pytest.raises(ConfigError, match="dtype mxfp4: quantises the routed experts"):
        load_config({"model": "llama-3.1-8b", "dtype": "mxfp4"})


@pytest.mark.parametrize("mid", ["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3", "mixtral-8x7b"])
def test_smaller_weights_or_more_memory_never_cost_kv_blocks(mid):
    from dataclasses import replace

    m = get_model(mid)
    kw = dict(pp=1, kv_dtype="bf16", block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192,
              max_num_seqs=256)
    b200 = get_hardware("b200")
    for tp in (1, 2, 4, 8):
        blocks = {}
        for dt in ("bf16", "fp8", "nvfp4"):
            try:
                blocks[dt] = plan_memory(m, b200, tp=tp, dtype=dt, **kw).num_gpu_blocks
            except CapacityError:
                blocks[dt] = 0
        assert blocks["bf16"] <= blocks["fp8"] <= blocks["nvfp4"], (tp, blocks)
        if blocks["bf16"]:  # the datasheet's figure would promise more than the driver gives
            sheet = plan_memory(m, replace(b200, usable_memory_gib=None), tp=tp, dtype="bf16", **kw).num_gpu_blocks
            assert sheet > blocks["bf16"]


def test_gemm_peak_follows_the_weight_format_and_attention_stays_bf16():
    m = get_model("qwen3-32b")
    nv = RooflineCostModel(m, B200, dtype="nvfp4")
    assert nv.peak == 9000e12 and nv.attn_peak == 2250e12
    assert RooflineCostModel(m, B200, dtype="fp8").peak == 4500e12
    assert RooflineCostModel(get_model("gpt-oss-120b"), H100, dtype="mxfp4").peak == 989e12  # weight-only
    big = 16384  # a compute-bound GEMM runs twice as fast on fp4 as on fp8 tensor cores
    assert RooflineCostModel(m, B200, dtype="fp8").gemm("gate_up", big) == pytest.approx(2 * nv.gemm("gate_up", big))


# ---------------------------------------------------------------------------- pricing MoE, MLA, windows


def test_moe_reads_weights_of_touched_experts_only():
    assert expert_tokens(1, 128, 4) == (4, 1)
    assert expert_tokens(100_000, 128, 4) == (128, 3125)
    cm = RooflineCostModel(get_model("qwen3-30b-a3b"), H100, params=RooflineParams(kernel_floor_s=0.0))
    n, k = cm.shapes.gemms["expert_gate_up"]
    n2, k2 = cm.shapes.gemms["expert_down"]
    w = n * k + n2 * k2  # one expert's weights (bf16)
    one = cm.moe(1)  # memory-bound: 8 experts' weights plus the token's activations
    assert one == pytest.approx(2 * (8 * w + 8 * (k + n + k2 + n2)) / (H100.mem_bw * cm.p.mem_eff))


def test_mla_decode_attention_reads_the_latent_whole_on_every_rank():
    ds = get_model("deepseek-v3")
    cm8 = RooflineCostModel(ds, H100, tp=8)
    latent_read = 64 * 100_000 * 576 * 2 / (H100.mem_bw * cm8.p.mem_eff)  # every rank reads the whole latent
    assert latent_read < cm8.attn_decode(64, 64 * 100_000) < 1.01 * latent_read
    llama = get_model("llama-3.1-70b")
    g1 = RooflineCostModel(llama, H100, tp=1).attn_decode(64, 64 * 100_000)
    g8 = RooflineCostModel(llama, H100, tp=8).attn_decode(64, 64 * 100_000)
    assert g8 / g1 == pytest.approx(1 / 8, rel=0.01)  # GQA heads are


def test_sliding_window_attended_pairs():
    f = RooflineCostModel._attended
    assert f(10, 0, 0) == 55  # causal, no window
    assert f(10, 0, 4) == 1 + 2 + 3 + 4 * 7 == 34
    assert f(10, 10, 4) == 40 and f(3, 1, 8) == f(3, 1, 0) == 2 + 3 + 4


def test_gpt_oss_long_decode_pays_the_window_on_half_its_layers():
    m = get_model("gpt-oss-120b")
    cm = RooflineCostModel(m, H100, dtype="mxfp4")
    n, kv = 8, 8 * 50_000
    st_ = cm.decode_step(n, kv, 50_000)
    assert st_.attn_decode == 18 * cm.attn_decode(n, kv) + 18 * cm.attn_decode(n, n * 128)


@pytest.mark.parametrize("mid,hw,tp,dtype", [("gpt-oss-120b", "h100-sxm", 1, "mxfp4"), ("deepseek-v3", "h200-sxm", 8, "fp8"),
                                             ("qwen3-30b-a3b", "b200", 2, "nvfp4"), ("mistral-7b", "a100-80gb", 1, "bf16")])
def test_decode_series_is_bit_identical_to_steps(mid, hw, tp, dtype):
    cm = RooflineCostModel(get_model(mid), get_hardware(hw), tp=tp, dtype=dtype)
    series = cm.decode_series(5, 5 * 3000, 3000, 40)
    for i in (0, 7, 39):
        st_ = cm.decode_step(5, 5 * 3000 + 5 * i, 3000 + i)
        assert series["total"][i] == st_.total and series["attn_decode"][i] == st_.attn_decode


# ---------------------------------------------------------------------------- Hugging Face config.json


def write(tmp_path, name, cfg) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 131072}


def test_dense_config_json(tmp_path):
    m = get_model(write(tmp_path, "tiny-llama.json", LLAMA))
    assert (m.id, m.num_layers, m.head_dim, m.num_kv_heads, m.is_moe) == ("tiny-llama", 2, 16, 2, False)
    # 2 x (64*(64+2*32) + 64*64 + 3*64*128 + 128) + 2*100*64 + 64
    assert m.total_params == 2 * (8192 + 4096 + 24576 + 128) + 12800 + 64 == 86848


def test_deepseek_and_gpt_oss_config_json(tmp_path):
    ds = {"model_type": "deepseek_v3", "num_hidden_layers": 3, "hidden_size": 32, "num_attention_heads": 4,
          "num_key_value_heads": 4, "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 8,
          "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "q_lora_rank": 24,
          "kv_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8, "vocab_size": 50,
          "max_position_embeddings": 256}
    m = get_model(write(tmp_path, "tiny-ds.json", ds))
    assert (m.attention_kind, m.moe_layers, m.dense_layers, m.kv_elems_per_token_per_layer) == ("mla", 2, 1, 20)
    oss = {"model_type": "gpt_oss", "num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 32, "num_local_experts": 8,
           "num_experts_per_tok": 2, "vocab_size": 50, "max_position_embeddings": 256, "sliding_window": 16,
           "layer_types": ["sliding_attention", "full_attention"] * 2}
    g = get_model(write(tmp_path, "tiny-oss.json", oss))
    assert (g.window_layers, g.sliding_window, g.expert_intermediate) == (2, 16, 32)


@pytest.mark.parametrize("cfg,message", [
    ({**LLAMA, "model_type": "mamba"}, "unsupported model_type 'mamba'"),
    ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, "missing key 'hidden_size'"),
    ({k: v for k, v in LLAMA.items() if k != "model_type"}, "missing key 'model_type'"),
])
def test_bad_config_json_is_one_line(tmp_path, cfg, message):
    with pytest.raises(CatalogError, match=message) as e:
        get_model(write(tmp_path, "bad.json", cfg))
    assert "\n" not in str(e.value)


def _aic_configs() -> Path:
    try:
        import aiconfigurator_core
    except ImportError:
        pytest.skip("aiconfigurator-core is not installed (pip install aiconfigurator-core) for its config.json copies")
    return Path(aiconfigurator_core.__file__).parent / "model_configs"


ARCH = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size",
        "vocab_size", "max_context", "num_experts", "experts_top_k", "moe_intermediate_size", "num_shared_experts",
        "first_dense_layers", "attention_kind", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim",
        "sliding_window", "window_layers", "qkv_bias", "tie_word_embeddings", "qk_norm")


@pytest.mark.parametrize("card,file", [("qwen3-8b", "Qwen--Qwen3-8B"), ("qwen3-32b", "Qwen--Qwen3-32B"),
                                       ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B"), ("gpt-oss-120b", "openai--gpt-oss-120b"),
                                       ("deepseek-v3", "deepseek-ai--DeepSeek-V3"), ("llama-3.1-70b", "meta-llama--Meta-Llama-3.1-70B"),
                                       ("llama-3.1-8b", "meta-llama--Meta-Llama-3.1-8B"), ("mixtral-8x7b", "mistralai--Mixtral-8x7B-v0.1"),
                                       ("kimi-k2", "moonshotai--Kimi-K2-Instruct"), ("kimi-k2.5", "moonshotai--Kimi-K2.5"),
                                       ("glm-5", "zai-org--GLM-5"), ("minimax-m2.5", "MiniMaxAI--MiniMax-M2.5"),
                                       ("llama-4-scout", "meta-llama--Llama-4-Scout-17B-16E-Instruct"),
                                       ("llama-4-maverick", "meta-llama--Llama-4-Maverick-17B-128E-Instruct")])
def test_catalog_cards_equal_the_published_config_json(card, file):
    path = _aic_configs() / f"{file}_config.json"
    from_json, ours = get_model(str(path)), get_model(card)
    assert {k: getattr(from_json, k) for k in ARCH} == {k: getattr(ours, k) for k in ARCH}


def test_every_aiconfigurator_config_of_a_supported_type_loads():
    loaded = 0
    for path in sorted(_aic_configs().glob("*_config.json")):
        kind = json.loads(path.read_text()).get("model_type")
        try:
            m = get_model(str(path))
        except CatalogError as e:
            assert "\n" not in str(e) and path.name in str(e)
            continue
        loaded += 1
        assert m.total_params > 0 and m.kv_bytes_per_token() > 0, kind
    assert loaded >= 15


# ---------------------------------------------------------------------------- command line


def _run(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", str(tmp_path / "o"), "--num-requests", "5",
                           "--quiet", "--no-plots", *args], capture_output=True, text=True)


def test_cli_runs_a_config_json_model(tmp_path):
    proc = _run(tmp_path, "--model", write(tmp_path, "tiny-llama.json", LLAMA))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["requests"]["completed"] == 5


@pytest.mark.parametrize("args,message", [
    (["--hardware", "h100-sxm", "--dtype", "nvfp4"], "has no nvfp4 tensor cores"),
    (["--hardware", "a100-80gb", "--dtype", "fp8"], "has no fp8 tensor cores"),
    (["--dtype", "int3"], "dtype"),
    (["--model", "nowhere/config.json"], "model config file nowhere/config.json does not exist"),
])
def test_cli_bad_precision_or_model_file_is_one_line(tmp_path, args, message):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert message in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_cli_bad_config_json_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = _run(tmp_path, "--model", str(bad))
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_serving_rows_keyed_by_hf_repo_map_to_cards():
    for repo, card in [("Qwen/Qwen3-8B", "qwen3-8b"), ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
                       ("openai/gpt-oss-120b", "gpt-oss-120b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
                       ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("Qwen/Qwen3-32B", "qwen3-32b"),
                       ("deepseek-ai/DeepSeek-R1", "deepseek-r1"), ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b")]:
        assert get_model(repo).id == card


def test_fp8_step_prices_no_nan_for_every_catalog_model():
    from sim.catalog import list_models

    for m in list_models():
        tp = 8 if m.total_params > 100e9 else 1
        cm = RooflineCostModel(m, get_hardware("h200-sxm"), tp=tp, dtype="fp8")
        st_ = cm.step_time(BatchShape((512, 1, 1), (0, 100, 4000), tp=tp))
        assert np.isfinite(st_.total) and st_.total > 0, m.id


def test_plan_skips_a_gpu_without_the_weight_dtype_saying_why(tmp_path):
    from sim.sweep.capacity import SearchSettings
    from sim.sweep.plan import plan

    s = SearchSettings(ttft_p99_s=2.0, tpot_p99_s=0.1, seeds=(0,), rel_tol=0.2)
    base = {"dtype": "fp8", "cost": {"model": "roofline"}, "workload": {"num_requests": 60}}
    t = plan("llama-3.1-8b", 2.0, gpus=["h100-sxm", "a100-80gb"], tps=[1], schedulers=[("vllm", ())], settings=s,
             out=tmp_path, base=base, workers=1, progress=False).table
    a100 = t[t["hardware"] == "a100-80gb"].iloc[0]
    assert a100["status"] == "does not fit" and "no fp8 tensor cores" in a100["note"]
    assert a100["usd_per_gpu_hour"] == get_hardware("a100-80gb").price.usd_per_gpu_hour
    assert t[t["hardware"] == "h100-sxm"].iloc[0]["status"] == "ok"


def test_deepseek_falls_back_to_the_roofline_without_the_kernel_database(monkeypatch):
    """(With the database DeepSeek is priced from it: tests/test_kerneldb_moe.py.)"""
    from sim.catalog import get_hardware as hwc
    from sim.cost import kerneldb_data as kd
    from sim.cost import make_cost_model

    monkeypatch.setattr(kd, "package_root", lambda: None)
    cfg = load_config({"model": "deepseek-v3", "hardware": "h200-sxm", "parallelism": {"tp": 8}, "dtype": "fp8"})
    assert make_cost_model(cfg, get_model("deepseek-v3"), hwc("h200-sxm")).source == "roofline"
    strict = load_config({**cfg.to_dict(), "cost": {**cfg.to_dict()["cost"], "model": "kerneldb"}})
    with pytest.raises(ConfigError, match="cost.model kerneldb"):
        make_cost_model(strict, get_model("deepseek-v3"), hwc("h200-sxm"))
