"""Overlaid CDFs, real against simulated: TTFT, TPOT, ITL, E2E (PNG and SVG each).

With per-request detail both sides are full CDFs. A summary-only result has only a few
statistics, drawn as markers at their quantile (p50 at 0.5, p99 at 0.99) on the simulated CDF's
axes, so the figure still shows where the simulation misses.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.metrics.plots import _plt, cdf, save

NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E"}


def plot_cdfs(real_values: dict | None, real_stats: dict, sim_values: dict, out_dir: Path, title: str) -> list[str]:
    """``real_values`` / ``sim_values``: ``{metric: array of seconds}``; ``real_stats``: the real
    side's ``{metric: {"p50": s, "p99": s, ...}}`` (used when ``real_values`` is None)."""
    plt = _plt()
    files: list[str] = []
    for key, name in NAMES.items():
        fig, ax = plt.subplots(figsize=(6, 3.8))
        if real_values is not None:
            cdf(ax, np.asarray(real_values[key], float), f"real (n={np.isfinite(real_values[key]).sum():,})", 1e3)
        else:
            pts = [(float(s[1:]) / 100, v) for s, v in real_stats.get(key, {}).items()
                   if s.startswith("p") and v is not None]
            if pts:
                q, v = zip(*sorted(pts))
                ax.plot(np.array(v) * 1e3, q, "o", color="black", label="real (percentiles in file)")
        sim_v = np.asarray(sim_values[key], float)
        cdf(ax, sim_v, f"simulated (n={np.isfinite(sim_v).sum():,})", 1e3)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction" + (" of gaps" if key == "itl_s" else " of requests"))
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{name}: real vs simulated\n{title}", fontsize=9)
        ax.legend(loc="lower right", fontsize=8)
        files += save(fig, out_dir, f"cdf_{name.lower()}")
        plt.close(fig)
    return files
