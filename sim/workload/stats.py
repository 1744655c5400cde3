"""Summary statistics and figures of a trace file, computed in one streaming pass.

Memory: two int32 arrays of prompt and output lengths (8 bytes a request: 216 MB for a
27-million-row trace; exact percentiles need them), one counter per minute of arrivals, and
running sums for the inter-arrival moments. Rows go through the same reader as a simulation
(``sim.workload.traces``), so counts match what ``servesim run`` replays.
"""
from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

from sim.workload.config import TraceConfig, WorkloadConfig
from sim.workload.traces import read_trace_requests, trace_lengths  # noqa: F401  (trace_lengths: re-exported)


def _reader(path: str, fmt: str):
    info: dict = {}
    cfg = WorkloadConfig(trace=TraceConfig(path=str(path), format=fmt))
    return read_trace_requests(cfg, info, np.random.default_rng(0)), info


def _dist(x: np.ndarray) -> dict:
    q = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "median": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "max": int(x.max()), "min": int(x.min())}


def trace_stats(path: str, fmt: str = "auto", *, keep_arrays: bool = False) -> dict:
    """Count, duration (last - first arrival, s), mean rate (count / duration), inter-arrival
    mean and CV, per-minute arrival counts, and prompt / output length mean, median, p90, p99,
    max. With ``keep_arrays`` the length arrays are returned too (keys ``_prompt``, ``_output``)."""
    reqs, info = _reader(path, fmt)
    p, o = array("i"), array("i")
    per_min = array("q")
    n, first, last, s1, s2 = 0, 0.0, 0.0, 0.0, 0.0
    for r in reqs:
        t = r.arrival_s
        if n:
            g = t - last
            s1, s2 = s1 + g, s2 + g * g
        else:
            first = t
        last, n = t, n + 1
        m = int(t // 60)
        while len(per_min) <= m:
            per_min.append(0)
        per_min[m] += 1
        p.append(r.prompt_tokens)
        o.append(r.output_tokens)
    prompts, outputs = np.frombuffer(p, dtype=np.int32), np.frombuffer(o, dtype=np.int32)
    dur = last - first
    gaps = n - 1
    mean_gap = s1 / gaps if gaps else math.nan
    var = max(s2 / gaps - mean_gap * mean_gap, 0.0) if gaps else math.nan
    out = {
        "path": str(path), "format": info.get("format"), "requests": n, "duration_s": dur,
        "mean_rate_per_s": n / dur if dur > 0 else None,
        "interarrival": {"mean_s": mean_gap if gaps else None,
                         "cv": math.sqrt(var) / mean_gap if gaps and mean_gap > 0 else None},
        "prompt_tokens": _dist(prompts), "output_tokens": _dist(outputs),
        "arrivals_per_minute": list(per_min),
        "reader": {k: v for k, v in info.items() if k not in ("format", "source", "requests")},
    }
    if keep_arrays:
        out["_prompt"], out["_output"] = prompts, outputs
    return out


def plot_trace_stats(stats: dict, out_dir: str | Path, lengths: tuple[np.ndarray, np.ndarray] | None = None) -> list[Path]:
    """Write ``arrivals`` (requests per minute over time) and ``lengths`` (prompt and output
    histograms) as PNG and SVG into ``out_dir``; returns the files written. Lengths come from
    ``lengths`` or from the ``_prompt`` / ``_output`` arrays of ``trace_stats(keep_arrays=True)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = Path(stats["path"]).name
    prompts, outputs = lengths if lengths is not None else (stats.get("_prompt"), stats.get("_output"))
    written = []

    fig, ax = plt.subplots(figsize=(8, 3.5))
    per_min = np.asarray(stats["arrivals_per_minute"], dtype=float) / 60.0
    ax.step(np.arange(len(per_min)), per_min, where="post")
    ax.set_xlabel("time since first request (min)")
    ax.set_ylabel("arrival rate (requests/s, per-minute mean)")
    ax.set_title(f"{name}: arrival rate ({stats['requests']:,} requests)")
    ax.grid(alpha=0.3)
    written += _save(fig, out_dir / "arrivals")

    if prompts is not None and outputs is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for ax, x, what in ((axes[0], prompts, "prompt"), (axes[1], outputs, "output")):
            ax.hist(x, bins=min(100, max(10, int(np.sqrt(len(x))))), color="C0" if what == "prompt" else "C1")
            ax.axvline(float(np.median(x)), color="k", ls="--", lw=1, label=f"median {np.median(x):,.0f}")
            ax.set_xlabel(f"{what} length (tokens)")
            ax.set_ylabel("requests")
            ax.legend()
            ax.grid(alpha=0.3)
        fig.suptitle(f"{name}: token lengths")
        written += _save(fig, out_dir / "lengths")
    return written


def _save(fig, stem: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=120)
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def format_stats(s: dict) -> str:
    """A plain-text table of ``trace_stats`` output."""
    def num(x, d=0):
        return "-" if x is None else f"{x:,.{d}f}"

    ia = s["interarrival"]
    lines = [f"trace     {s['path']}  ({s['format']})",
             f"requests  {s['requests']:,}",
             f"duration  {num(s['duration_s'], 1)} s",
             f"rate      {num(s['mean_rate_per_s'], 2)} req/s   inter-arrival mean {num(ia['mean_s'], 3)} s, CV {num(ia['cv'], 2)}",
             "",
             f"{'tokens':<8}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
    for k, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        d = s[k]
        lines.append(f"{label:<8}{num(d['mean']):>10}{num(d['median']):>10}{num(d['p90']):>10}{num(d['p99']):>10}{num(d['max']):>10}")
    skipped = {k: v for k, v in s["reader"].items() if v and k not in ("rows", "outside_window", "sampled_out")}
    if skipped:
        lines += ["", "reader: " + ", ".join(f"{k} {v}" for k, v in skipped.items())]
    return "\n".join(lines)
