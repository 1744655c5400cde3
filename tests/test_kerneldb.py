"""The kernel-database cost model (aiconfigurator-core extra) and ``servesim validate-silicon``.

Tests that read the database skip with a reason when the extra is not installed; the fallback
tests simulate its absence and run everywhere."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.cli import main
from sim.config import load_config
from sim.cost import kerneldb, kerneldb_data as kd
from sim.cost import make_cost_model
from sim.types import COMPONENTS, BatchShape

needs_db = pytest.mark.skipif(kd.package_root() is None,
                              reason="aiconfigurator-core (a dependency) is not installed")


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


def _cm(model="llama-3.1-8b", hw="h100-sxm", tp=1, dtype="bf16", framework="vllm"):
    cfg = load_config({"model": model, "hardware": hw, "dtype": dtype, "parallelism": {"tp": tp},
                       "cost": {"model": "kerneldb", "framework": framework}})
    return make_cost_model(cfg, get_model(model), get_hardware(hw))


def _gemm_rows(system="h100_sxm", framework="vllm", dtype="bfloat16"):
    _, version = kd.resolve("h100-sxm", framework, None)
    df = pd.read_parquet(kd.data_dir(system) / "gemm" / framework / version / "gemm_perf.parquet")
    df = df[df["gemm_dtype"] == dtype]
    return df[df["kernel_source"] == df["kernel_source"].value_counts().idxmax()]


@needs_db
def test_gemm_lookup_is_exact_on_a_grid_point():
    cm = _cm()
    rows = _gemm_rows()
    for m, n, k in ((64, 4096, 4096), (1, 1024, 8192), (1024, 16384, 4096)):
        hit = rows[(rows.m == m) & (rows.n == n) & (rows.k == k)]
        assert len(hit) == 1
        capped = rows[(rows.m >= m) & (rows.n == n) & (rows.k == k)]["latency"].min()  # monotone_in_m
        assert cm._gemm_mnk(m, n, k, "bfloat16") == pytest.approx(capped / 1e3, rel=1e-12)
    assert cm.out_of_range_total() == 0


def test_gemm_latency_is_capped_by_every_larger_m():
    t = np.array([[27.0, 5.0], [32.0, 6.0], [13.0, 7.0], [32.0, 6.5], [14.0, 9.0]])
    assert kd.monotone_in_m(t).tolist() == [[13.0, 5.0], [13.0, 6.0], [13.0, 6.5], [14.0, 6.5], [14.0, 9.0]]


@needs_db
def test_isolated_slow_small_m_cells_do_not_reach_decode_batches():
    cm = _cm(model="llama-3.1-70b", hw="b200", tp=4, dtype="fp8")  # vLLM's table: 32 us at m = 4, 13 us at m = 8
    n, k = cm.shapes.gemms["qkv"]
    assert (n, k) == (2560, 8192)
    assert cm.gemm("qkv", 4) <= cm.gemm("qkv", 8) < 14e-6


@needs_db
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 32767), st.sampled_from([(4096, 4096), (6144, 4096), (4096, 16384), (65536, 8192)]))
def test_gemm_interpolation_lies_between_its_neighbours(m, nk):
    cm = _cm()
    grid = cm._gemms["bfloat16"]
    ms = [math.exp(v) for v in grid.la[0]]
    i = max(j for j, v in enumerate(ms) if v <= m + 1e-9)
    lo_m, hi_m = round(ms[i]), round(ms[min(i + 1, len(ms) - 1)])
    t = cm._gemm_mnk(m, *nk, "bfloat16")
    a, b = cm._gemm_mnk(lo_m, *nk, "bfloat16"), cm._gemm_mnk(hi_m, *nk, "bfloat16")
    assert min(a, b) * (1 - 1e-12) <= t <= max(a, b) * (1 + 1e-12)
    assert cm.out_of_range_total() == 0


@needs_db
def test_queries_outside_the_grid_are_scaled_from_the_edge_and_counted():
    cm = _cm()
    edge = cm._gemm_mnk(32768, 4096, 4096, "bfloat16")
    assert cm.out_of_range_total() == 0
    beyond = cm._gemm_mnk(131072, 4096, 4096, "bfloat16")
    assert cm.out_of_range_total() == 1
    assert beyond == pytest.approx(4 * edge, rel=0.02)  # compute-bound: the roofline scales with m
    st1 = cm.step_time(BatchShape((40000,), (0,)))  # prefill beyond the 16k attention grid
    assert st1.out_of_range > 0 and cm.out_of_range_total() > 1


@needs_db
def test_a_whole_prompt_is_the_context_attention_table_at_that_length():
    cm = _cm()
    s = cm.shapes
    rows = pd.read_parquet(kd.data_dir("h100_sxm") / "attention" / "vllm" / cm.version / "context_attention_perf.parquet")
    rows = rows[(rows.num_heads == s.q_heads) & (rows.num_key_value_heads == s.kv_heads) & (rows.head_dim == s.head_dim)
                & (rows.batch_size == 1) & (rows.isl == 2048) & (rows.window_size == 0)
                & (rows.kv_cache_dtype == "bfloat16") & (rows.attn_dtype == "bfloat16")]
    want = rows[rows.kernel_source == cm.meta["attention ctx"]]["latency"].min() / 1e3
    assert cm.attn_prefill([(2048, 0)]) == pytest.approx(want, rel=1e-12)
    # a chunk over a cached prefix costs its FLOP share of the whole causal pass
    whole = cm.attn_prefill([(2048, 0)])
    assert cm.attn_prefill([(1024, 1024)]) == pytest.approx(whole * (1024 * (1024 + 1025 / 2)) / (2048 * 2049 / 2))


@needs_db
def test_decode_step_equals_step_time_of_the_same_shape():
    cm = _cm(model="llama-3.1-70b", hw="h200-sxm", tp=4, dtype="fp8")
    ctx = (100, 2000, 517, 4095)
    a = cm.step_time(BatchShape((1,) * len(ctx), ctx, tp=4))
    b = cm.decode_step(len(ctx), sum(c + 1 for c in ctx), max(ctx) + 1)
    assert a == b and a.source == "kerneldb" and a.comm > 0


@needs_db
def test_fp8_weights_keep_bf16_all_reduce_and_are_faster_than_bf16():
    bf, f8 = _cm(model="llama-3.1-70b", hw="h200-sxm", tp=4), _cm(model="llama-3.1-70b", hw="h200-sxm", tp=4, dtype="fp8")
    shape = BatchShape((2048,), (0,), tp=4)
    a, b = bf.step_time(shape), f8.step_time(shape)
    assert a.comm == b.comm  # activations are all-reduced in bf16 either way
    assert b.gemm < a.gemm


@needs_db
def test_fast_forward_is_exact_with_the_kernel_database():
    from test_fast_forward import assert_identical, both

    cfg = tiny_config(cost={"model": "kerneldb", "framework": "sglang"}, kv={"num_gpu_blocks": 300},
                      workload={"rate": 3.0, "num_requests": 30, "prompt": {"kind": "uniform", "min": 16, "max": 900},
                                "output": {"kind": "uniform", "min": 1, "max": 300}})
    on, off = both(cfg)
    assert_identical(on, off)
    assert on.summary["sim"]["steps_by_cost_source"] == {"kerneldb": on.summary["sim"]["steps"]}


@needs_db
def test_the_cache_file_holds_exactly_what_the_parquet_gives(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    system, version = kd.resolve("l40s", "trtllm", None)
    first = kd.load(system, "trtllm", version)
    files = list(tmp_path.rglob("*.npz"))
    assert len(files) == 1 and kd.package_version() in str(files[0])
    again = kd.load(system, "trtllm", version)
    fresh = kd.derive(system, "trtllm", version)
    assert set(first) == set(again) == set(fresh)
    for k in fresh:
        np.testing.assert_array_equal(again[k], fresh[k])


@needs_db
def test_auto_uses_the_database_and_every_output_says_so(tmp_path, capsys):
    rc = main(["run", "--model", "llama-3.1-70b", "--hardware", "h200-sxm", "--tp", "4", "--dtype", "fp8",
               "--num-requests", "20", "--no-plots", "--out", str(tmp_path)])
    assert rc == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    cm = s["cost_model"]
    _, version = kd.resolve("h200-sxm", "vllm", None)
    assert (cm["source"], cm["framework"], cm["framework_version"], cm["system"]) == (
        "aiconfigurator-core kernel database", "vllm", version, "h200_sxm")
    assert cm["package_version"] == kd.package_version() and s["sim"]["cost_model"] == "kerneldb"
    ov = cm["engine_overhead"]
    fitted = json.loads(kerneldb.OVERHEAD_FILE.read_text())["frameworks"]["vllm"]
    assert (ov["cpu_step_s"], ov["cpu_per_seq_s"]) == (fitted["step_s_by_tp"]["4"], fitted["per_seq_s"])
    assert ov["source"].startswith("fitted by experiments/fit_engine_overhead.py")
    out = capsys.readouterr().out
    assert f"cost model kerneldb (aiconfigurator-core kernel database {kd.package_version()}: vllm {version} on h200_sxm)" in out


def test_auto_falls_back_to_the_roofline_without_the_package(monkeypatch):
    monkeypatch.setattr(kd, "package_root", lambda: None)
    res = simulate(tiny_config(workload={"rate": 5.0, "num_requests": 5}, cost={"model": "auto"}))
    assert res.summary["sim"]["cost_model"] == "roofline"
    assert res.summary["cost_model"]["source"] == "roofline (analytic)"


def test_auto_falls_back_on_a_gpu_the_database_lacks():
    res = simulate(tiny_config(hardware="mi300x", workload={"rate": 5.0, "num_requests": 5}, cost={"model": "auto"}))
    assert res.summary["sim"]["cost_model"] == "roofline"


def test_demanding_the_database_without_it_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(kd, "package_root", lambda: None)
    assert main(["run", "--cost-model", "kerneldb", "--num-requests", "5", "--quiet", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not installed" in err[0] and "aiconfigurator-core==0.12.0" in err[0]


@pytest.mark.parametrize("args, words", [
    (["--framework", "tgi"], "cost.framework"),
    (["--cost-model", "kerneldb", "--framework-version", "0.0.1"], "versions:"),
])
def test_bad_framework_or_version_is_one_line(args, words, capsys, tmp_path):
    if "versions:" in words and kd.package_root() is None:
        pytest.skip("aiconfigurator-core (a dependency) is not installed")
    assert main(["run", *args, "--num-requests", "5", "--quiet", "--no-plots", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_closed_loop_ramp_up_staggers_first_requests():
    res = simulate(tiny_config(workload={"num_requests": 4, "prompt": {"kind": "fixed", "value": 50},
                                         "output": {"kind": "fixed", "value": 400},
                                         "closed_loop": {"clients": 4, "think_time_s": 0.0, "think": "fixed",
                                                         "ramp_up_s": 2.0}},
                               cost={"model": "roofline"}))
    assert res.requests["arrival_s"].tolist() == [0.0, 0.5, 1.0, 1.5]


# ---------------------------------------------------------------------- validate-silicon

def test_hf_repos_map_to_catalog_ids():
    from sim.compare.silicon import catalog_model

    assert catalog_model("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert catalog_model("nvidia/Llama-3.1-8B-Instruct-FP8") == "llama-3.1-8b"
    assert catalog_model("meta-llama/Llama-3.1-70B") == "llama-3.1-70b"
    assert catalog_model("moonshotai/Kimi-K2.5") == "kimi-k2.5"
    assert catalog_model("zhipuai/GLM-5") == "glm-5"
    assert catalog_model("Qwen/Qwen3.5-397B-A17B") is None  # hybrid linear attention: no card


@needs_db
def test_validate_silicon_end_to_end_on_three_rows(tmp_path, capsys):
    rc = main(["validate-silicon", "--models", "llama-3.1-8b", "--systems", "h100-sxm", "--backends", "trtllm",
               "--limit", "3", "--rounds", "1", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    pred = pd.read_parquet(tmp_path / "predictions.parquet")
    assert len(pred) == 3 and set(pred["system"]) == {"h100_sxm"} and set(pred["backend"]) == {"trtllm"}
    for cm in ("roofline", "kerneldb"):
        assert (pred[f"{cm}_ttft_ms"] > 0).all() and (pred[f"{cm}_tpot_ms"] > 0).all()
    s = json.loads((tmp_path / "summary.json").read_text())
    ape = (pred["kerneldb_tpot_ms"] - pred["silicon_tpot_ms"]).abs() / pred["silicon_tpot_ms"]
    assert s["scores"]["kerneldb"]["overall"]["tpot_ape_median"] == pytest.approx(ape.median())
    assert s["rows_scored"] == 3 and (tmp_path / "predicted_vs_measured.png").is_file()
    out = capsys.readouterr().out
    assert "h100_sxm  trtllm      1-8     3" in out
    # rows at concurrency 1-8 fitted the engine overhead: none is held out, and the headline says so
    assert (pred["fitted_by"] != "").all() and out.startswith("headline: the 0 rows no fit touched (held out)")
    assert s["fits"]["rows_held_out"] == 0 and s["fits"]["rows_used_by_a_fit"] == 3
    assert s["headline"]["scores"]["kerneldb"]["overall"] == {"rows": 0}


@pytest.mark.parametrize("args, words", [
    (["--backends", "tgi"], "unknown backend 'tgi'"),
    (["--systems", "tpu_v5"], "unknown system 'tpu_v5'"),
    (["--models", "no-such-model"], "no row of the csv matches"),
    (["--limit", "0"], "--limit must be at least 1"),
])
def test_validate_silicon_bad_inputs_are_one_line(args, words, capsys, tmp_path):
    if kd.package_root() is None and "limit" not in words:
        pytest.skip("aiconfigurator-core (a dependency) is not installed")
    assert main(["validate-silicon", *args, "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_validate_silicon_without_the_package_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(kd, "package_root", lambda: None)
    assert main(["validate-silicon", "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "aiconfigurator-core==0.12.0" in err[0]


@pytest.mark.parametrize("think, ramp", [(0.0, 3.0), (0.2, 0.0), (0.0, 0.0)])
def test_fast_forward_is_exact_for_closed_loop_clients(think, ramp):
    from test_fast_forward import assert_identical, both

    cfg = tiny_config(cost={"model": "roofline"}, kv={"num_gpu_blocks": 400},
                      workload={"num_requests": 40, "prompt": {"kind": "uniform", "min": 16, "max": 600},
                                "output": {"kind": "uniform", "min": 1, "max": 200},
                                "closed_loop": {"clients": 7, "think_time_s": think, "ramp_up_s": ramp}})
    on, off = both(cfg)
    assert_identical(on, off)


def test_engine_overhead_is_read_per_framework_and_interpolated_in_tp(tmp_path, monkeypatch):
    f = tmp_path / "overhead.json"
    f.write_text(json.dumps({"provenance": "test", "frameworks": {
        "vllm": {"step_s_by_tp": {"1": 1e-4, "4": 4e-4, "8": 2e-4}, "per_seq_s": 1e-6}}}))
    monkeypatch.setattr(kerneldb, "OVERHEAD_FILE", f)
    assert kerneldb.load_overhead("vllm", 4) == (4e-4, 1e-6, "test")
    assert kerneldb.load_overhead("vllm", 2) == pytest.approx((2e-4, 1e-6, "test"))
    assert kerneldb.load_overhead("vllm", 16)[0] == 2e-4  # beyond the fitted degrees: the nearest
    assert kerneldb.load_overhead("sglang", 1) is None


@needs_db
def test_collections_without_a_window_size_column_read_as_full_attention():
    """a100_sxm's older attention tables have no window_size column: every row is full attention."""
    path = kd.package_root() / "systems" / "data" / "a100_sxm" / "attention" / "vllm" / "0.14.0" / "context_attention_perf.parquet"
    if not path.exists():
        pytest.skip("this aiconfigurator-core release has no a100_sxm vllm 0.14.0 attention table")
    df = kd._read(path, ["batch_size", "window_size", "latency"])
    assert set(df.columns) == {"batch_size", "window_size", "latency"} and (df["window_size"] == 0).all() and len(df)
    cm = make_cost_model(load_config({"model": "llama-2-7b", "hardware": "a100-80gb", "cost": {"model": "kerneldb"}}),
                         get_model("llama-2-7b"), get_hardware("a100-80gb"))
    assert cm.source == "kerneldb" and cm.step_time(BatchShape((128,), (0,))).total > 0


