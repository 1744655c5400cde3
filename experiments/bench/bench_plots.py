"""What the figures of a run cost (issue target: under 10% of a 100,000-request run). Prints its
figures; asserts nothing.

    python experiments/bench/bench_plots.py            # 100,000 requests of the default config
    python experiments/bench/bench_plots.py 20000

The run is simulated once without figures; then its results folder is written with and without
figures, and the difference is the figures' cost, as a share of the run's simulation and writing.
"""
import pathlib
import sys
import tempfile
import time

from sim import simulate
from sim.api import write_results

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
res = simulate({"workload": {"rate": 12, "num_requests": n}, "output": {"plots": False, "progress": False}})
wall = res.summary["sim"]["wall_s"]
with tempfile.TemporaryDirectory() as d:
    t = time.perf_counter()
    write_results(res, pathlib.Path(d), plots=True)
    w1 = time.perf_counter() - t
    t = time.perf_counter()
    write_results(res, pathlib.Path(d), plots=False)
    w0 = time.perf_counter() - t
print(f"{n:,} requests ({res.summary['sim']['cost_model']}): simulate {wall:.2f} s, results with figures {w1:.2f} s, "
      f"without {w0:.2f} s: figures {w1 - w0:.2f} s = {100 * (w1 - w0) / (wall + w1):.1f}% of the run")
