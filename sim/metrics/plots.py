"""Figures from flat records (never from live simulator objects). PNG and SVG each."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.types import COMPONENTS


COMPONENT_NAMES = {"gemm": "matrix multiplies (GEMM)", "attn_prefill": "attention, prefill",
                   "attn_decode": "attention, decode", "comm": "GPU-to-GPU communication",
                   "other_gpu": "other GPU work (norms, activations, sampling)", "cpu": "CPU overhead (scheduling, launch)",
                   "swap": "KV swap over the host link"}
"""The step-time components (``sim.types.COMPONENTS``) in words, for figures."""


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
                         "axes.spines.right": False, "svg.hashsalt": "servesim"})
    return plt


def log_scale(ax, axis: str = "x") -> None:
    """A log scale on ``ax``'s ``axis`` whose tick labels are plain numbers ("100", "1,000",
    "0.5"), labelled where matplotlib's log formatter would label them. Its default labels are
    mathtext (10 to a power): typesetting them was about a third of saving a latency figure."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    plain_log_labels(ax.xaxis if axis == "x" else ax.yaxis)


def plain_log_labels(axis) -> None:
    """``log_scale``'s tick labels on a log ``axis`` (an axes' or a colorbar's)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return (f"{x:,.0f}" if x >= 1 else f"{x:g}") if super().__call__(x, pos) else ""

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def save(fig, out: Path, name: str) -> list[str]:
    """``fig`` as PNG and SVG, cropped to its drawn extent. The extent is measured once and used
    for both files (``bbox_inches="tight"`` would lay the figure out again for each)."""
    out.mkdir(parents=True, exist_ok=True)
    from matplotlib import rcParams

    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(rcParams["savefig.pad_inches"])
    files = []
    for ext in ("png", "svg"):
        p = out / f"{name}.{ext}"
        fig.savefig(p, bbox_inches=box, metadata={"Date": None} if ext == "svg" else None)
        files.append(str(p))
    return files


CDF_POINTS = 2000
"""Most points one CDF line draws: beyond it, the sorted values at evenly spaced ranks (the
first and last kept), which a figure cannot tell from every point."""
SCATTER_MARKERS = 5000
"""Most requests drawn as one marker each; more are drawn as a hexagonal 2D histogram (one
marker per request made figures the largest cost of a run of 100,000 requests)."""


def cdf(ax, values, label, unit_scale=1.0):
    v = np.sort(np.asarray(values, float)[np.isfinite(values)]) * unit_scale
    if v.size:
        y = np.arange(1, v.size + 1) / v.size
        if v.size > CDF_POINTS:
            keep = np.unique(np.linspace(0, v.size - 1, CDF_POINTS).round().astype(np.int64))
            v, y = v[keep], y[keep]
        ax.plot(v, y, label=label, lw=1.6)


def binned(steps: pd.DataFrame, cols, bins: int = 300):
    """Per time bin, stats of step columns: (bin centres, {col: [nbins, 3] min/mean/max})."""
    t = steps["start_s"].to_numpy()
    if len(t) == 0:
        return np.zeros(0), *[np.zeros((0, 3)) for _ in cols]
    edges = np.linspace(t.min(), t.max() + 1e-9, min(bins, len(t)) + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    frame = pd.DataFrame({c: steps[c].to_numpy() for c in cols})
    frame["bin"] = idx
    agg = frame.groupby("bin").agg(["min", "mean", "max"])
    centres = (edges[:-1] + edges[1:])[agg.index.to_numpy()] / 2
    return centres, *[agg[c].to_numpy() for c in cols]


def plot_run(req: pd.DataFrame, steps: pd.DataFrame, out_dir: str | Path, title: str = "", slo=None,
             band: dict | None = None) -> list[str]:
    """The standard figures of one run: TTFT and TPOT CDFs (with the cost model's measured error
    band at p50, p90 and p99 when ``band``, summary.json's ``error_band``, has one), E2E against
    arrival, batch size and KV usage over time, step-time breakdown (the last two need per-step
    records)."""
    plt = _plt()
    out = Path(out_dir)
    files: list[str] = []
    done = req[req["status"] == "finished"]

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, col, name, lim in ((axes[0], "ttft_s", "TTFT", slo.ttft_s if slo else None),
                               (axes[1], "tpot_s", "TPOT", slo.tpot_s if slo else None)):
        cdf(ax, done[col].to_numpy(), name, 1e3)
        ranges = (band or {}).get(col) or {}
        for i, (p, q) in enumerate((("p50", 0.5), ("p90", 0.9), ("p99", 0.99))):
            if ranges.get(p):
                lo, hi = ranges[p]
                e = band[col.replace("_s", "_error")]
                ax.plot([lo * 1e3, hi * 1e3], [q, q], color="tab:green", lw=4, alpha=0.5, solid_capstyle="butt",
                        label=(f"measured error {100 * e[0]:+.0f}%..{100 * e[1]:+.0f}% ({band['rows']} runs)"
                               if i == 0 else None))
        if lim:
            ax.axvline(lim * 1e3, color="crimson", ls="--", lw=1, label=f"SLO {lim * 1e3:g} ms")
        if lim or ranges:
            ax.legend(loc="lower right", fontsize=8)
        log_scale(ax)
        ax.set_xlabel(f"{name} (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{name} CDF")
    fig.suptitle(title, fontsize=10)
    files += save(fig, out, "latency_cdf")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 3.8))
    if len(done) <= SCATTER_MARKERS:
        ax.scatter(done["arrival_s"], done["e2e_s"], s=3, alpha=0.5, label="completed")
    elif len(done):  # too many markers: requests per hexagonal cell
        hb = ax.hexbin(done["arrival_s"], done["e2e_s"], gridsize=(120, 30), bins="log", mincnt=1, cmap="viridis",
                       linewidths=0, rasterized=True)  # (the SVG embeds the cells as one image)
        bar = fig.colorbar(hb, ax=ax, label="completed requests per cell")
        plain_log_labels(bar.ax.yaxis)
    rej = req[req["status"] == "rejected"]
    if len(rej):
        ax.scatter(rej["arrival_s"], np.zeros(len(rej)), s=8, marker="x", color="crimson", label=f"rejected ({len(rej)})")
        ax.legend()
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_title(f"E2E latency against arrival time {title}", fontsize=10)
    files += save(fig, out, "e2e_vs_arrival")
    plt.close(fig)
    if steps.empty:  # no per-step records (output.step_records: false): no time series
        return files

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True)
    for rep, g in steps.groupby("replica"):
        t, bs, kv = binned(g, ("batch_size", "kv_usage"))
        line, = a1.plot(t, bs[:, 1], lw=1.0, label=f"replica {rep}")
        a1.fill_between(t, bs[:, 0], bs[:, 2], color=line.get_color(), alpha=0.2, lw=0)
        a2.plot(t, 100 * kv[:, 2], lw=1.0, color=line.get_color(), label=f"replica {rep}")
    a1.set_ylabel("sequences per step\n(mean; band: min-max)")
    a1.set_title(f"Batch size and KV-cache usage over time {title}", fontsize=10)
    a2.set_ylabel("KV blocks used (%, max)")
    a2.set_xlabel("simulated time (s)")
    a2.set_ylim(0, 105)
    if steps["replica"].nunique() > 1 and steps["replica"].nunique() <= 8:
        a1.legend(fontsize=7)
    files += save(fig, out, "batch_kv_over_time")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    tot = [float(steps[f"t_{c}_s"].sum()) for c in COMPONENTS]
    allt = sum(tot) or 1.0
    ax.barh([COMPONENT_NAMES[c] for c in COMPONENTS], [100 * t / allt for t in tot], color="#4477aa")
    for i, t in enumerate(tot):
        ax.text(100 * t / allt + 0.5, i, f"{t:.1f} s", va="center", fontsize=8)
    ax.set_xlabel("share of busy GPU time (%)")
    ax.invert_yaxis()
    src = ", ".join(f"{k}: {v}" for k, v in steps["cost_source"].value_counts().items()) if len(steps) else ""
    ax.set_title(f"Step-time breakdown ({src} steps)", fontsize=10)
    files += save(fig, out, "step_breakdown")
    plt.close(fig)
    return files