def _quant_latency(system, framework, table, m, k):
    _, version = kd.resolve({"h200_sxm": "h200-sxm", "b200_sxm": "b200"}[system], framework, None)
    q = pd.read_parquet(kd.data_dir(system) / "quantize" / framework / version / f"{table}.parquet")
    return q[(q.m == m) & (q.k == k) & (q.quant_dtype == "fp8")]["latency"].iloc[0] / 1e3


@needs_db
def test_trtllm_fp8_gemms_drop_the_dynamic_scale_and_the_fused_quantisation():
    """TRT-LLM's fp8 table times dynamic scale + scaling + GEMM; the engine runs a static scale,
    and o_proj / down_proj (and with TP > 1 qkv / gate_up) get fp8 input from their producer."""
    tp1, tp4 = (_cm(model="llama-3.1-70b", hw="h200-sxm", tp=t, dtype="fp8", framework="trtllm") for t in (1, 4))
    m = 16
    for cm, op, scaled in ((tp1, "qkv", True), (tp1, "o", False), (tp4, "qkv", False), (tp4, "down", False)):
        n, k = cm.shapes.gemms[op]
        table = cm._gemm_mnk(m, n, k, "fp8")
        cs = _quant_latency("h200_sxm", "trtllm", "computescale_perf", m, k)
        sm = _quant_latency("h200_sxm", "trtllm", "scale_matrix_perf", m, k)
        assert cm.gemm(op, m) == pytest.approx(table - cs - (0.0 if scaled else sm), rel=1e-9), (op, cm.tp)
    assert tp4.describe()["engine_fusions"]["fp8_input_gemms"] == ["down", "gate_up", "o", "qkv"]


