"""experiments/published/measurements.csv (public measurements outside the kernel database) and
experiments/compare_published.py, which predicts them (docs/published.md).

The schema tests read only the csv; the run tests price three rows (a kernel, a GEMM, one small
serving benchmark) with the roofline, and with the kernel database when it is installed."""
import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest

from sim.catalog import get_hardware
from sim.cost import RooflineParams, kerneldb_data as kd

EXP = Path(__file__).resolve().parents[1] / "experiments"
QUICK = "fa3_causal_hd128_s16384,gemm_bf16_b200_m8192_n8192_k8192,vllm_ci_latency_llama-3.1-8b_h200-sxm"


def _load():
    spec = importlib.util.spec_from_file_location("compare_published", EXP / "compare_published.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cp = _load()


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


def test_every_row_has_a_source_a_valid_unit_and_a_positive_value():
    rows = cp.load_rows()
    assert cp.check_rows(rows) == []
    assert {r["kind"] for r in rows} == {"kernel", "serving"}
    for r in rows:
        assert r["source"].strip() and r["conditions"].strip(), r["id"]
        assert r["unit"] in cp.UNITS[r["op"]], r["id"]
        assert r["value"] > 0 and math.isfinite(r["value"]), r["id"]
        assert r["hardware"] in kd.SYSTEMS or r["hardware"] == "mi300x", r["id"]
        need = {"attention_prefill": {"batch", "seq", "heads", "head_dim"}, "gemm": set("mnk"),
                "all_reduce": {"bytes", "gpus"}, "offline_throughput": {"isl", "osl", "requests"},
                "ttft": {"isl", "osl", "concurrency"}, "tpot": {"isl", "osl", "concurrency"},
                "e2e_latency": {"isl", "osl", "batch"}}[r["op"]]
        assert need <= set(r["params"]), (r["id"], need - set(r["params"]))


def test_no_measurement_is_taken_from_the_kernel_database():
    """The point of the file: sources other than aiconfigurator-core."""
    for r in cp.load_rows():
        assert "aiconfigurator" not in r["source"].lower(), r["id"]


def test_schema_check_names_the_line_and_the_problem(tmp_path):
    rows = cp.load_rows()
    with open(cp.CSV, newline="") as f:
        raw = list(csv.DictReader(f))
    raw[0]["value"], raw[1]["unit"], raw[2]["source"] = "-1", "furlongs", ""
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cp.COLUMNS)
        w.writeheader()
        w.writerows(raw)
    problems = cp.check_rows(cp.load_rows(bad))
    assert len(problems) == 3
    assert problems[0].startswith(f"line 2 ({rows[0]['id']})") and "positive" in problems[0]
    assert "furlongs" in problems[1] and "source" in problems[2]
    assert cp.main(["--csv", str(bad), "--out", str(tmp_path / "out")]) == 2


def _run(tmp_path, models):
    out = tmp_path / "out"
    assert cp.main(["--ids", QUICK, "--cost-models", models, "--out", str(out)]) == 0
    with open(out / "predictions.csv", newline="") as f:
        recs = list(csv.DictReader(f))
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "predicted_vs_measured.png").stat().st_size > 0
    assert (out / "predicted_vs_measured.svg").exists()
    return recs, summary


def test_quick_run_roofline(tmp_path):
    recs, summary = _run(tmp_path, "roofline")
    assert [r["id"] for r in recs] == QUICK.split(",")
    for r in recs:  # a generous band: the point is that each path prices the row in its unit
        assert 0.3 < float(r["roofline_ratio"]) < 3.0, r
    assert set(summary["by_kind"]) == {"kernel", "serving"}
    assert summary["all"]["roofline"]["priced"] == 3
    # at 16k tokens the roofline's attention is compute-bound: attn_eff x the bf16 peak (FA3 measured 616)
    peak = get_hardware("h100-sxm").peak_flops("bf16") / 1e12
    assert float(recs[0]["roofline_predicted"]) == pytest.approx(RooflineParams().attn_eff * peak, rel=0.01)


@pytest.mark.skipif(kd.package_root() is None, reason="aiconfigurator-core (a dependency) is not installed")
def test_quick_run_kerneldb(tmp_path):
    recs, summary = _run(tmp_path, "roofline,kerneldb")
    for r in recs:
        assert 0.3 < float(r["kerneldb_ratio"]) < 3.0, r
        assert not r.get("kerneldb_error"), r
    assert summary["all"]["kerneldb"]["priced"] == 3
