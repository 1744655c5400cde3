"""One timed ``simulate()`` in a fresh Python process, for the benchmark scripts that compare runs
side by side (``bench_prefix.py``, ``bench_kv_tiers.py``): nothing cached from an earlier run, and
the child's start-up is not timed.

    python experiments/bench/fresh_run.py '{"workload": {...}}'   # prints the timing as JSON
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def timed(cfg: dict) -> dict:
    """Wall and CPU seconds of ``simulate(cfg)``, its engine steps and prefix hit rate, in this process."""
    from sim import simulate

    t, c = time.perf_counter(), time.process_time()
    s = simulate(cfg, progress=False).summary
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "steps": s["sim"]["steps"],
            "hit": (s.get("prefix_cache") or {}).get("hit_rate") or 0.0}


def fresh(cfg: dict) -> dict:
    """``timed(cfg)`` in a fresh Python process running this checkout's ``sim``."""
    out = subprocess.run([sys.executable, __file__, json.dumps(cfg)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # the checkout this script is in, whatever is installed
    print(json.dumps(timed(json.loads(sys.argv[1]))))