@needs_db
def test_vllm_and_trtllm_bf16_gemms_read_the_table_as_is():
    for fw, dtype in (("vllm", "fp8"), ("trtllm", "bf16")):
        cm = _cm(model="llama-3.1-70b", hw="h200-sxm", tp=4, dtype=dtype, framework=fw)
        n, k = cm.shapes.gemms["qkv"]
        assert cm.gemm("qkv", 16) == cm._gemm_mnk(16, n, k, cm.gemm_dtype)


@needs_db
def test_trtllm_prices_its_fused_elementwise_kernels_once():
    """Rotary and the KV-cache write run inside TRT-LLM's attention op; with TP > 1 the residual
    add + RMSNorm run inside the all-reduce kernel: none is priced again."""
    for tp, per_layer in ((1, ("rmsnorm", "rmsnorm", "silu_mul")), (4, ("silu_mul",))):
        cm = _cm(model="llama-3.1-8b", hw="h200-sxm", tp=tp, dtype="fp8", framework="trtllm")
        _, other, comm = cm._dense_terms(64, 64)
        L = cm.model.num_layers
        want = L * sum(cm.elementwise(op, 64) for op in per_layer)
        want += cm.elementwise("embedding", 64) + cm.elementwise("rmsnorm", 64) + cm.sampling(64)
        assert other == pytest.approx(want, rel=1e-12)
        assert comm == pytest.approx(L * 2 * cm.all_reduce(64 * cm.shapes.hidden)
                                     + kerneldb.RooflineCostModel.collective(cm, "all_gather", 64 * cm.shapes.vocab * 4, tp))
    v = _cm(model="llama-3.1-8b", hw="h200-sxm", tp=4, dtype="fp8", framework="vllm")
    L = v.model.num_layers
    assert v._dense_terms(64, 64)[1] == pytest.approx(
        L * sum(v.elementwise(op, 64) for op in ("rmsnorm", "rmsnorm", "silu_mul", "rotary", "kv_write"))
        + v.elementwise("embedding", 64) + v.elementwise("rmsnorm", 64) + v.sampling(64), rel=1e-12)


