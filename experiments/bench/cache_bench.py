"""What the prefix-cache benchmarks (``bench_prefix.py``, ``bench_kv_tiers.py``) share: one timed
``simulate()`` in a fresh Python process (nothing cached from an earlier run; the child's start-up
not timed), and the two small workloads their fingerprint runs use.

    python experiments/bench/cache_bench.py '{"workload": {...}}'   # prints the timing as JSON
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SYSTEM_PROMPTS = {"rate": 4.0, "num_requests": 300, "system_prompts": {"count": 4, "tokens": 700, "popularity": "zipf"},
                  "prompt": {"kind": "uniform", "min": 20, "max": 600}, "output": {"kind": "uniform", "min": 1, "max": 200}}
"""Four shared system prompts of 700 tokens, Zipf popularity."""
SESSIONS = {"rate": 1.0, "num_requests": 300, "sessions": {"think_time_s": 2.0}, "system_prompts": {"count": 2, "tokens": 100},
            "prompt": {"kind": "uniform", "min": 10, "max": 300}, "output": {"kind": "uniform", "min": 1, "max": 150}}
"""Multi-turn sessions (each turn's prompt holds the conversation so far) over two system prompts."""


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
