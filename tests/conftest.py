"""Shared test helpers. Tests run on the CPU; the public traces in ../shared/traces are optional."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI draws the same examples on every run (a landing is reproducible; a failure found elsewhere is
# kept as an ``@example``); a plain ``python -m pytest`` draws new ones each time, to find bugs.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

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
    from sim.metrics.records import requests_frame

    req = requests_frame(out)
    assert set(req["status"]) <= {"finished", "rejected"}
    rej = req[req["status"] == "rejected"]
    assert all(rej["reject_reason"])
    fin = req[req["status"] == "finished"]
    assert (fin["generated_tokens"] == fin["output_tokens"]).all()
    assert (fin["arrival_s"] <= fin["first_scheduled_s"]).all()
    assert (fin["first_scheduled_s"] <= fin["first_token_s"]).all() and (fin["first_token_s"] <= fin["finish_s"]).all()
    assert not eng.by_id  # every request left
    for rep in eng.replicas:
        assert rep.kv.num_used == 0 and not rep.kv.held and not rep.scheduler.has_work()


class Simulated(BaseException):
    """Raised by the tripwire: the input reached the simulator."""


@pytest.fixture
def tripwire(monkeypatch):
    """Bad inputs must fail before any simulation: running the engine raises ``Simulated``."""
    import sim.shards

    def boom(*a, **k):
        raise Simulated("a bad input reached the simulator")

    monkeypatch.setattr(sim.shards, "run_engine", boom)


def one_error(capsys, argv, code=2) -> str:
    """Run the CLI in-process; it must exit ``code`` with exactly one line on stderr."""
    from sim.cli import main

    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code, (argv, rc, err)
    assert len(lines) == 1 and "Traceback" not in err, (argv, err)
    return lines[0]