def test_trtllm_quantised_rows_replay_with_an_fp8_kv_cache():
    from sim.compare import silicon

    row = {"model": "llama-3.1-70b", "hardware": "h200-sxm", "dtype": "fp8", "tp": 4, "concurrency": 8,
           "isl": 1024, "osl": 128, "backend": "trtllm"}
    assert silicon.row_config(row, "kerneldb")["kv"] == {"dtype": "fp8"}
    assert silicon.row_config({**row, "dtype": "nvfp4"}, "kerneldb")["kv"] == {"dtype": "fp8"}
    assert silicon.row_config({**row, "dtype": "bf16"}, "kerneldb")["kv"] == {}
    assert silicon.row_config({**row, "backend": "vllm"}, "kerneldb")["kv"] == {}


@needs_db
@pytest.mark.parametrize("bound, size", [("MEMO_ENTRIES", 16), ("TOTALS_ENTRIES", 16), ("TOTALS_ENTRIES", 30000)])
def test_a_full_attention_memo_starts_again_without_changing_results(monkeypatch, bound, size):
    """The attention memos and the decode-step totals' memo are bounded (``MEMO_ENTRIES``,
    ``TOTALS_ENTRIES``): one that fills starts again empty (a run longer than the whole bound is
    priced and not kept), and the run's requests, steps and out-of-range counts are those of an
    unbounded memo."""
    cfg = {"cluster": {"replicas": 2}, "workload": {"rate": 20.0, "num_requests": 600},
           "cost": {"model": "kerneldb"}, "output": {"plots": False, "progress": False}}
    full = simulate(cfg)
    monkeypatch.setattr(kerneldb, bound, size)
    small = simulate(cfg)
    pd.testing.assert_frame_equal(full.requests, small.requests, check_exact=True)
    pd.testing.assert_frame_equal(full.steps, small.steps, check_exact=True)
    assert full.summary["sim"]["out_of_range_queries"] == small.summary["sim"]["out_of_range_queries"]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), na=st.integers(2, 7), nb=st.integers(2, 7), repeat=st.booleans())
