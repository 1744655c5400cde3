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
