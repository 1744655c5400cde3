"""DeepSeek-V3 on H200: tensor parallelism only against attention data parallelism with expert
parallelism (DP+EP), at 8, 16 and 32 GPUs, swept over load: throughput per GPU against TPOT, with
the cost per million output tokens.

    python experiments/moe_parallelism.py --out results/moe_parallelism [--requests-per-gpu N]

- TP only: replicas of TP 8 (one node each), round robin (1, 2, 4 replicas).
- DP+EP: one expert group of 8, 16 or 32 GPUs: TP 1 attention on every GPU (``parallelism.dp``
  ranks, each its own scheduler and KV pool), the routed experts spread over all of them
  (``parallelism.ep``), steps synchronised over the group (``sim.cost.expert_parallel``). Groups
  of 16 and 32 span 2 and 4 nodes (wide EP).

Priced by the kernel database (vLLM tables). Each point is one simulation of Poisson arrivals
with conversation-like lengths, ``--requests-per-gpu`` requests per GPU (so that every fleet
size runs about as long, and start and drain weigh alike). Writes ``results.csv`` and
``figures/moe_parallelism.{png,svg}``.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pandas as pd

from sim import simulate

LAYOUTS = [
    ("TP only", 8, {"tp": 8}, {"replicas": 1}),
    ("TP only", 16, {"tp": 8}, {"replicas": 2}),
    ("TP only", 32, {"tp": 8}, {"replicas": 4}),
    ("DP+EP", 8, {"tp": 1, "dp": 8, "ep": 8}, {"replicas": 1}),
    ("DP+EP", 16, {"tp": 1, "dp": 16, "ep": 16}, {"replicas": 1}),
    ("DP+EP", 32, {"tp": 1, "dp": 32, "ep": 32}, {"replicas": 1}),
]
RATES_PER_GPU = [0.25, 0.5, 1.0, 1.5]


def run_all(per_gpu_requests: int) -> pd.DataFrame:
    rows = []
    for kind, gpus, par, cluster in LAYOUTS:
        for per_gpu in RATES_PER_GPU:
            rate, n = per_gpu * gpus, per_gpu_requests * gpus
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = simulate({"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8", "parallelism": par,
                              "cluster": cluster, "workload": {"rate": rate, "num_requests": n},
                              "output": {"plots": False, "progress": False}}).summary
            rows.append({"layout": kind, "gpus": gpus, "rate": rate, "tpot_p50_ms": 1e3 * s["tpot_s"]["p50"],
                         "ttft_p50_ms": 1e3 * s["ttft_s"]["p50"], "ttft_p99_ms": 1e3 * s["ttft_s"]["p99"],
                         "tok_s_per_gpu": s["throughput"]["output_tokens_per_s"] / gpus,
                         "usd_per_m_tok": s["cost"]["usd_per_million_output_tokens"],
                         "completed": s["requests"]["completed"], "verdict": (s.get("verdict") or {}).get("state")})
            r = rows[-1]
            print(f"{kind:8s} {gpus:3d} GPUs {rate:6.1f} req/s: TPOT p50 {r['tpot_p50_ms']:7.1f} ms, "
                  f"{r['tok_s_per_gpu']:7.1f} tok/s/GPU, ${r['usd_per_m_tok']:.2f}/M tok", flush=True)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.6))
    colors = {8: "#4477aa", 16: "#228833", 32: "#cc6677"}
    for (kind, gpus), g in df.groupby(["layout", "gpus"]):
        g = g.sort_values("rate")
        ax.plot(g["tpot_p50_ms"], g["tok_s_per_gpu"], marker="o" if kind == "TP only" else "s",
                ls="-" if kind == "TP only" else "--", color=colors[gpus], label=f"{kind}, {gpus} GPUs")
        last = g.iloc[-1]
        ax.annotate(f"${last['usd_per_m_tok']:.2f}/M", (last["tpot_p50_ms"], last["tok_s_per_gpu"]),
                    textcoords="offset points", xytext=(4, 2), fontsize=7)
    ax.set_xlabel("median TPOT (ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title("DeepSeek-V3 fp8 on H200: TP only vs attention DP + expert parallel", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.text(0.01, -0.02, "points: 0.25, 0.5, 1, 1.5 requests/s per GPU; label: $ per million output tokens at the "
             "highest load (kernel database, vLLM tables)", fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(out / f"moe_parallelism.{ext}", bbox_inches="tight", dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/moe_parallelism"))
    ap.add_argument("--requests-per-gpu", type=int, default=150)
    a = ap.parse_args()
    df = run_all(a.requests_per_gpu)
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "results.csv", index=False)
    plot(df, a.out / "figures")
    print(f"wrote {a.out}/results.csv and {a.out}/figures/moe_parallelism.png")