def test_two_axis_grid_lookup_is_bit_identical_to_the_general_one(seed, na, nb, repeat):
    """``Grid._bilinear`` (every decode step's attention lookup) unrolls ``_multilinear``: the
    same floating-point operations, so the same value to the last bit, at axis points, between
    them and across a zero-width cell."""
    rng = np.random.default_rng(seed)
    a, b = np.sort(rng.uniform(1, 1e5, na)), np.sort(rng.uniform(1, 1e6, nb))
    if repeat:
        a[1] = a[0]
    g = kerneldb.Grid([a, b], rng.uniform(1e-6, 1e-2, (na, nb)))
    for x in [(float(rng.uniform(a[0], a[-1])), float(rng.uniform(b[0], b[-1]))) for _ in range(8)] + \
             [(float(a[i]), float(b[j])) for i in (0, na - 1) for j in (0, nb - 1)]:
        assert g(x) == g._multilinear(x)
    # ``along`` (a decode run's lookups at one batch size) is ``_multilinear`` point by point: at
    # any batch (on a grid line or between), lengths growing (as decode runs ask them) or in any
    # order, on grid lines or between, and with a log time that is not finite (a zero time)
    xs = sorted([float(v) for v in rng.uniform(b[0], b[-1], 12)] + [float(v) for v in b])
    for x0 in [float(v) for v in a] + [float(rng.uniform(a[0], a[-1]))]:
        for order in (xs, list(rng.permutation(xs))):
            assert g.along(x0, order) == [g._multilinear((x0, x)) for x in order]
    with np.errstate(divide="ignore"):
        z = kerneldb.Grid([a, b], np.where(rng.uniform(size=(na, nb)) < 0.3, 0.0, rng.uniform(1e-6, 1e-2, (na, nb))))
    for x0 in (float(a[0]), float(rng.uniform(a[0], a[-1]))):
        assert g.along(x0, xs) == [g._multilinear((x0, x)) for x in xs]
        assert z.along(x0, xs) == [z._multilinear((x0, x)) for x in xs]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shape=st.tuples(*[st.integers(2, 6)] * 3), repeat=st.integers(-1, 2))
