"""Runnable examples double as golden tests: their printed output is kept beside them."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXP = Path(__file__).resolve().parents[1] / "experiments"
ENV = {**os.environ, "PYTHONPATH": str(EXP.parent)}  # this checkout's sim, not another install's


@pytest.mark.parametrize("script", ["quickstart.py"])
def test_example_output_matches_golden(script):
    out = subprocess.run([sys.executable, str(EXP / script)], capture_output=True, text=True, check=True, env=ENV).stdout
    expected = (EXP / script.replace(".py", ".expected.txt")).read_text()
    assert out == expected


def test_example_config_loads_and_matches_defaults_where_it_says_so():
    from sim.config import load_config

    cfg = load_config(EXP / "example.yaml")
    assert (cfg.model, cfg.parallelism.tp, cfg.cluster.replicas, cfg.scheduler.name) == ("llama-3.1-70b", 4, 2, "vllm_v1")
    default = load_config()
    assert cfg.kv == default.kv and cfg.slo == default.slo and cfg.engine == default.engine
    assert cfg.workload.prompt == default.workload.prompt and cfg.workload.output == default.workload.output


def test_faults_example_output_matches_golden_and_draws_its_figures(tmp_path):
    out = subprocess.run([sys.executable, str(EXP / "faults.py"), "--out", str(tmp_path)], capture_output=True,
                         text=True, check=True, env=ENV).stdout
    assert out == (EXP / "faults.expected.txt").read_text()
    for stem in ("faults_latency", "faults_autoscale"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 10_000 and (tmp_path / f"{stem}.svg").exists()
