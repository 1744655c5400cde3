"""Shared test helpers. Tests run on the CPU; the public traces in ../shared/traces are optional."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"


def trace_path(name: str) -> Path:
    """A public trace from ../shared/traces, or skip the test with the reason."""
    p = TRACES / name
    if not p.exists():
        pytest.skip(f"public trace {name} not found in ../shared/traces (download it to run this test)")
    return p


def tiny_config(**sections) -> dict:
    """A small, fast config dict: Llama-3.1-8B on one H100 priced by the roofline, few requests, no
    plots or progress."""
    cfg = {
        "model": "llama-3.1-8b",
        "hardware": "h100-sxm",
        "workload": {"rate": 5.0, "num_requests": 40,
                     "prompt": {"kind": "uniform", "min": 16, "max": 400},
                     "output": {"kind": "uniform", "min": 1, "max": 60}},
        "output": {"plots": False, "progress": False},
        # the roofline: exact outcomes must not depend on whether the kernels-db extra is installed
        "cost": {"model": "roofline"},
    }
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


def uniform_workload(rate: float, n: int, pmax: int, omax: int) -> dict:
    """A workload section: ``n`` requests at ``rate``/s, prompts 1..pmax and outputs 1..omax tokens."""
    return {"rate": rate, "num_requests": n, "prompt": {"kind": "uniform", "min": 1, "max": pmax},
            "output": {"kind": "uniform", "min": 1, "max": omax}}


def assert_run_invariants(eng, out) -> None:
    """What every run must satisfy: each arrived request finished with exactly its output tokens
    in order, or was rejected with a reason; every KV block back in its pool; nothing left queued."""
    for r in out.requests:
        assert r.status.value in ("finished", "rejected")
        if r.status.value == "rejected":
            assert r.reject_reason
        else:
            assert r.num_generated == r.spec.output_tokens
            assert r.spec.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s
    for rep in eng.replicas:
        assert rep.kv.num_used == 0 and not rep.kv.tables and not rep.scheduler.has_work()
