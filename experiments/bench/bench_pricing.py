"""The cost model's share of the million-request workload, alone: CPU time to price the steps of
``--requests`` requests again. Prints its figures; asserts nothing.

    python experiments/bench/bench_pricing.py                          # 20,000 requests, kernel database
    python experiments/bench/bench_pricing.py --requests 100000 --reps 3
    python experiments/bench/bench_pricing.py --cost-model roofline

The workload is ``bench_scale.py``'s (8 replicas of Llama-3.1-8B on H100-SXM, round robin, 40
requests/s, per-step rows off). One run records every call the engine makes to the cost model
(the calls from outside it: steps, decode runs, their counts); a fresh model then answers the
same calls again, ``--reps`` times, and the least CPU time (``time.process_time``) of those is
printed with a hash of the answers and of the out-of-range count, so two commits can be
compared on the same calls: the same hash means the same prices, bit for bit. CPU time, not
wall time: on a shared machine the least of a few runs moves by a few percent, wall time by
much more.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's sim

from sim import simulate  # noqa: E402
from sim.catalog import get_hardware, get_model  # noqa: E402
from sim.config import load_config  # noqa: E402
from sim.cost import make_cost_model  # noqa: E402

CALLS = ("step_time", "beside_decodes", "decode_step", "decode_total", "decode_totals", "decode_series",
         "count_decode_run")
"""The cost model's methods the engine calls (those a model defines are recorded)."""


def workload(n: int, cost_model: str) -> dict:
    return {"cluster": {"replicas": 8}, "workload": {"rate": 40.0, "num_requests": n}, "cost": {"model": cost_model},
            "output": {"step_records": False, "plots": False, "progress": False}}


def record(n: int, cost_model: str) -> list:
    """The calls a run of ``n`` requests makes to its cost model, in order (outermost only: a
    method that calls another of them counts once)."""
    cfg = load_config(workload(n, cost_model))
    cls = type(make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware)))
    calls, depth, saved = [], [0], {}
    for name in CALLS:
        f = getattr(cls, name, None)
        if f is None:
            continue
        saved[name] = cls.__dict__.get(name)

        def wrapped(self, *args, _f=f, _name=name):
            if not depth[0]:
                calls.append((_name, args))
            depth[0] += 1
            try:
                return _f(self, *args)
            finally:
                depth[0] -= 1
        setattr(cls, name, wrapped)
    try:
        simulate(cfg)
    finally:
        for name, f in saved.items():
            if f is None:
                delattr(cls, name)
            else:
                setattr(cls, name, f)
    return calls


def replay(calls: list, n: int, cost_model: str, reps: int) -> tuple[float, str]:
    """(least CPU seconds over ``reps`` fresh models answering ``calls``, hash of the answers)."""
    cfg = load_config(workload(n, cost_model))
    best, digest = float("inf"), ""
    for _ in range(reps):
        cm = make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))
        c = time.process_time()
        out = [getattr(cm, name)(*args) for name, args in calls]
        best = min(best, time.process_time() - c)
        extra = (getattr(cm, "_oor", 0), cm.extrapolated() if hasattr(cm, "extrapolated") else None)
        digest = hashlib.sha256(repr((out, extra)).encode()).hexdigest()[:16]
    return best, digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cost-model", default="kerneldb", choices=["kerneldb", "roofline"])
    a = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = record(a.requests, a.cost_model)
        cpu, digest = replay(calls, a.requests, a.cost_model, a.reps)
    print(f"{a.requests:,} requests ({a.cost_model}): {len(calls):,} calls to the cost model answered again in "
          f"{cpu:.2f} s CPU (least of {a.reps}); answers {digest}")


if __name__ == "__main__":
    main()
