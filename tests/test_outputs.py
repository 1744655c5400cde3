"""Readable outputs and docs that match the code (issue 10, item 8): tables that stay aligned,
one column-name mapping, help text, the HTML report, coinciding figure lines, example defaults."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.cli import build_parser, main
from sim.commands.table import duration, print_summary
from sim.config import load_config
from sim.metrics.labels import label, text_table

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("v,text", [(0.0123, "12.3 ms"), (0.999, "999.0 ms"), (14.2, "14.20 s"), (1000.0, "16.67 min"),
                                    (7200.0, "2.00 h"), (3.6e8, "100,000 h"), (None, "-")])
def test_duration_units(v, text):
    assert duration(v) == text


def test_summary_table_stays_aligned_past_a_million_ms(capsys):
    """The issue: the table broke once a value reached 1,000,000 ms."""
    cfg = load_config({})
    big = {"mean": 1_000.0, "p50": 12_345.0, "p90": 2.5e6, "p99": 9.9e8}
    s = {"requests": {"arrived": 10, "completed": 10, "rejected": 0, "preemptions": 0},
         **{k: dict(big) for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")},
         "throughput": {"requests_per_s": 1.0, "output_tokens_per_s": 1.0},
         "goodput": {"requests_per_s": 0.0, "slo_attainment": 0.0, "slo": {"ttft_s": 2, "tpot_s": 0.2}},
         "cost": {"usd": None, "gpu_hours": 1.0, "price_source": "x"},
         "sim": {"cost_model": "roofline", "simulated_s": 1.0, "steps": 1, "wall_s": 0.1}}
    print_summary(s, cfg)
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("metric"))
    rows = lines[i:i + 6]
    assert len({len(r) for r in rows}) == 1, rows  # every row the same width: columns aligned
    for r in rows[1:]:
        assert len(r.split()) >= 9  # name + 4 x (number, unit): no two values ran together


def test_one_label_mapping():
    assert label("usd_per_million_output_tokens") == "$ / M output tokens"
    assert label("ttft_p99_s") == "TTFT p99 (s)"
    assert label("cost.usd_per_million_output_tokens") == "$ / M output tokens"
    assert label("kv.block_size") == "kv block size"
    t = text_table([{"ttft_p99_s": 0.5, "candidate": "a"}], ["candidate", "ttft_p99_s"])
    assert t.splitlines()[0].split("  ")[0].strip() == "candidate" and "TTFT p99 (s)" in t


def _help(cmd: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[cmd]
    return sub.format_help()


@pytest.mark.parametrize("cmd", ["run", "compare", "sweep", "capacity", "plan", "ab", "report"])
def test_help_is_clean(cmd):
    text = _help(cmd)
    assert "__" not in text  # no PARALLELISM__TP metavars
    for line in text.splitlines():
        assert line.count("(default") <= 1, line
    assert text.count("(default") <= text.count("--") + 1
    if cmd == "run":
        assert "--tp TP" in text


def test_sweep_prints_a_results_table(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("base:\n  workload: {num_requests: 20, rate: 4}\ngrid:\n  workload.rate: [2, 4]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "arrival rate (req/s)" in out and "TTFT p99 (s)" in out and "$ / M output tokens" in out
    assert out.count("\n2  ") + out.count("\n4  ") >= 2 or out.count(" ok ") >= 2


def test_report_reads_a_capacity_folder_with_human_columns(tmp_path, capsys):
    out = tmp_path / "cap"
    assert main(["capacity", "--num-requests", "50", "--seeds", "1", "--rel-tol", "0.3", "--slo-ttft-p99", "1",
                 "--workers", "1", "--quiet", "--out", str(out)]) == 0
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "SLO capacity report" in html and "lowest failing rate (req/s)" in html and ">p99 TTFT</th>" in html
    assert "ttft_p99_s</th>" not in html and 'class="wide"' in html and "overflow-x:auto" in html
    assert "DESIGN" not in html


def test_report_plan_table_has_human_names(tmp_path):
    from sim.sweep.report import Doc

    d = Doc("t")
    d.table(["usd_per_million_output_tokens", "ttft_p99_s"], [[1.0, 2.0]])
    h = d.html()
    assert '<th class="num">$ / M output tokens</th>' in h and '<th class="num">TTFT p99 (s)</th>' in h


def test_coinciding_series_are_found():
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        from policy_common import coinciding
    finally:
        sys.path.pop(0)
    a = np.array([[1, 2.0], [2, 3.0]])
    assert coinciding({"vllm": a, "sjf": a.copy(), "srpt": a + 1, "lookahead": a.copy()}) == {"sjf": "vllm",
                                                                                           "lookahead": "vllm"}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_example_yaml_states_which_values_are_not_defaults():
    """experiments/example.yaml lists its non-default keys; every other value must be the default."""
    from sim.scheduler import REGISTRY

    path = REPO / "experiments" / "example.yaml"
    text = path.read_text()
    listed = {k.strip() for k in text.split("# not defaults:", 1)[1].splitlines()[0].split(",")}
    ex = _flat(yaml.safe_load(text))
    default = _flat(load_config({}).to_dict())
    knobs = REGISTRY[ex["scheduler.name"]].Knobs().model_dump()
    differ = set()
    for k, v in ex.items():
        d = knobs[k.split(".", 1)[1]] if k.startswith("scheduler.") and k != "scheduler.name" else default[k]
        if v != d:
            differ.add(k)
    assert differ == listed


def test_workloads_doc_defaults_match_the_config():
    """Every default docs/workloads.md states in its defaults table is the config's."""
    from sim.workload.config import WorkloadConfig

    doc = (REPO / "docs" / "workloads.md").read_text()
    w = WorkloadConfig()
    assert f"`rate` | {w.rate:g}" in doc
    assert f"`num_requests` | {w.num_requests}" in doc
    assert f"median {w.prompt.median:g}, sigma {w.prompt.sigma:g}, min {w.prompt.min}, max {w.prompt.max}" in doc
    assert f"median {w.output.median:g}, sigma {w.output.sigma:g}, min {w.output.min}, max {w.output.max}" in doc


def test_no_document_cites_a_missing_design_file():
    """The design lives in docs/architecture.md; no file cites a design document outside the
    repository."""
    import re

    files = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    for folder in ("sim", "calibration", "kernels", "experiments"):
        files += (REPO / folder).rglob("*.py")
    for p in files:
        assert not re.search(r"\bDESIGN\b", p.read_text()), p


def test_capacity_json_is_valid(tmp_path):
    """capacity.json states the precision and each seed's bracket."""
    out = tmp_path / "c"
    assert main(["capacity", "--num-requests", "50", "--seeds", "2", "--rel-tol", "0.3", "--workers", "1", "--quiet",
                 "--out", str(out)]) == 0
    r = json.loads((out / "capacity.json").read_text())
    assert r["precision"] <= 0.3 + 1e-9
    assert all(s["fail_rps"] is None or s["rps"] < s["fail_rps"] for s in r["per_seed"])
