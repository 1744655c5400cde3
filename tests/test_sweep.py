"""Sweeps: resumable store, one row per run, failures recorded, local pool == Ray."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.sweep.runner import Driver, one_run
from sim.sweep.spec import parse_spec
from sim.sweep.store import RunStore, config_key, resolve
from sim.sweep.sweep import run_sweep

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": {"num_requests": 100}}


def spec(rates, seeds=(0, 1), **extra):
    return parse_spec({"base": BASE, "grid": {"workload.rate": list(rates)}, "seeds": list(seeds), **extra})


def test_spec_expansion_grid_zip_seeds():
    s = parse_spec({"base": BASE, "grid": {"workload.rate": [1, 2], "scheduler.name": ["vllm", "static"]},
                    "zip": [{"hardware": ["h100-sxm", "a100-80gb"], "parallelism.tp": [1, 2]}], "seeds": [0, 3]})
    pts = s.points()
    assert len(pts) == 2 * 2 * 2 * 2
    assert s.varied == ["workload.rate", "scheduler.name", "hardware", "parallelism.tp"]
    zipped = {(p.config["hardware"], p.config["parallelism"]["tp"]) for p in pts}
    assert zipped == {("h100-sxm", 1), ("a100-80gb", 2)}
    assert pts[0].values == {"workload.rate": 1, "scheduler.name": "vllm", "hardware": "h100-sxm", "parallelism.tp": 1}
    assert [p.seed for p in pts[:2]] == [0, 3]


def test_key_is_the_resolved_config():
    a = resolve({"workload": {"num_requests": 100}})
    b = resolve({"workload": {"num_requests": 100}, "output": {"plots": True}, "seed": 0})
    assert config_key(a) == config_key(b)  # defaults spelled out or not; figures never matter
    assert config_key(a) != config_key(resolve({"workload": {"num_requests": 101}}))


def test_resume_reuses_finished_runs_and_records_failures(tmp_path):
    # first pass: half the grid (as if the sweep had been killed half-way)
    t1, c1 = run_sweep(spec([2, 4]), tmp_path, progress=False)
    assert c1 == {**c1, "reused": 0, "run": 4, "failed": 0}
    # a run that raises: llama-3.1-70b does not fit one H100 -> recorded, the others go on
    full = spec([2, 4, 8], zip=[{"model": ["llama-3.1-8b", "llama-3.1-70b"]}])
    t2, c2 = run_sweep(full, tmp_path, progress=False)
    assert len(t2) == 3 * 2 * 2 and t2["key"].is_unique
    assert c2["reused"] == 4 and c2["run"] == 2 and c2["failed"] == 6
    bad = t2[t2["status"] == "error"]
    assert (bad["model"] == "llama-3.1-70b").all() and bad["error"].str.contains("does not fit on h100-sxm").all()
    for k in bad["key"]:
        assert (tmp_path / "runs" / k / "error.txt").is_file()
        assert not (tmp_path / "runs" / k / "summary.json").exists()
    ok = t2[t2["status"] == "ok"]
    for col in ("ttft_s.p50", "ttft_s.p90", "ttft_s.p99", "tpot_s.p99", "e2e_s.p99", "throughput.output_tokens_per_s",
                "goodput.requests_per_s", "goodput.slo_attainment", "cost.usd", "cost.usd_per_million_output_tokens",
                "cost.gpus"):
        assert ok[col].notna().all(), col
    # the finished runs are identical on reuse, and the table on disk is the one returned
    disk = pd.read_parquet(tmp_path / "results.parquet")
    assert len(disk) == len(t2)
    first = t1.set_index("key")["ttft_s.p99"]
    assert (disk.set_index("key").loc[first.index, "ttft_s.p99"] == first).all()
    _, c3 = run_sweep(full, tmp_path, progress=False)
    assert c3["reused"] == 6 and c3["run"] == 0  # failed runs are retried, finished ones never
    assert json.loads((tmp_path / "sweep.json").read_text())["counts"]["reused"] == 6


def test_store_writes_are_atomic(tmp_path):
    store = RunStore(tmp_path)
    d = Driver(store, progress=False)
    res = d.run({0: one_run({**BASE, "workload": {"num_requests": 50}})})
    key = res[0]["key"]
    files = sorted(p.name for p in (tmp_path / "runs" / key).iterdir())
    assert files == ["config.yaml", "latency.parquet", "summary.json"]  # no temporary files left
    assert store.get(key)["summary"] == res[0]["summary"]


def test_process_pool_matches_inline(tmp_path):
    t_in, _ = run_sweep(spec([2, 8], seeds=[0]), tmp_path / "a", workers=1, progress=False)
    t_pool, c = run_sweep(spec([2, 8], seeds=[0]), tmp_path / "b", workers=2, progress=False)
    assert c["run"] == 2
    drop = ["sim.wall_s"]
    pd.testing.assert_frame_equal(t_in.drop(columns=drop), t_pool.drop(columns=drop))


def test_ray_backend_matches_local(tmp_path):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]' in the servesim checkout)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        t_ray, c = run_sweep(spec([2, 8]), tmp_path / "ray", backend="ray", workers=2, progress=False)
    finally:
        ray.shutdown()
    t_local, _ = run_sweep(spec([2, 8]), tmp_path / "local", workers=1, progress=False)
    assert c["run"] == 4
    pd.testing.assert_frame_equal(t_ray.drop(columns=["sim.wall_s"]), t_local.drop(columns=["sim.wall_s"]))


def test_cli_sweep_reports_reuse(tmp_path, capsys):
    import yaml

    from sim.cli import main

    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump({"base": BASE, "grid": {"workload.rate": [4]}, "seeds": [0]}))
    assert main(["sweep", str(p), "--out", str(tmp_path / "s"), "--workers", "1", "--quiet"]) == 0
    assert main(["sweep", str(p), "--out", str(tmp_path / "s"), "--workers", "1", "--quiet"]) == 0
    assert "1 reused, 0 run, 0 failed" in capsys.readouterr().out
