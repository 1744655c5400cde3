"""Shared bits of the policy experiments: the YAML base config (its ``experiment:`` section
holds the sweep, the rest is a servesim config), trace paths relative to the repo root, and
figure saving (PNG + SVG)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def parse_args(doc: str, default_config: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).with_name(default_config)), help="experiment YAML")
    ap.add_argument("--out", default="results/" + Path(default_config).stem, help="folder for tables and figures")
    ap.add_argument("--num-requests", type=int, default=None, help="override the requests per run")
    return ap.parse_args()


def load(path: str) -> tuple[dict, dict]:
    """(servesim config dict, experiment section); a trace path is resolved against the repo
    root, and a missing trace falls back to the section's ``fallback_workload`` with a warning."""
    data = yaml.safe_load(Path(path).read_text())
    exp = data.pop("experiment")
    trace = data.get("workload", {}).get("trace")
    if trace is not None:
        p = Path(trace["path"])
        if not p.is_absolute() and not p.exists():
            p = REPO / p
        if p.exists():
            trace["path"] = str(p)
        else:
            print(f"warning: trace {trace['path']} not found; using the synthetic fallback workload", file=sys.stderr)
            data["workload"] = exp["fallback_workload"]
    return data, exp


def set_requests(cfg: dict, n: int | None) -> None:
    if n is None:
        return
    wl = cfg["workload"]
    (wl["trace"] if "trace" in wl else wl)["num_requests"] = n


def set_rate(cfg: dict, rate: float) -> dict:
    """A copy of ``cfg`` at ``rate`` requests per second (a trace is rescaled to it)."""
    cfg = json.loads(json.dumps(cfg))
    wl = cfg["workload"]
    (wl["trace"] if "trace" in wl else wl)["rate"] = rate
    return cfg


def coinciding(curves: dict) -> dict:
    """{series: the earlier series it coincides with} for series whose (x, y) points equal an
    earlier series' at every point (relative tolerance 1e-9)."""
    import numpy as np

    out, names = {}, list(curves)
    for j, b in enumerate(names):
        for a in names[:j]:
            if a not in out and curves[a].shape == curves[b].shape and np.allclose(curves[a], curves[b], rtol=1e-9,
                                                                                   atol=0, equal_nan=True):
                out[b] = a
                break
    return out


def line_figures(df, out: Path, *, x: str, xlabel: str, series: str, metrics, title: str,
                 log_x: bool = False) -> None:
    """One figure per ``(column, label, log_y)`` in ``metrics``: a line per ``series`` value
    against ``x``, saved as PNG and SVG under ``out/figures``."""
    from sim.metrics.plots import _plt, save

    plt = _plt()
    markers, styles = "osD^vP*Xh<>", ["-", "--", "-.", ":"]
    for col, label, log in metrics:
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        groups = list(df.groupby(series, sort=False))
        same = coinciding({name: g[[x, col]].to_numpy(float) for name, g in groups})
        for i, (name, g) in enumerate(groups):
            # distinct marker and line style per series; a series that coincides with an
            # earlier one is drawn hollow and larger, so both stay visible
            hollow = name in same
            ax.plot(g[x], g[col], marker=markers[i % len(markers)], ls=styles[i % len(styles)],
                    ms=9 if hollow else 5, mfc="none" if hollow else None, label=name)
        if same:
            pairs = "; ".join(f"{b} = {a}" for b, a in same.items())
            fig.text(0.01, 0.005, f"coinciding (identical at every point, drawn hollow): {pairs}. The policies "
                     "made the same decisions on this workload (nothing for them to reorder or evict).",
                     fontsize=6.5, wrap=True, va="bottom")
        ax.set(xlabel=xlabel, ylabel=label, title=title)
        if log:
            ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
        ax.legend(fontsize=8, ncol=2)
        save(fig, out / "figures", col)
        plt.close(fig)


def main(doc: str, default_config: str, run_all, plot) -> None:
    """Parse the arguments, run the sweep ``run_all(cfg, exp) -> DataFrame``, write
    ``results.csv`` / ``results.json`` and ``plot(df, out, cfg)``'s figures under ``--out``."""
    args = parse_args(doc, default_config)
    cfg, exp = load(args.config)
    set_requests(cfg, args.num_requests)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = run_all(cfg, exp)
    df.to_csv(out / "results.csv", index=False)
    (out / "results.json").write_text(json.dumps(df.to_dict(orient="records"), indent=1) + "\n")
    plot(df, out, cfg)
    print(f"wrote {out}/results.csv, results.json and figures/")
