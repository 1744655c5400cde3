"""Cost of the tiered KV cache: wall and CPU time of the Mooncake conversation trace with prefix
caching off, GPU-only prefix caching, and a host tier under it, side by side.

    python experiments/bench/bench_kv_tiers.py                    # 2,000 requests, 3 rounds
    python experiments/bench/bench_kv_tiers.py --num-requests 5000 --rounds 5 --host-gib 256

The trace (``../shared/traces``) runs through the default deployment (Llama-3.1-8B on one
H100-SXM) at ``--rate`` requests per second in three configurations, interleaved round by round
(off, GPU, tiered, off, GPU, tiered, ...) so that all see the same load on a shared machine.
Each round prints the three wall and CPU times, their engine steps, and the ratios to the run
without caching; the end prints the median ratios. The target is a tiered run within 1.5x of
the run without caching. Times are ``simulate()``'s, process start-up excluded (the same for
all, after an untimed warm-up run of each). Prints its figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import time
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the checkout this script is in, whatever is installed
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
OUT = {"plots": False, "progress": False}


def configs(host_gib: float) -> dict[str, dict]:
    return {"off": {"prefix_caching": False}, "gpu": {"prefix_caching": True},
            "tiered": {"prefix_caching": True, "cpu_offload_gib": host_gib}}


def bench(n: int, rounds: int, rate: float, host_gib: float, trace: Path) -> None:
    from sim import simulate

    if not trace.exists():
        print(f"skipped: {trace.name} not found under ../shared/traces")
        return
    wl = {"trace": {"path": str(trace), "num_requests": n, "rate": rate}}
    for kv in configs(host_gib).values():  # warm-up, untimed: imports and the cost model's tables load once
        simulate({"workload": {"trace": {**wl["trace"], "num_requests": 20}}, "kv": kv, "output": OUT}, progress=False)
    ratios: dict[str, list] = {"gpu": [], "tiered": []}
    cpu_ratios: dict[str, list] = {"gpu": [], "tiered": []}
    for i in range(rounds):
        wall, cpu, line = {}, {}, []
        for name, kv in configs(host_gib).items():
            t, c = time.perf_counter(), time.process_time()
            s = simulate({"workload": wl, "kv": kv, "output": OUT}, progress=False).summary
            wall[name], cpu[name] = time.perf_counter() - t, time.process_time() - c
            hit = s["prefix_cache"]["hit_rate"] or 0.0
            line.append(f"{name} {wall[name]:.2f} s wall, {cpu[name]:.2f} s CPU ({s['sim']['steps']:,} steps, "
                        f"hit {hit:.3f})")
        for name in ratios:
            ratios[name].append(wall[name] / wall["off"])
            cpu_ratios[name].append(cpu[name] / cpu["off"])
        print(f"round {i + 1}: " + "; ".join(line) + f": ratios to off {ratios['gpu'][-1]:.2f} (GPU), "
              f"{ratios['tiered'][-1]:.2f} (tiered) wall, {cpu_ratios['gpu'][-1]:.2f} / "
              f"{cpu_ratios['tiered'][-1]:.2f} CPU", flush=True)
    for name in ratios:
        r, c = ratios[name], cpu_ratios[name]
        print(f"Mooncake conversation, {n:,} requests at {rate:g}/s, {name} caching"
              + (f" ({host_gib:g} GiB host tier per GPU)" if name == "tiered" else "")
              + f" / caching off, median of {rounds} interleaved rounds: {statistics.median(r):.2f} wall "
              f"(min {min(r):.2f}, max {max(r):.2f}), {statistics.median(c):.2f} CPU time of the process "
              f"(min {min(c):.2f}, max {max(c):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.5, help="requests per second (the trace is rescaled to it)")
    ap.add_argument("--host-gib", type=float, default=1024.0, help="host tier, GiB per GPU")
    ap.add_argument("--trace", type=Path, default=MOONCAKE, help="the Mooncake conversation trace")
    a = ap.parse_args()
    bench(a.num_requests, a.rounds, a.rate, a.host_gib, a.trace)


if __name__ == "__main__":
    main()