def test_three_axis_grid_lookup_is_bit_identical_to_the_general_one(seed, shape, repeat):
    """``Grid._trilinear`` (GEMMs by m, n, k) unrolls ``_multilinear`` the same way."""
    rng = np.random.default_rng(seed)
    axes = [np.sort(rng.uniform(1, 1e5, n)) for n in shape]
    if repeat >= 0:
        axes[repeat][1] = axes[repeat][0]
    g = kerneldb.Grid(axes, rng.uniform(1e-6, 1e-2, shape))
    corners = [tuple(float(a[i]) for a, i in zip(axes, c)) for c in np.ndindex(2, 2, 2)]
    for x in [tuple(float(rng.uniform(a[0], a[-1])) for a in axes) for _ in range(8)] + \
             [tuple(float(a[0] if i == 0 else a[-1]) for a, i in zip(axes, c)) for c in np.ndindex(2, 2, 2)] + corners:
        assert g(x) == g._multilinear(x)


# a decode run: (batch size, longest context, extra KV tokens, steps priced, steps kept, first
# go's share, continue the previous run); sizes and lengths reach past the decode tables
# (2048 sequences; 64k or 128k tokens) and below their shortest length
DECODE_RUNS = st.lists(st.tuples(
    st.sampled_from([1, 2, 3, 8, 255, 2048, 2049, 3000]) | st.integers(1, 4096),
    st.sampled_from([1, 2, 3, 900, 65535, 65537, 131073, 200000]) | st.integers(1, 140_000),
    st.integers(0, 10**9), st.integers(0, 80), st.integers(0, 80), st.floats(0, 1), st.booleans()),
    min_size=1, max_size=4)


