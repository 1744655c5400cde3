"""``run_sweep``: every point of a spec through the driver, then one results table."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from sim.sweep.runner import Driver, one_run
from sim.sweep.spec import SweepSpec
from sim.sweep.store import RunStore, flatten_summary


def check_points(points) -> None:
    """Every point's config is valid (keys, values, parallelism, dtype), before any run starts;
    the error names the first bad point by its varied values and says how many are bad."""
    from sim.config import load_config
    from sim.errors import ConfigError

    bad = []
    for i, p in enumerate(points):
        try:
            load_config(p.config)
        except ConfigError as e:
            bad.append((i, p, e))
    if bad:
        i, p, e = bad[0]
        at = ", ".join(f"{k}={v}" for k, v in p.values.items()) or "the base"
        more = f" ({len(bad)} of {len(points)} points are invalid)" if len(bad) > 1 else ""
        raise ConfigError(f"sweep point {i} ({at}, seed {p.seed}): {e}{more}")


def run_sweep(spec: SweepSpec, out: str | Path, *, workers: int = 1, backend: str = "local",
              address: str | None = None, progress: bool | None = None) -> tuple[pd.DataFrame, dict]:
    """Run (or resume) a sweep into ``out``. Returns the results table and the run counts.

    The table (``out/results.parquet``) has one row per point: the varied keys, ``seed``,
    ``key`` (the run's store key), ``status`` (ok / error), ``error`` (its first line) and the
    flattened summary metrics. ``out/sweep.json`` records the spec and the counts.
    """
    points = spec.points()
    check_points(points)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(out)
    driver = Driver(store, backend, workers, address, progress, desc="sweep", total=len(points))
    t0 = time.perf_counter()
    results = driver.run({i: one_run(p.config) for i, p in enumerate(points)})
    rows = []
    for i, p in enumerate(points):
        r = results[i]
        err = (r.get("error") or "").strip().splitlines()
        rows.append({**p.values, "seed": p.seed, "key": r["key"], "status": r["status"],
                     "error": err[0] if err else None, **flatten_summary(r.get("summary"))})
    table = pd.DataFrame(rows)
    table.to_parquet(out / "results.parquet", index=False)
    counts = {"points": len(points), "reused": driver.counts.reused, "run": driver.counts.run,
              "failed": driver.counts.failed, "wall_s": time.perf_counter() - t0}
    meta = {"kind": "sweep", "varied": spec.varied, "seeds": spec.seeds, "base": spec.base,
            "grid": spec.grid, "zip": spec.zips, "counts": counts, "backend": backend}
    (out / "sweep.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return table, counts
