"""Defaults and messages of the first-hour review (issue 24, items 6-11)."""
from __future__ import annotations

import pytest

from sim import simulate
from sim.cli import main

TINY = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "output": {"plots": False, "progress": False}}


def test_orca_reserves_the_workload_output_bound(capsys, tmp_path):
    """Orca reserves prompt + the workload's output bound (2,048 for the default conversation
    lognormal), not the whole 131,072-token context: at 8 req/s its p99 TTFT is milliseconds."""
    wl = {"rate": 8.0, "num_requests": 300}
    bound = simulate({**TINY, "scheduler": {"name": "orca"}, "workload": wl})
    context = simulate({**TINY, "scheduler": {"name": "orca", "reserve": "context"}, "workload": wl})
    assert bound.summary["ttft_s"]["p99"] < 1.0 < context.summary["ttft_s"]["p99"]
    assert main(["run", "--scheduler", "orca", "--num-requests", "20", "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "reservation (orca): each request reserves its prompt + its output limit: at most 2,048 (workload.output's bound)" in out


def test_orca_reservation_is_prompt_plus_bound():
    """Exact: with outputs uniform in [1, 9] every request's limit is min(9, context - prompt)."""
    from sim.workload import LengthDist, WorkloadConfig, build_workload
    import numpy as np

    wl = WorkloadConfig(rate=5.0, num_requests=50, prompt=LengthDist(kind="fixed", value=100),
                        output=LengthDist(kind="uniform", min=1, max=9))
    reqs = list(build_workload(wl, max_context=131072, rng=np.random.default_rng(0)))
    assert {r.max_output_tokens for r in reqs} == {9}
    assert {r.max_output_tokens for r in build_workload(wl, max_context=104, rng=np.random.default_rng(0))} == {4}