def assert_decode_runs_are_single_steps(make, runs) -> None:
    """Decode runs priced as the fast-forward prices them (``decode_totals`` in two goes, then
    ``count_decode_run`` and ``decode_series`` of the steps kept) give exactly the values of the
    same steps priced one at a time by ``decode_step``, and the same out-of-range count after
    every run; pricing alone counts nothing. ``make`` builds a fresh model."""
    fast, slow, ref = make(), make(), make()
    last = None
    for n, longest, extra, steps, keep, share, cont in runs:
        if cont and last is not None:
            n, kv, longest = last
        else:
            kv = n + extra % (n * (longest - 1) + 1)  # n <= kv <= n * longest
        keep, first = min(keep, steps), int(share * steps)
        counted = fast.out_of_range_total()
        totals = fast.decode_totals(n, kv, longest, first) + \
            fast.decode_totals(n, kv + first * n, longest + first, steps - first)
        assert fast.out_of_range_total() == counted
        fast.count_decode_run(n, kv, longest, keep)
        counted = fast.out_of_range_total()
        series = fast.decode_series(n, kv, longest, keep)
        assert fast.out_of_range_total() == counted
        want = [ref.decode_step(n, kv + j * n, longest + j) for j in range(steps)]
        for j in range(keep):
            slow.decode_step(n, kv + j * n, longest + j)
        assert totals == [w.total for w in want]
        for c in COMPONENTS:
            assert list(series[c]) == [getattr(w, c) for w in want[:keep]], c
        assert series["source"] == fast.source
        assert fast.out_of_range_total() == slow.out_of_range_total()
        assert fast._oor == slow._oor  # per operator too: queries and GPU time (``Extrapolation``)
        last = (n, kv + keep * n, longest + keep)


