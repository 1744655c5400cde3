"""Cache-aware routing (``prefix_aware``, ``prefix_approx``) against ``session_affinity``,
``least_loaded`` and ``power_of_two`` on the Mooncake conversation trace.

    python experiments/prefix_routing.py --out results/prefix_routing [--num-requests N]

For each replica count it rescales the trace to ``rate_per_replica`` times the replicas and runs
every router of the YAML (prefix caching on); writes ``results.csv`` / ``results.json`` and one
figure of prefix-cache hit rate, TTFT p50 and p99 and load imbalance (the busiest replica's busy
time over the mean replica's) against the replica count (``figures/prefix_routing.png`` and
``.svg``).
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from policy_common import main, set_rate
from sim import simulate


def run_all(cfg: dict, exp: dict) -> pd.DataFrame:
    rows = []
    for n in exp["replicas"]:
        base = set_rate(cfg, exp["rate_per_replica"] * n)
        for label, cluster in exp["routers"].items():
            t = time.perf_counter()
            res = simulate({**base, "cluster": {**cluster, "replicas": n}}, progress=False)
            s = res.summary
            busy = res.steps.groupby("replica")["duration_s"].sum().reindex(range(n), fill_value=0.0)
            rows.append({"replicas": n, "router": label, "hit_rate": s["prefix_cache"]["hit_rate"],
                         "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
                         "imbalance": float(busy.max() / busy.mean()), "completed": s["requests"]["completed"],
                         "preemptions": s["requests"]["preemptions"]})
            r = rows[-1]
            print(f"{n} replicas {label:>30}: hit rate {r['hit_rate']:.3f}, TTFT p50 {r['ttft_p50_s']:.2f} s, "
                  f"p99 {r['ttft_p99_s']:.2f} s, imbalance {r['imbalance']:.3f} ({time.perf_counter() - t:.1f} s)",
                  flush=True)
    return pd.DataFrame(rows)


PANELS = [("hit_rate", "prefix-cache hit rate"), ("ttft_p50_s", "TTFT p50 (s)"), ("ttft_p99_s", "TTFT p99 (s)"),
          ("imbalance", "load imbalance (max / mean busy time)")]


def plot(df: pd.DataFrame, out: Path, cfg: dict) -> None:
    from sim.metrics.plots import _plt, save

    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    routers = list(dict.fromkeys(df["router"]))
    counts = sorted(df["replicas"].unique())
    width = 0.8 / len(routers)
    for ax, (col, label) in zip(axes.flat, PANELS):
        for j, name in enumerate(routers):
            g = df[df["router"] == name].set_index("replicas").reindex(counts)
            ax.bar([i + (j - (len(routers) - 1) / 2) * width for i in range(len(counts))], g[col], width,
                   label=name, hatch="//" if "approx" in name else None)
        ax.set_xticks(range(len(counts)), [f"{c} replicas" for c in counts])
        ax.set(ylabel=label)
        if col == "imbalance":
            ax.set_ylim(bottom=1.0)
    axes.flat[0].legend(fontsize=7.5)
    fig.suptitle(f"cache-aware routing, {cfg['model']} on {cfg['hardware']}, Mooncake conversation trace "
                 f"({cfg['workload'].get('trace', {}).get('num_requests', '')} requests)")
    fig.tight_layout()
    save(fig, out / "figures", "prefix_routing")
    plt.close(fig)


if __name__ == "__main__":
    main(__doc__, "prefix_routing.yaml", run_all, plot)
