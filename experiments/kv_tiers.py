"""How much host memory buys how much hit rate: the tiered KV cache (``kv.cpu_offload_gib``) on
the Mooncake conversation trace.

    python experiments/kv_tiers.py --out results/kv_tiers [--num-requests N]

For each host-tier size of the YAML (GiB per GPU; 0 = GPU-only prefix caching) it runs the trace
at the YAML's rate and records the prefix-cache hit rate served by the GPU and by host, the host
blocks loaded, and TTFT p50 / p99; writes ``results.csv`` / ``results.json`` and one figure
(``figures/kv_tiers.png`` and ``.svg``): hit rate by tier (stacked) and TTFT against host GiB.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from policy_common import main, set_rate
from sim import simulate


def run_all(cfg: dict, exp: dict) -> pd.DataFrame:
    rows = []
    base = set_rate(cfg, exp["rate"])
    for gib in exp["host_gib"]:
        kv = {**base.get("kv", {}), **({"cpu_offload_gib": gib} if gib else {})}
        t = time.perf_counter()
        s = simulate({**base, "kv": kv}, progress=False).summary
        pc = s["prefix_cache"]
        tiers = pc.get("tiers")
        host = tiers["host"] if tiers else {"hit_rate": 0.0, "loaded_blocks": 0}
        rows.append({"host_gib": gib, "hit_rate": pc["hit_rate"],
                     "gpu_hit_rate": tiers["gpu"]["hit_rate"] if tiers else pc["hit_rate"],
                     "host_hit_rate": host["hit_rate"], "host_loaded_blocks": host["loaded_blocks"],
                     "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
                     "completed": s["requests"]["completed"]})
        r = rows[-1]
        print(f"host {gib:>5} GiB: hit rate {r['hit_rate']:.3f} (GPU {r['gpu_hit_rate']:.3f}, host "
              f"{r['host_hit_rate']:.3f}), TTFT p50 {r['ttft_p50_s']:.2f} s, p99 {r['ttft_p99_s']:.2f} s "
              f"({time.perf_counter() - t:.1f} s)", flush=True)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, out: Path, cfg: dict) -> None:
    from sim.metrics.plots import _plt, save

    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = range(len(df))
    labels = [f"{g:g} GiB" if g else "GPU only" for g in df["host_gib"]]
    a.bar(x, df["gpu_hit_rate"], label="served by GPU")
    a.bar(x, df["host_hit_rate"], bottom=df["gpu_hit_rate"], label="served by host (loaded over PCIe)", hatch="//")
    a.set_xticks(list(x), labels)
    a.set(xlabel="host tier per GPU", ylabel="prefix-cache hit rate (prompt tokens)")
    a.legend(fontsize=8)
    b.plot(list(x), df["ttft_p50_s"], "o-", label="TTFT p50")
    b.plot(list(x), df["ttft_p99_s"], "s--", label="TTFT p99")
    b.set_xticks(list(x), labels)
    b.set(xlabel="host tier per GPU", ylabel="seconds", yscale="log")
    b.legend(fontsize=8)
    wl = cfg["workload"]
    what = (f"Mooncake conversation trace, first {wl['trace'].get('num_requests', '')} requests"
            if "trace" in wl else "synthetic fallback workload")
    fig.suptitle(f"tiered KV cache: {cfg['model']} on {cfg['hardware']}, {what}")
    fig.tight_layout()
    save(fig, out / "figures", "kv_tiers")
    plt.close(fig)


if __name__ == "__main__":
    main(__doc__, "kv_tiers.yaml", run_all, plot)