@needs_db
@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from([(m, fw) for fw in kd.FRAMEWORKS
                             for m in ({}, {"model": "llama-3.1-70b", "hw": "h200-sxm", "tp": 4, "dtype": "fp8"})]),
       runs=DECODE_RUNS)
def test_decode_runs_are_priced_as_single_steps(case, runs):
    kw, framework = case
    assert_decode_runs_are_single_steps(lambda: _cm(framework=framework, **kw), runs)


@needs_db
def test_fast_forward_counts_only_the_steps_a_run_keeps():
    """Contexts past the decode table (64k tokens) count an out-of-range query at every decode
    step; runs cut by arrivals price steps they do not keep: the count is that of single steps."""
    from test_fast_forward import assert_identical, both

    cfg = tiny_config(cost={"model": "kerneldb"}, kv={"num_gpu_blocks": 30000},
                      workload={"rate": 0.5, "num_requests": 12, "output": {"kind": "uniform", "min": 1, "max": 600},
                                "prompt": {"kind": "uniform", "min": 60000, "max": 70000}})
    on, off = both(cfg)
    assert_identical(on, off)
    assert on.summary["sim"]["out_of_range_queries"] > 100


def test_auto_on_a_gpu_the_database_lacks_says_why_it_uses_the_roofline(capsys, tmp_path):
    """The database is the default; where it does not cover the GPU, ``auto`` prices with the
    roofline and the summary and the table say so."""
    if kd.package_root() is None:
        pytest.skip("aiconfigurator-core (a dependency) is not installed")
    assert main(["run", "--hardware", "mi300x", "--num-requests", "20", "--no-plots", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cost model roofline (the kernel database does not cover mi300x" in out
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["sim"]["cost_model"] == "roofline"
    assert "does not cover mi300x" in s["cost_model"]["why_not_kerneldb"]
    assert main(["run", "--num-requests", "20", "--no-plots", "--out", str(tmp_path / "h100")]) == 0
    s = json.loads((tmp_path / "h100" / "summary.json").read_text())
    assert s["sim"]["cost_model"] == "kerneldb"


@needs_db
def test_attention_dp_and_mtp_rows_of_the_csv_replay():
    """An attention-DP row (TRT-LLM, 8 ranks of TP 1, EP 8) measured with MTP, and a vLLM
    attention-DP row: each replays as an expert group, with its measured clients."""
    from sim.compare import silicon

    df = pd.read_csv(silicon.csv_path())
    rows, _ = silicon.select(df, models=["deepseek-r1", "minimax-m2.5"], systems=["b200_sxm"])
    dsr1 = rows[rows["id"] == "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp8_0_ep8_0_976"]
    mm = rows[rows["id"] == "minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg691"]
    if not len(dsr1) or not len(mm):
        pytest.skip("the csv of this aiconfigurator-core version lacks these rows")
    r = dsr1.iloc[0].to_dict()
    assert (r["tp"], r["ep"], r["dp"], r["concurrency"], r["speculative"]) == (1, 8, 8, 64, "mtp")
    with_mtp = silicon.replay((r, "kerneldb", 2, (), "none", "auto", 0.02))
    without = silicon.replay((r | {"speculative": "none"}, "kerneldb", 2, (), "none", "auto", 0.02))
    assert 0 < with_mtp["tpot_ms"] < without["tpot_ms"]  # an accepted draft a step most of the time
    m = mm.iloc[0].to_dict()
    assert (m["tp"], m["dp"]) == (1, m["ep"]) and m["dp"] > 1 and m["speculative"] == ""
    out = silicon.replay((m, "kerneldb", 2, (), "none", "auto", 0.02))
    assert out["tpot_ms"] > 0 and out["ttft_ms"] > 0
