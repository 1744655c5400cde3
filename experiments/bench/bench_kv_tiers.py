"""Cost of the tiered KV cache: wall and CPU time of the Mooncake conversation trace with prefix
caching off, GPU-only prefix caching, and a host tier under it, side by side.

    python experiments/bench/bench_kv_tiers.py                    # 2,000 requests, 3 rounds
    python experiments/bench/bench_kv_tiers.py --num-requests 5000 --rounds 5 --host-gib 256
    python experiments/bench/bench_kv_tiers.py --rate 0 --cost-model roofline   # the trace's times; the cache's share

The trace (``../shared/traces``) runs through the default deployment (Llama-3.1-8B on one
H100-SXM) at ``--rate`` requests per second in three configurations, each run in a fresh
process, interleaved round by round (off, GPU, tiered, off, GPU, tiered, ...) so that all see
the same load on a shared machine. Each round prints the three wall and CPU times, their engine
steps, and the ratios to the run without caching; the end prints the median ratios. The target
is a tiered run within 1.5x of the run without caching. Times are ``simulate()``'s in the child
process, its start-up excluded (the same for all). Prints its figures; asserts nothing.

    python experiments/bench/bench_kv_tiers.py --fingerprint     # digests of tiered-cache runs

``--fingerprint`` runs a fixed set of small tiered configs (every GPU eviction policy, host tiers
that drop, a disk tier, swap preemption in the host pool, the Mooncake trace's head, synthetic
system prompts and sessions) and prints one digest per config of its request and step rows and
its tier counts: a change meant to be a pure speed-up must print the same digests before and after.
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from pathlib import Path

from cache_bench import SESSIONS, SYSTEM_PROMPTS, fresh  # (this folder: the script's own, first on sys.path)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the checkout this script is in, whatever is installed
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
OUT = {"plots": False, "progress": False}


def configs(host_gib: float) -> dict[str, dict]:
    return {"off": {"prefix_caching": False}, "gpu": {"prefix_caching": True},
            "tiered": {"prefix_caching": True, "cpu_offload_gib": host_gib}}


def fingerprint_configs() -> dict[str, dict]:
    """Name -> config of the fingerprint runs (small: the whole set takes well under a minute)."""
    sysp, ses = SYSTEM_PROMPTS, SESSIONS
    out: dict[str, dict] = {}
    for ev in ("lru", "lfu", "fifo"):
        out[f"sysp-host-{ev}"] = {"workload": sysp, "kv": {"num_gpu_blocks": 400, "num_cpu_blocks": 300, "eviction": ev}}
        out[f"sessions-host-{ev}"] = {"workload": ses, "kv": {"num_gpu_blocks": 500, "num_cpu_blocks": 400,
                                                              "eviction": ev, "preemption": "swap"}}
        if MOONCAKE.exists():
            out[f"mooncake-host-{ev}"] = {"workload": {"trace": {"path": str(MOONCAKE), "num_requests": 300,
                                                                 "rate": 2.0}},
                                          "kv": {"num_gpu_blocks": 3000, "num_cpu_blocks": 6000, "eviction": ev}}
            out[f"mooncake-disk-{ev}"] = {"workload": {"trace": {"path": str(MOONCAKE), "num_requests": 300,
                                                                 "rate": 2.0}},
                                          "kv": {"num_gpu_blocks": 3000, "num_cpu_blocks": 2000, "eviction": ev,
                                                 "disk_offload_gib": 1.0, "disk_read_gbps": 5.0}}
    if MOONCAKE.exists():
        out["mooncake-swap-lru"] = {"workload": {"trace": {"path": str(MOONCAKE), "num_requests": 200, "rate": 2.0}},
                                    "kv": {"num_gpu_blocks": 2500, "num_cpu_blocks": 4000, "preemption": "swap"}}
        out["mooncake-bighost-lru"] = {"workload": {"trace": {"path": str(MOONCAKE), "num_requests": 300, "rate": 0.5}},
                                       "kv": {"cpu_offload_gib": 1024.0}}
    for cfg in out.values():
        cfg["kv"]["prefix_caching"] = True
        cfg["output"] = OUT
    return out


def fingerprint(only: str | None) -> None:
    from sim import simulate

    for name, cfg in fingerprint_configs().items():
        if only and only not in name:
            continue
        res = simulate(cfg, progress=False)
        h = hashlib.sha256()
        for frame in (res.requests, res.steps):
            h.update(frame.to_csv(index=False, float_format="%.17g").encode())
        pc = res.summary["prefix_cache"]
        h.update(repr(pc["tiers"]).encode())
        print(f"{name:24s} {h.hexdigest()[:16]}  hit rate {pc['hit_rate']:.4f}  steps {res.summary['sim']['steps']}  "
              f"offloaded {pc['tiers']['host']['offloaded_blocks']}  dropped {pc['tiers']['dropped_blocks']}", flush=True)


def bench(n: int, rounds: int, rate: float | None, host_gib: float, trace: Path, cost_model: str | None = None) -> None:
    if not trace.exists():
        print(f"skipped: {trace.name} not found under ../shared/traces")
        return
    wl = {"trace": {"path": str(trace), "num_requests": n}}
    if rate:
        wl["trace"]["rate"] = rate
    ratios: dict[str, list] = {"gpu": [], "tiered": []}
    cpu_ratios: dict[str, list] = {"gpu": [], "tiered": []}
    for i in range(rounds):
        wall, cpu, line = {}, {}, []
        for name, kv in configs(host_gib).items():
            cfg = {"workload": wl, "kv": kv, "output": OUT}
            if cost_model:
                cfg["cost"] = {"model": cost_model}
            r = fresh(cfg)
            wall[name], cpu[name] = r["wall"], r["cpu"]
            line.append(f"{name} {wall[name]:.2f} s wall, {cpu[name]:.2f} s CPU ({r['steps']:,} steps, "
                        f"hit {r['hit']:.3f})")
        for name in ratios:
            ratios[name].append(wall[name] / wall["off"])
            cpu_ratios[name].append(cpu[name] / cpu["off"])
        print(f"round {i + 1}: " + "; ".join(line) + f": ratios to off {ratios['gpu'][-1]:.2f} (GPU), "
              f"{ratios['tiered'][-1]:.2f} (tiered) wall, {cpu_ratios['gpu'][-1]:.2f} / "
              f"{cpu_ratios['tiered'][-1]:.2f} CPU", flush=True)
    for name in ratios:
        r, c = ratios[name], cpu_ratios[name]
        print(f"Mooncake conversation, {n:,} requests at {f'{rate:g}/s' if rate else 'the trace rate'}, {name} caching"
              + (f" ({cost_model} cost model)" if cost_model else "")
              + (f" ({host_gib:g} GiB host tier per GPU)" if name == "tiered" else "")
              + f" / caching off, median of {rounds} interleaved rounds of fresh processes: {statistics.median(r):.2f} "
              f"wall (min {min(r):.2f}, max {max(r):.2f}), {statistics.median(c):.2f} CPU time "
              f"(min {min(c):.2f}, max {max(c):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.5, help="requests per second (the trace is rescaled to it; 0: the "
                    "trace's own times)")
    ap.add_argument("--cost-model", default=None, help="cost.model of the timed runs (default: the config's, auto)")
    ap.add_argument("--host-gib", type=float, default=1024.0, help="host tier, GiB per GPU")
    ap.add_argument("--trace", type=Path, default=MOONCAKE, help="the Mooncake conversation trace")
    ap.add_argument("--fingerprint", action="store_true", help="print digests of tiered-cache runs instead")
    ap.add_argument("--only", default=None, help="with --fingerprint: only configs whose name contains this")
    a = ap.parse_args()
    if a.fingerprint:
        fingerprint(a.only)
        return
    bench(a.num_requests, a.rounds, a.rate, a.host_gib, a.trace, a.cost_model)


if __name__ == "__main__":
    main()
