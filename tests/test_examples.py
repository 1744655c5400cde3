"""Runnable examples double as golden tests: their printed output is kept beside them."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXP = Path(__file__).resolve().parents[1] / "experiments"


@pytest.mark.parametrize("script", ["quickstart.py"])
def test_example_output_matches_golden(script):
    env = {**os.environ, "PYTHONPATH": str(EXP.parent)}  # this checkout's sim, not wherever it is installed from
    out = subprocess.run([sys.executable, str(EXP / script)], capture_output=True, text=True, check=True, env=env).stdout
    expected = (EXP / script.replace(".py", ".expected.txt")).read_text()
    assert out == expected


def test_example_config_loads_and_matches_defaults_where_it_says_so():
    from sim.config import load_config

    cfg = load_config(EXP / "example.yaml")
    assert (cfg.model, cfg.parallelism.tp, cfg.cluster.replicas, cfg.scheduler.name) == ("llama-3.1-70b", 4, 2, "vllm_v1")
    default = load_config()
    assert cfg.kv == default.kv and cfg.slo == default.slo and cfg.engine == default.engine
    assert cfg.workload.prompt == default.workload.prompt and cfg.workload.output == default.workload.output
