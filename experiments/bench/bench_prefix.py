"""Cost of prefix caching: wall time with ``kv.prefix_caching`` on against off, side by side.

    python experiments/bench/bench_prefix.py                     # 2,000 Mooncake requests, 3 pairs
    python experiments/bench/bench_prefix.py --num-requests 5000 --pairs 5
    python experiments/bench/bench_prefix.py --cost-model roofline   # the cache's share, undiluted
    python experiments/bench/bench_prefix.py --fingerprint       # digests of prefix-caching runs

The benchmark runs the Mooncake conversation trace (``../shared/traces``) through the default
deployment (Llama-3.1-8B on one H100-SXM) with caching off and on, each run in a fresh process,
interleaved (off, on, off, on, ...) so that both see the same load on a shared machine, and
prints each pair's wall and CPU times and their ratios, then the median ratios. Times are
``simulate()``'s in the child process, its start-up excluded (the same for both); on a loaded
machine the CPU time is the steadier of the two.

``--fingerprint`` runs a fixed set of small prefix-caching configs (every eviction policy, tight
and loose pools, the Mooncake trace's head, synthetic system prompts and sessions, swap and
recompute preemption, several replicas) and prints one digest per config of its request rows
and step rows: a change meant to be a pure speed-up must print the same digests before and after.
Prints its figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from pathlib import Path

from cache_bench import SESSIONS, SYSTEM_PROMPTS, fresh  # (this folder: the script's own, first on sys.path)

REPO = Path(__file__).resolve().parents[2]
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
OUT = {"plots": False, "progress": False}


def mooncake(n: int, rate: float | None = None) -> dict:
    trace = {"path": str(MOONCAKE), "num_requests": n}
    if rate is not None:
        trace["rate"] = rate
    return {"trace": trace}


def fingerprint_configs() -> dict[str, dict]:
    """Name -> config of the fingerprint runs (small: the whole set takes well under a minute)."""
    sysp, ses = SYSTEM_PROMPTS, SESSIONS
    out: dict[str, dict] = {}
    for ev in ("lru", "lfu", "fifo"):
        out[f"sysp-tight-{ev}"] = {"workload": sysp, "kv": {"num_gpu_blocks": 400, "eviction": ev}}
        out[f"sysp-loose-{ev}"] = {"workload": sysp, "kv": {"num_gpu_blocks": 20000, "eviction": ev}}
        out[f"sessions-{ev}"] = {"workload": ses, "kv": {"num_gpu_blocks": 600, "eviction": ev}}
        out[f"sessions-swap-{ev}"] = {"workload": ses, "kv": {"num_gpu_blocks": 500, "eviction": ev, "preemption": "swap",
                                                              "swap_space_gib": 0.02}}
        if MOONCAKE.exists():
            out[f"mooncake-tight-{ev}"] = {"workload": mooncake(300, 2.0), "kv": {"num_gpu_blocks": 3000, "eviction": ev}}
            out[f"mooncake-loose-{ev}"] = {"workload": mooncake(300), "kv": {"eviction": ev}}
            out[f"mooncake-swap-{ev}"] = {"workload": mooncake(200, 2.0),
                                          "kv": {"num_gpu_blocks": 2500, "eviction": ev, "preemption": "swap"}}
    out["sysp-sarathi-2rep"] = {"workload": sysp, "kv": {"num_gpu_blocks": 300}, "scheduler": {"name": "sarathi"},
                                "cluster": {"replicas": 2, "router": "round_robin"}}
    out["sessions-affinity-3rep"] = {"workload": ses, "kv": {"num_gpu_blocks": 400},
                                     "cluster": {"replicas": 3, "router": "session_affinity"}}
    for cfg in out.values():
        cfg["kv"]["prefix_caching"] = True
        cfg["output"] = OUT
    return out


def digest(res) -> str:
    h = hashlib.sha256()
    for frame in (res.requests, res.steps):
        h.update(frame.to_csv(index=False, float_format="%.17g").encode())
    return h.hexdigest()[:16]


def fingerprint(only: str | None) -> None:
    from sim import simulate

    for name, cfg in fingerprint_configs().items():
        if only and only not in name:
            continue
        res = simulate(cfg, progress=False)
        pc = res.summary["prefix_cache"]
        print(f"{name:28s} {digest(res)}  hit rate {pc['hit_rate']:.4f}  steps {res.summary['sim']['steps']}",
              flush=True)


def bench(n: int, pairs: int, cost_model: str | None = None) -> None:
    if not MOONCAKE.exists():
        print(f"skipped: {MOONCAKE.name} not found under ../shared/traces")
        return
    ratios, cpu_ratios = [], []
    for i in range(pairs):
        wall, cpu, steps = {}, {}, {}
        for on in (False, True):
            cfg = {"workload": mooncake(n), "kv": {"prefix_caching": on}, "output": OUT}
            if cost_model:
                cfg["cost"] = {"model": cost_model}
            r = fresh(cfg)
            wall[on], cpu[on], steps[on] = r["wall"], r["cpu"], r["steps"]
        ratios.append(wall[True] / wall[False])
        cpu_ratios.append(cpu[True] / cpu[False])
        print(f"pair {i + 1}: uncached {wall[False]:6.2f} s wall, {cpu[False]:6.2f} s CPU ({steps[False]:,} steps); "
              f"cached {wall[True]:6.2f} s wall, {cpu[True]:6.2f} s CPU ({steps[True]:,} steps): "
              f"ratio {ratios[-1]:.2f} wall, {cpu_ratios[-1]:.2f} CPU", flush=True)
    print(f"Mooncake conversation, {n:,} requests{f' ({cost_model} cost model)' if cost_model else ''}: cached / "
          f"uncached, median of {pairs} interleaved pairs of fresh "
          f"processes: {statistics.median(ratios):.2f} wall (min {min(ratios):.2f}, max {max(ratios):.2f}), "
          f"{statistics.median(cpu_ratios):.2f} CPU time (min {min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cost-model", default=None, help="cost.model of the timed runs (default: the config's, auto); "
                    "roofline shows the cache's own share, which the kernel database's step pricing dilutes")
    ap.add_argument("--fingerprint", action="store_true", help="print digests of prefix-caching runs instead")
    ap.add_argument("--only", default=None, help="with --fingerprint: only configs whose name contains this")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    if a.fingerprint:
        fingerprint(a.only)
    else:
        bench(a.num_requests, a.pairs, a.cost_model)


if __name__ == "__main__":
    main()
