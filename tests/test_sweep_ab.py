"""A/B: paired on the same seeds, paired-t intervals, verdicts only when the interval excludes 0."""
from __future__ import annotations

import json

import pytest

from sim.sweep.ab import ab_test, paired_ci, verdict

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": {"num_requests": 100, "rate": 8}}


def test_paired_ci_matches_scipy():
    from scipy import stats

    a, b = [1.0, 2.0, 3.0, 4.0], [1.5, 2.2, 3.9, 4.4]
    ci = paired_ci(a, b)
    d = [y - x for x, y in zip(a, b)]
    lo, hi = stats.t.interval(0.95, 3, loc=sum(d) / 4, scale=stats.sem(d))
    assert ci["lo"] == pytest.approx(lo) and ci["hi"] == pytest.approx(hi)
    assert ci["p_value"] == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert verdict("p99 TTFT", ci, 1e3, "ms", True).startswith("B higher p99 TTFT by 500 ms [31.6, 968]")
    assert verdict("x", paired_ci([1, 2, 3], [1.1, 1.9, 3.0]), 1, "s", True) == "no significant difference"


def test_identical_variants_show_no_difference(tmp_path):
    r = ab_test(BASE, ["scheduler.name=vllm"], ["scheduler.name=vllm"], [0, 1, 2], tmp_path, progress=False)
    assert r["runs"]["run"] == 3 and r["runs"]["reused"] == 3  # B is the same config: run once
    assert all(m["verdict"] == "no significant difference" and m["mean_diff"] == 0 for m in r["metrics"])


def test_smaller_batches_raise_latency(tmp_path):
    r = ab_test(BASE, [], ["scheduler.max_num_seqs=4"], [0, 1, 2], tmp_path, progress=False)
    m = {x["metric"]: x for x in r["metrics"]}
    assert m["ttft_s.p99"]["verdict"].startswith("B higher p99 TTFT by")
    assert m["ttft_s.p99"]["lo"] > 0
    assert json.loads((tmp_path / "ab.json").read_text())["paired_seeds"] == [0, 1, 2]
    assert "95% CI" in (tmp_path / "ab.md").read_text()


def _trace(tmp_path, n=60):
    """A small Azure-format trace: one request every 0.1 s."""
    path = tmp_path / "trace.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,{50 + 7 * i % 300},{5 + 3 * i % 40}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_a_replayed_trace_is_run_once_and_not_tested(tmp_path):
    base = {**BASE, "workload": {"trace": {"path": _trace(tmp_path)}}}
    r = ab_test(base, [], ["scheduler.max_num_seqs=4"], [0, 1, 2], tmp_path / "ab", progress=False)
    assert r["seeds"] == [0] and r["runs"]["run"] == 2  # the other seeds would repeat the run
    t = r["test"]
    assert not t["can_test"] and t["independent_runs"] == 0
    assert t["why_not"].startswith("cannot test: the azure trace trace.csv replays the same requests")
    assert all(m["verdict"] == "cannot test" and m["lo"] is None for m in r["metrics"])
    assert "--resample arrivals" in (tmp_path / "ab" / "ab.md").read_text()


def test_one_run_cannot_be_tested(tmp_path):
    r = ab_test(BASE, [], ["scheduler.max_num_seqs=4"], [0], tmp_path, progress=False)
    assert r["test"]["why_not"] == "cannot test with one run (give --seeds 2 or more)"
    assert all(m["verdict"] == "cannot test" for m in r["metrics"])
    assert "Cannot test with one run" in (tmp_path / "ab.md").read_text()


def test_re_drawn_arrivals_make_independent_runs(tmp_path):
    base = {**BASE, "workload": {"trace": {"path": _trace(tmp_path), "arrivals": "poisson"}}}
    r = ab_test(base, [], ["scheduler.max_num_seqs=4"], [0, 1, 2], tmp_path / "ab", progress=False)
    t = r["test"]
    assert t["can_test"] and t["independent_runs"] == 3 and "re-draws the trace's arrival times" in t["resampling"]
    p99 = {m["metric"]: m for m in r["metrics"]}["ttft_s.p99"]
    assert p99["lo"] < p99["hi"] and p99["relative"]["mean_diff"] == pytest.approx(p99["mean_diff"] / p99["mean_a"])


def test_seeds_that_change_nothing_are_caught_after_the_runs(tmp_path):
    r = ab_test(BASE, [], ["scheduler.max_num_seqs=4"], [0, 1], tmp_path, progress=False)
    assert r["test"]["can_test"]  # a synthetic workload: each seed draws its own requests
    from sim.sweep.ab import cannot_test

    same = {"ttft_s": {"p50": 1.0}, "sim": {"wall_s": 1.0}}
    other = {"ttft_s": {"p50": 2.0}, "sim": {"wall_s": 2.0}}
    assert cannot_test(None, [same, other, same, other], 2).startswith("cannot test: the 2 seeds gave identical runs")
    assert cannot_test(None, [same, other, other, other], 2) is None


def test_the_ab_command_takes_a_trace(tmp_path, capsys):
    from sim.cli import main

    trace = _trace(tmp_path, 40)
    rc = main(["ab", "--trace", trace, "--b", "scheduler.max_num_seqs=4", "--seeds", "3", "--workers", "1", "--quiet",
               "--out", str(tmp_path / "ab")])
    out = capsys.readouterr().out
    assert rc == 0 and "**Cannot test: the azure trace trace.csv replays" in out
    rc = main(["ab", "--trace", trace, "--resample", "arrivals", "--b", "scheduler.max_num_seqs=4", "--seeds", "2",
               "--workers", "1", "--quiet", "--out", str(tmp_path / "ab2")])
    out = capsys.readouterr().out
    assert rc == 0 and "2 independent runs" in out and "re-draws the trace's arrival times" in out
    assert main(["ab", "--resample", "arrivals", "--b", "seed=1", "--out", str(tmp_path / "ab3")]) == 2
    assert "--resample: re-draws a trace's arrivals; give --trace" in capsys.readouterr().err
