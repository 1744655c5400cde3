"""A million requests (docs/architecture.md section 8: under a minute and 2 GB on one core). Prints its
figures; asserts nothing.

    python experiments/bench/bench_scale.py                     # 1,000,000 requests
    python experiments/bench/bench_scale.py --requests 100000   # a quicker look
    python experiments/bench/bench_scale.py --ten-million       # 10,000,000, streamed to disk

The workload: Poisson arrivals at 40 requests/s on 8 replicas of Llama-3.1-8B on H100-SXM
(round robin), prompt and output lengths drawn like the Azure conversation trace (the default
lognormal fits), per-step rows off (``output.step_records: false``), priced by the roofline
(``--cost-model auto`` uses the kernel database where it covers the GPU: its lookups cost more
per step). Each case runs in a fresh
process so its peak resident memory is its own. Wall time includes building the result tables
and the summary, not Python's start-up.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time
from sim import simulate
n, rate, stream, out, cm, workers = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5], int(sys.argv[6])
t, c = time.perf_counter(), time.process_time()
res = simulate({"cluster": {"replicas": 8}, "workload": {"rate": rate, "num_requests": n}, "cost": {"model": cm},
                "engine": {"workers": workers},
                "output": {"step_records": False, "plots": False, "progress": False, "stream": stream}},
               out=out if stream else None)
wall, cpu = time.perf_counter() - t, time.process_time() - c
s = res.summary
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "worker_cpu_s": sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2]),
                  "steps": s["sim"]["steps"], "completed": s["requests"]["completed"], "ttft_p99": s["ttft_s"]["p99"]}))
"""


def run_case(n: int, rate: float, stream: bool, cost_model: str, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(n), str(rate), "1" if stream else "0", d, cost_model,
                               str(workers)],
                              cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second over the 8 replicas")
    ap.add_argument("--stream", action="store_true", help="output.stream: request rows written to disk in chunks")
    ap.add_argument("--ten-million", action="store_true", help="10,000,000 requests, streamed")
    ap.add_argument("--cost-model", default="roofline", choices=["roofline", "auto"])
    ap.add_argument("--workers", type=int, default=1, help="engine.workers (CPU time and peak RSS are then the "
                    "parent's; the workers' are printed apart)")
    a = ap.parse_args()
    n, stream = (10_000_000, True) if a.ten_million else (a.requests, a.stream)
    r = run_case(n, a.rate, stream, a.cost_model, a.workers)
    print(f"{n:,} requests on 8 replicas ({a.cost_model}{', streamed' if stream else ''}"
          f"{f', {a.workers} workers' if a.workers > 1 else ''}): {r['steps']:,} engine steps in "
          f"{r['wall_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU; {n / r['wall_s']:,.0f} requests/s), "
          f"peak RSS {r['peak_rss_mib']:,.0f} MiB"
          + (f" (the largest worker's {r['worker_rss_mib']:,.0f} MiB, the workers' CPU {r['worker_cpu_s']:.1f} s)"
             if a.workers > 1 else "")
          + f"; {r['completed']:,} completed, p99 TTFT {r['ttft_p99']:.3f} s")


if __name__ == "__main__":
    main()
