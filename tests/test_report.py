"""report: Markdown and HTML for run, sweep, plan and A/B folders; every figure it names exists."""
from __future__ import annotations

import re

import pytest

from sim.sweep.report import make_report

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": {"num_requests": 100}}


def check(report_dir, expect_figs):
    md = (report_dir / "report.md").read_text()
    ht = (report_dir / "report.html").read_text()
    refs = re.findall(r"\]\(([^)]+\.(?:png|svg))\)", md) + re.findall(r'(?:src|href)="([^"]+)"', ht)
    assert refs
    for r in refs:
        f = report_dir / r
        assert f.is_file() and f.stat().st_size > 0, r
    for name in expect_figs:
        assert f"figures/{name}.png" in md and f"figures/{name}.svg" in ht
    assert "<!doctype html>" in ht and "<style>" in ht
    return md


def test_report_on_run_folder(tmp_path):
    from sim.api import simulate

    simulate(BASE, out=tmp_path / "run", plots=False, progress=False)
    md = check(tmp_path / "rep", []) if make_report(tmp_path / "run", tmp_path / "rep") else None
    assert "llama-3.1-8b" in md and "Lambda" in md and "latency_cdf.png" in md


def test_report_on_sweep_folder(tmp_path):
    from sim.sweep.spec import parse_spec
    from sim.sweep.sweep import run_sweep

    spec = parse_spec({"base": BASE, "grid": {"workload.rate": [2, 8]}, "seeds": [0, 1]})
    run_sweep(spec, tmp_path / "sw", progress=False)
    make_report(tmp_path / "sw", tmp_path / "rep")
    md = check(tmp_path / "rep", ["latency_cdf", "latency_vs_load"])
    assert "Latency against load" in md


def test_report_on_plan_and_ab_folders(tmp_path):
    from sim.sweep.ab import ab_test
    from sim.sweep.capacity import SearchSettings
    from sim.sweep.plan import plan

    plan("llama-3.1-8b", 20.0, gpus=["h100-sxm", "l40s"], tps=[1], schedulers=[("vllm", ())],
         settings=SearchSettings(seeds=(0,), rel_tol=0.2), out=tmp_path / "plan", base={"workload": {"num_requests": 100}},
         progress=False)
    make_report(tmp_path / "plan", tmp_path / "rep")
    md = check(tmp_path / "rep", ["pareto", "latency_cdf"])
    assert "Cost table" in md and "Pareto front" in md and "no public price for l40s" in md

    ab_test(BASE, ["scheduler.name=vllm"], ["scheduler.max_num_seqs=8"], [0, 1], tmp_path / "ab", progress=False)
    make_report(tmp_path / "ab", tmp_path / "rep_ab")
    check(tmp_path / "rep_ab", ["latency_cdf"])


def test_report_rejects_other_folders(tmp_path):
    from sim.errors import ServesimError

    with pytest.raises(ServesimError, match="not a results folder"):
        make_report(tmp_path, tmp_path / "rep")
