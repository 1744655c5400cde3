"""A wide-EP run against the same run with TP only (issue 20's speed target: within 2x). Prints
its figures; asserts nothing.

    python experiments/bench/bench_wide_ep.py             # 10,000 requests, 3 interleaved pairs
    python experiments/bench/bench_wide_ep.py --requests 2000 --pairs 1 --profile

DeepSeek-V3 fp8 on H200, kernel database (vLLM tables), 10,000 requests at 8 requests/s with the
default synthetic lengths, step rows and figures off: TP 8 (one replica of 8 GPUs) against one
expert group of 8 attention-DP ranks (``tp`` 1, ``dp`` = ``ep`` = 8, the same 8 GPUs). CPU time
of ``simulate`` (the process's, so a shared machine's other jobs count less than in wall time),
the two layouts interleaved so a drifting machine affects both alike; each layout's least CPU
time and their ratio. ``--profile``: a cProfile of one run of each, top functions by own time.
"""
from __future__ import annotations

import argparse
import time

LAYOUTS = {"tp8": {"tp": 8}, "dp8-ep8": {"tp": 1, "dp": 8, "ep": 8}}


def config(layout: str, requests: int) -> dict:
    return {"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8", "parallelism": LAYOUTS[layout],
            "workload": {"rate": 8.0, "num_requests": requests},
            "cost": {"model": "kerneldb", "framework": "vllm"},
            "output": {"plots": False, "progress": False, "step_records": False}, "seed": 0}


def run(layout: str, requests: int) -> tuple[float, dict]:
    from sim import simulate

    t = time.process_time()
    res = simulate(config(layout, requests), plots=False, progress=False)
    return time.process_time() - t, res.summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    for layout in LAYOUTS:  # warm: the database's tables are read once per process
        run(layout, 50)
    if a.profile:
        import cProfile
        import pstats

        for layout in LAYOUTS:
            pr = cProfile.Profile()
            pr.enable()
            run(layout, a.requests)
            pr.disable()
            print(f"\n{layout}: top functions by own time")
            pstats.Stats(pr).sort_stats("tottime").print_stats(18)
        return
    best = {k: float("inf") for k in LAYOUTS}
    for i in range(a.pairs):
        for layout in LAYOUTS:
            cpu, s = run(layout, a.requests)
            best[layout] = min(best[layout], cpu)
            print(f"pair {i + 1} {layout:<8} {cpu:6.2f} s CPU, {s['sim']['steps']:,} steps, "
                  f"TPOT p50 {1e3 * s['tpot_s']['p50']:.1f} ms, {s['requests']['completed']:,} completed")
    print(f"least CPU time: tp8 {best['tp8']:.2f} s, dp8-ep8 {best['dp8-ep8']:.2f} s: "
          f"{best['dp8-ep8'] / best['tp8']:.2f}x (under load: the machine is shared)")


if __name__ == "__main__":
    main()
