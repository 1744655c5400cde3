"""Faults and autoscaling, one scenario each, with figures of latency over time.

    python experiments/faults.py --out results/faults

Llama-3.1-70B on 4 x H100-SXM (tp=4 each, round-robin routing), Poisson arrivals at 20 req/s for
150 s with the default conversation-like lengths. Scenarios (docs/faults.md explains each):

- ``baseline``: no fault.
- ``crash``: replica 0 fails at 50 s and serves again 30 s later; its requests are re-queued.
- ``crash_lose``: the same crash, its requests lost.
- ``straggler``: replica 1's steps take 3x as long from 50 s to 100 s.
- ``degraded_link``: every replica's all-reduces take 20x as long from 50 s to 100 s.
- ``autoscale``: a diurnal rate (mean 20 req/s, +-90%, period 300 s, 300 s long) served by a
  queue-length autoscaler from 1 to 8 replicas with a 60 s cold start.

Prints one line per scenario (kept in faults.expected.txt and checked by the tests) and writes
``results.csv`` and figures: ``faults_latency`` (p99 TTFT and p99 TPOT per 5 s of arrival
time, each fault against the no-fault run, its window shaded) and ``faults_autoscale``
(arrival rate, replicas provisioned and serving, cumulative cost over time), PNG and SVG.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from sim import simulate

BASE = {"model": "llama-3.1-70b", "hardware": "h100-sxm", "parallelism": {"tp": 4}, "cluster": {"replicas": 4},
        "workload": {"rate": 20.0, "num_requests": 3000}, "output": {"plots": False, "progress": False}, "seed": 1,
        "cost": {"model": "roofline"}}  # the same figures with or without the kernel-database extra
START, END = 50.0, 100.0
SCENARIOS = {
    "baseline": {},
    "crash": {"faults": {"events": [{"kind": "crash", "at_s": START, "replica": 0, "duration_s": 30}]}},
    "crash_lose": {"faults": {"on_crash": "lose", "events": [{"kind": "crash", "at_s": START, "replica": 0, "duration_s": 30}]}},
    "straggler": {"faults": {"events": [{"kind": "straggler", "at_s": START, "replica": 1, "duration_s": END - START, "factor": 3}]}},
    "degraded_link": {"faults": {"events": [{"kind": "degraded_link", "at_s": START, "duration_s": END - START, "factor": 20}]}},
    "autoscale": {"cluster": {"replicas": 2, "autoscale": {"enabled": True, "min_replicas": 1, "max_replicas": 8,
                                                           "interval_s": 10, "target_outstanding": 24, "cold_start_s": 60}},
                  "workload": {"rate": 20.0, "num_requests": 6000, "arrival": "diurnal",
                               "diurnal": {"period_s": 300, "amplitude": 0.9, "phase_s": 0}}},
}
BIN_S = 5.0


def run_all() -> dict:
    results = {}
    print(f"{'scenario':<14}{'completed':>10}{'lost':>6}{'requeued':>9}{'E2E p50 s':>10}{'E2E p99 s':>10}{'GPU-h':>8}")
    for name, extra in SCENARIOS.items():
        res = simulate({**BASE, **extra})
        s = res.summary
        f = s.get("faults") or {}
        print(f"{name:<14}{s['requests']['completed']:>10}{s['requests'].get('lost', 0):>6}{f.get('requeued', 0):>9}"
              f"{s['e2e_s']['p50']:>10.2f}{s['e2e_s']['p99']:>10.2f}{s['cost']['gpu_hours']:>8.3f}")
        results[name] = res
    return results


def binned(req: pd.DataFrame) -> pd.DataFrame:
    """p99 TTFT and p99 TPOT of the finished requests per ``BIN_S`` seconds of arrival time."""
    done = req[req.status == "finished"]
    g = done.groupby((done.arrival_s // BIN_S) * BIN_S + BIN_S / 2)
    return pd.DataFrame({"ttft": g["ttft_s"].quantile(0.99), "tpot": g["tpot_s"].quantile(0.99)})


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = binned(results["baseline"].requests)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey=False)
    panels = [("crash", "replica 0 crashes at 50 s, restarts at 80 s (requests re-queued)"),
              ("straggler", "replica 1 steps 3x slower, 50-100 s"),
              ("degraded_link", "all-reduce 20x slower on every replica, 50-100 s"),
              ("autoscale", "autoscaling 1-8 replicas, 60 s cold start, diurnal load")]
    for ax, (name, title) in zip(axes.flat, panels):
        cur = binned(results[name].requests)
        if name != "autoscale":
            ax.axvspan(START, END if name != "crash" else START + 30, color="tab:red", alpha=0.1, label="fault")
            ax.plot(base.index, base.ttft, "--", color="tab:blue", lw=1, alpha=0.6, label="TTFT p99, no fault")
            ax.plot(base.index, base.tpot, "--", color="tab:orange", lw=1, alpha=0.6, label="TPOT p99, no fault")
        ax.plot(cur.index, cur.ttft, color="tab:blue", label="TTFT p99")
        ax.plot(cur.index, cur.tpot, color="tab:orange", label="TPOT p99")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("arrival time (s)")
        ax.set_ylabel("latency (s), per 5 s of arrivals")
        ax.legend(fontsize=7)
    fig.suptitle("servesim faults: Llama-3.1-70B, H100-SXM tp=4, 4 replicas, 20 req/s")
    fig.tight_layout()
    save(fig, out / "faults_latency")

    res = results["autoscale"]
    series = pd.DataFrame(res.summary["autoscale"]["series"])
    arrivals = res.requests.arrival_s
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    counts, edges = np.histogram(arrivals, bins=np.arange(0, arrivals.max() + BIN_S, BIN_S))
    a1.plot(edges[:-1] + BIN_S / 2, counts / BIN_S, color="tab:grey")
    a1.set_ylabel("arrivals (req/s)")
    a2.step(series.t_s, series.provisioned, where="post", label="provisioned (paid)")
    a2.step(series.t_s, series.serving, where="post", label="serving")
    a2.set_ylabel("replicas")
    a2.legend(fontsize=8)
    a3.plot(series.t_s, series.usd if series.usd.notna().all() else series.gpu_hours, color="tab:green")
    a3.set_ylabel("cumulative cost ($)" if series.usd.notna().all() else "cumulative GPU-hours")
    a3.set_xlabel("time (s)")
    fig.suptitle("queue-length autoscaling: replicas and cost over time")
    fig.tight_layout()
    save(fig, out / "faults_autoscale")


def save(fig, stem: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(stem.with_suffix(".png"), dpi=110)
    fig.savefig(stem.with_suffix(".svg"))
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/faults", help="folder for the table and figures")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_all()
    rows = [{"scenario": k, **{f"{m}_{q}": r.summary[m][q] for m in ("ttft_s", "e2e_s") for q in ("p50", "p99")},
             "completed": r.summary["requests"]["completed"], "lost": r.summary["requests"].get("lost", 0),
             "gpu_hours": r.summary["cost"]["gpu_hours"]} for k, r in results.items()]
    pd.DataFrame(rows).to_csv(out / "results.csv", index=False)
    plot(results, out)


if __name__ == "__main__":
    main()
