"""Fit, profiled cost model and plan timelines on synthetic profiles (no torch, seconds)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration import plans as P
from calibration.fit import fit, fit_roofline, group_points, split_holdout
from kernels.schema import RowWriter
from sim.catalog import get_hardware, get_model
from sim.cost.profiled import ProfiledCostModel, load_profiled_cost_model, load_tables
from sim.cost.roofline import RooflineCostModel, RooflineParams
from sim.types import BatchShape

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "calibration" / "cards" / "llama-tiny.yaml")
CPU = str(ROOT / "calibration" / "cards" / "cpu-host.yaml")
TRUE = RooflineParams(gemm_eff=0.5, attn_eff=0.2, mem_eff=0.4, kernel_floor_s=1e-5)
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def _write_profile(folder: Path) -> None:
    """A profile whose times are exactly a roofline with the TRUE factors."""
    model, hw = get_model(TINY), get_hardware(CPU)
    rm = RooflineCostModel(model, hw, params=TRUE)
    s = rm.shapes
    ws = {f: RowWriter(folder / f"{f}.csv", f) for f in ("gemm", "attn_prefill", "attn_decode", "elementwise", "sampling")}
    stats = lambda t: {"time_us": t * 1e6, "time_us_p10": t * 1e6, "time_us_p90": t * 1e6, "repeats": 5}  # noqa: E731
    base = {"dtype": "bf16", "tp": 1}
    for op, (n, k) in s.gemms.items():
        for t in TOKENS:
            ws["gemm"].write({**base, "op": op, "tokens": t, "groups": 1, "m": t, "n": n, "k": k, **stats(rm.gemm(op, t))})
    heads = {"q_heads": s.q_heads, "kv_heads": s.kv_heads, "head_dim": s.head_dim}
    for q in (16, 64, 256):
        for c in (0, 256, 1024):
            ws["attn_prefill"].write({**base, **heads, "num_seqs": 1, "chunk_tokens": q, "context_tokens": c,
                                      **stats(rm.attn_prefill([(q, c)]))})
    for b in (1, 4, 16):
        for c in (128, 512, 2048):
            ws["attn_decode"].write({**base, **heads, "block_size": 16, "batch": b, "context_min": c, "context_mean": c,
                                     "context_max": c, "kv_tokens_total": b * c, **stats(rm.attn_decode(b, b * c))})
    for op in ("rmsnorm", "silu_mul", "rotary", "embedding"):
        for t in (1, 16, 128, 512):
            ws["elementwise"].write({**base, "op": op, "tokens": t, "hidden": 1, **stats(rm.elementwise(op, t))})
    for b in (1, 8, 32):
        ws["sampling"].write({**base, "op": "random", "batch": b, "vocab": s.vocab, **stats(rm.sampling(b))})
    for w in ws.values():
        w.close()
    (folder / "meta.json").write_text(json.dumps({"hardware_id": "cpu", "model": "llama-tiny"}))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cal")
    prof = root / "profiles" / "cpu" / "llama-tiny"
    _write_profile(prof)
    return fit(prof, root / "fitted")


def test_holdout_keeps_the_grid_boundary():
    pts = [(float(t), None, 1.0, {}) for t in TOKENS]
    train, held = split_holdout(pts)
    assert [p[0] for p in held] == [2.0, 64.0]  # interior points 2..256, every 5th from the first
    assert train[0][0] == 1 and train[-1][0] == 512
    grid = [(float(x), float(y), 1.0, {}) for x in (16, 64, 256) for y in (0, 256, 1024)]
    assert [(p[0], p[1]) for p in split_holdout(grid)[1]] == [(64.0, 256.0)]


def test_fit_writes_tables_holdout_and_params(fitted):
    for name in ("tables.npz", "holdout.json", "roofline_params.json", "meta.json"):
        assert (fitted / name).is_file()
    tables = load_tables(fitted)
    assert "gemm|bf16|1|qkv" in tables and "attn_decode|bf16|1|" in tables
    held = json.loads((fitted / "holdout.json").read_text())
    assert held and all(h["x"] not in tables[h["table"]].x or h["y"] is not None for h in held)


def test_roofline_factors_are_recovered(fitted, tmp_path):
    p = json.loads((fitted / "roofline_params.json").read_text())["params"]
    assert p["gemm_eff"] == pytest.approx(TRUE.gemm_eff, rel=0.15)
    assert p["mem_eff"] == pytest.approx(TRUE.mem_eff, rel=0.15)
    assert p["kernel_floor_s"] == pytest.approx(TRUE.kernel_floor_s, rel=0.3)
    assert p["attn_eff"] == pytest.approx(TRUE.attn_eff, rel=0.15)


def test_profiled_model_matches_grid_points_and_counts_out_of_range(fitted):
    model, hw = get_model(TINY), get_hardware(CPU)
    cm = load_profiled_cost_model(model, hw, profiles_dir=str(fitted.parent.parent))
    assert isinstance(cm, ProfiledCostModel) and cm.source == "profiled"
    truth = RooflineCostModel(model, hw, params=TRUE)
    assert cm.gemm("qkv", 512) == pytest.approx(truth.gemm("qkv", 512), rel=1e-6)
    assert cm.attn_prefill([(256, 1024)]) == pytest.approx(truth.attn_prefill([(256, 1024)]), rel=1e-6)
    assert cm._oor == 0
    # beyond the grid: boundary time scaled by the roofline ratio (here exact), and counted
    assert cm.gemm("gate_up", 2048) == pytest.approx(truth.gemm("gate_up", 2048), rel=1e-6)
    assert cm._oor == 1
    cm.attn_decode(64, 64 * 4096)
    assert cm._oor == 2
    # an op without a table (kv_write) is priced by the roofline with the fitted factors
    assert cm.elementwise("kv_write", 64) == pytest.approx(truth.elementwise("kv_write", 64), rel=0.2)
    st = cm.step_time(BatchShape((100, 1, 1), (0, 300, 700)))
    assert st.source == "profiled" and st.total > 0
    assert load_profiled_cost_model(model, hw, profiles_dir=str(fitted), dtype="fp16") is None


def test_simulation_uses_profiled_tables(fitted, tmp_path):
    from sim import simulate

    res = simulate({"model": TINY, "hardware": CPU, "cost": {"profiles_dir": str(fitted.parent.parent)}},
                   overrides=P.CPU_WORKLOAD[:1] + ["workload.num_requests=10"] + P.CPU_WORKLOAD[2:], out=tmp_path / "r",
                   plots=False, progress=False)
    assert set(res.steps["cost_source"]) == {"profiled"}
    assert res.steps["t_gemm_s"].sum() > 0 and res.steps["t_attn_decode_s"].sum() > 0
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["sim"]["out_of_range_queries"] == res.summary["sim"]["out_of_range_queries"] >= 0


def test_plan_timeline_reproduces_the_simulation(fitted):
    doc = P.make_plans(TINY, CPU, P.CPU_WORKLOAD + ["workload.num_requests=12"], profiles_dir=str(fitted))
    from sim import simulate

    res = simulate({"model": TINY, "hardware": CPU, "cost": {"profiles_dir": str(fitted)}},
                   overrides=P.CPU_WORKLOAD + ["workload.num_requests=12", "seed=0"], plots=False, progress=False)
    m = P.request_metrics(doc, [s["predicted_s"] for s in doc["steps"]])
    req = res.requests.set_index("id") if "id" in res.requests else res.requests
    ttft_col = next(c for c in req.columns if c.startswith("ttft"))
    for rid, (ttft, _) in m.items():
        assert ttft == pytest.approx(float(req.loc[int(rid), ttft_col]), abs=1e-9)


def test_token_times_by_hand():
    doc = {"requests": {"0": [0.0, 3, 3], "1": [0.5, 2, 2]},
           "steps": [{"ids": [0], "new": [3], "ctx": [0]},        # 0 emits token 1 at t=1
                     {"ids": [0, 1], "new": [1, 2], "ctx": [3, 0]},  # both emit at t=3
                     {"ids": [0, 1], "new": [1, 1], "ctx": [4, 2]}]}  # both emit at t=6
    m = P.request_metrics(doc, [1.0, 2.0, 3.0])
    assert m["0"] == (1.0, 2.5) and m["1"] == (2.5, 3.0)


def test_fit_cli_errors_cleanly(tmp_path):
    from sim.cli import main

    assert main(["fit", str(tmp_path / "missing")]) == 2
    assert np.isfinite(1.0)


def test_fit_roofline_without_points_is_empty():
    assert fit_roofline(get_model(TINY), get_hardware(CPU), "bf16", {}) == {}
    assert group_points(Path("/nonexistent-profile-folder")) == {}


def test_unprofiled_gpu_uses_factors_fitted_on_profiled_gpus(tmp_path):
    """`servesim fit` over a root of GPU profiles writes their average factors; a simulation of a
    GPU without its own profile takes them (and says so) unless the user set cost.roofline."""
    import json

    from sim import simulate

    (tmp_path / "roofline_params.json").write_text(json.dumps({"params": {"gemm_eff": 0.5, "mem_eff": 0.7}}))
    # MI300X: a GPU no profile and no kernel database covers, so `auto` prices it by the roofline
    base = {"hardware": "mi300x", "workload": {"num_requests": 20}, "output": {"plots": False, "progress": False}}
    default = simulate(base).summary
    fitted = simulate({**base, "cost": {"profiles_dir": str(tmp_path)}}).summary
    user = simulate({**base, "cost": {"profiles_dir": str(tmp_path), "roofline": {"gemm_eff": 0.9}}}).summary
    p = fitted["sim"]["cost_model_params"]
    assert p["gemm_eff"] == 0.5 and p["mem_eff"] == 0.7 and "fitted on profiled GPUs" in p["source"]
    assert default["sim"]["cost_model_params"]["source"] == "defaults"
    assert user["sim"]["cost_model_params"]["gemm_eff"] == 0.9 and user["sim"]["cost_model_params"]["source"] == "defaults"
    assert fitted["e2e_s"]["mean"] > default["e2e_s"]["mean"]  # lower efficiencies: slower steps
