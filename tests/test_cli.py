"""The command line as a user meets it: results folder, summary keys, one clear error per bad input."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from sim.cli import main

SUMMARY_KEYS = {
    "requests": {"arrived", "completed", "rejected", "preemptions"},
    "ttft_s": {"mean", "p50", "p90", "p99"}, "tpot_s": {"mean", "p50", "p90", "p99"},
    "itl_s": {"mean", "p50", "p90", "p99"}, "e2e_s": {"mean", "p50", "p90", "p99"},
    "throughput": {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"},
    "goodput": {"requests_per_s", "slo_attainment"},
    "cost": {"gpu_hours", "usd", "usd_per_million_output_tokens"},
    "sim": {"wall_s", "steps", "simulated_s", "seed"},
}


def test_run_writes_results_folder(tmp_path):
    out = tmp_path / "r"
    rc = main(["run", "--out", str(out), "--num-requests", "60", "--rate", "8", "--quiet"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    for section, keys in SUMMARY_KEYS.items():
        assert keys <= set(s[section]), section
    req = pd.read_parquet(out / "requests.parquet")
    assert len(req) == s["requests"]["arrived"] == 60
    assert {"arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s",
            "replica", "preemptions", "status"} <= set(req.columns)
    steps = pd.read_parquet(out / "steps.parquet")
    assert len(steps) == s["sim"]["steps"]
    assert {"replica", "start_s", "batch_size", "num_tokens", "kv_blocks_used", "t_gemm_s", "t_attn_decode_s"} <= set(steps.columns)
    assert (out / "config.yaml").exists()
    for name in ("latency_cdf", "e2e_vs_arrival", "batch_kv_over_time", "step_breakdown"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 1000
        assert (out / "plots" / f"{name}.svg").exists()


def test_run_prints_summary_table(tmp_path, capsys):
    main(["run", "--out", str(tmp_path / "r"), "--num-requests", "30", "--no-plots", "--model", "llama-2-7b",
          "--hardware", "a100-80gb", "--replicas", "2", "--scheduler", "static"])
    text = capsys.readouterr().out
    assert "llama-2-7b | 2 x 1 a100-80gb" in text and "TTFT" in text and "per million output tokens" in text


@pytest.mark.parametrize("args,message", [
    (["--set", "kv.blok_size=8"], "unknown config key kv.blok_size; did you mean kv.block_size?"),
    (["--set", "kv.gpu_memory_utilization=3"], "kv.gpu_memory_utilization"),
    (["--model", "llama-2-70b", "--hardware", "a100-80gb"], "does not fit on a100-80gb"),
    (["--hardware", "h100"], None),
    (["missing.yaml"], "config file missing.yaml does not exist"),
])
def test_bad_input_is_one_message_and_nonzero_exit(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", str(tmp_path / "o"), "--num-requests", "5",
                           "--quiet", "--no-plots", *args], capture_output=True, text=True)
    if message is None:  # an alias is accepted
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr


def test_catalog_lists_cards(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert "mixtral-8x7b" in out and "mi300x" in out and "set cost.usd_per_gpu_hour" in out


def test_malformed_trace_row_names_file_and_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n0.5,abc,5\n")
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--trace", str(trace), "--out", str(tmp_path / "o"),
                           "--quiet", "--no-plots"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "t.csv" in proc.stderr and "line 3" in proc.stderr


def test_without_step_records_the_summary_is_unchanged(tmp_path):
    from sim import simulate

    from conftest import tiny_config

    cfg = tiny_config(workload={"num_requests": 80, "rate": 20.0})
    full = simulate(cfg, out=tmp_path / "a", plots=True)
    lean = simulate({**cfg, "output": {"plots": True, "progress": False, "step_records": False}}, out=tmp_path / "b")
    a, b = dict(full.summary), dict(lean.summary)
    for s in (a, b):
        s["sim"] = {k: v for k, v in s["sim"].items() if k not in ("wall_s", "step_records")}
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert lean.steps.empty and not (tmp_path / "b" / "steps.parquet").exists()
    assert (tmp_path / "b" / "plots" / "latency_cdf.png").exists()
    assert not (tmp_path / "b" / "plots" / "batch_kv_over_time.png").exists()
