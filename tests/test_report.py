"""report: Markdown and HTML for run, sweep, plan and A/B folders; every figure it names exists."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from sim.sweep.report import make_report

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": {"num_requests": 100}}


class Tables(HTMLParser):
    """Every table of an HTML report as (header cells, rows of cells), each cell (class, text);
    the text of every paragraph; whether any table tag appears outside a table."""

    def __init__(self):
        super().__init__()
        self.tables, self.paragraphs, self.stray = [], [], []
        self._table = self._row = self._cell = self._p = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table = ([], [])
        elif tag in ("tr", "td", "th") and self._table is None:
            self.stray.append(tag)
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = [tag, dict(attrs).get("class"), ""]
        elif tag == "p":
            self._p = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(tuple(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            head, body = self._table
            (head if self._row and self._row[0][0] == "th" else body).append(self._row)
            self._row = None
        elif tag == "table":
            self.tables.append(self._table)
            self._table = None
        elif tag == "p" and self._p is not None:
            self.paragraphs.append(self._p)
            self._p = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        if self._p is not None:
            self._p += data


def check_html(text: str) -> Tables:
    """The report's HTML: every table a real <table> whose rows all have the header's columns,
    each column aligned the same in header and body; no Markdown table or backtick left as text."""
    t = Tables()
    t.feed(text)
    assert not t.stray, t.stray
    for head, body in t.tables:
        assert len(head) == 1 and body, (head, body)
        for row in body:
            assert len(row) == len(head[0]), (head, row)
            assert [c[1] for c in row] == [c[1] for c in head[0]], (head, row)  # numbers right, words left, both
    for para in t.paragraphs:
        assert "|---" not in para and "| " not in para, para
    assert "`" not in "".join(t.paragraphs) and "`" not in text.split("<body>")[1].replace("<code>", ""), "backtick"
    return t


def check(report_dir, expect_figs):
    md = (report_dir / "report.md").read_text()
    ht = (report_dir / "report.html").read_text()
    check_html(ht)
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

    ht = (tmp_path / "rep" / "report.html").read_text()
    t = check_html(ht)
    plan_table = next(tb for tb in t.tables if tb[0][0][0][2] == "rank")
    head = [c[2] for c in plan_table[0][0]]
    ok = next(r for r in plan_table[1] if r[head.index("status")][2] == "ok")
    assert ok[head.index("headroom")][2].endswith("%")  # as the command line prints it, not a fraction
    assert re.fullmatch(r"[\d,]+\.\d\d", ok[head.index("$/hour")][2])  # to the cent
    assert "unprofiled" not in ok[head.index("note")][2]  # the kernel database is measured
    assert "<code>servesim run config.yaml</code>" in ht

    ab_test(BASE, ["scheduler.name=vllm"], ["scheduler.max_num_seqs=8"], [0, 1], tmp_path / "ab", progress=False)
    make_report(tmp_path / "ab", tmp_path / "rep_ab")
    check(tmp_path / "rep_ab", ["latency_cdf"])
    t = check_html((tmp_path / "rep_ab" / "report.html").read_text())
    ab = next(tb for tb in t.tables if tb[0][0][0][2] == "metric")  # the A/B results: a table, not a paragraph
    assert [c[2] for c in ab[0][0]] == ["metric", "A", "B", "B - A", "95% CI", "relative [95% CI]", "p", "verdict"]
    assert [r[0][2] for r in ab[1]][:2] == ["p50 TTFT (ms)", "p99 TTFT (ms)"]
    assert "cost per million output tokens ($)" in [r[0][2] for r in ab[1]]
    assert ab[0][0][1][1] == "num" and ab[0][0][5][1] is None  # numbers right-aligned, the verdict left


def test_report_on_capacity_folder(tmp_path, capsys):
    from sim.cli import main

    assert main(["capacity", "--seeds", "2", "--num-requests", "100", "--rel-tol", "0.5", "--workers", "1", "--quiet",
                 "--out", str(tmp_path / "cap")]) == 0
    make_report(tmp_path / "cap", tmp_path / "rep")
    md = check(tmp_path / "rep", ["capacity_probes"])
    assert "p99 TTFT and p99 TPOT of every probe" in md


def test_sweep_report_legends_and_units(tmp_path):
    from sim.sweep.report import series_label

    assert series_label(["parallelism.tp", "scheduler.name"], (4, "vllm")) == "TP 4, scheduler vllm"
    assert series_label(["scheduler.name"], "vllm") == "scheduler vllm"
    from sim.sweep.spec import parse_spec
    from sim.sweep.sweep import run_sweep

    spec = parse_spec({"base": {**BASE, "workload": {"num_requests": 60}}, "grid": {"workload.rate": [4, 200]}, "seeds": [0]})
    run_sweep(spec, tmp_path / "sw", progress=False)
    make_report(tmp_path / "sw", tmp_path / "rep")
    t = check_html((tmp_path / "rep" / "report.html").read_text())
    tb = next(tb for tb in t.tables if tb[0][0][0][2] == "arrival rate (req/s)")
    head = [c[2] for c in tb[0][0]]
    for row in tb[1]:  # latencies in the unit the command line picks (ms, s, min), never 123,484.1 ms
        assert re.fullmatch(r"[\d.,]+ (ms|s|min|h)", row[head.index("p99 TTFT")][2]), row
        assert float(row[head.index("p99 TTFT")][2].split()[0].replace(",", "")) < 1000


def test_report_rejects_other_folders(tmp_path):
    from sim.errors import ServesimError

    with pytest.raises(ServesimError, match="not a results folder"):
        make_report(tmp_path, tmp_path / "rep")
