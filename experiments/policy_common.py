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


NEAR = 0.02
"""Relative difference under which two curves are drawn as one in print: series within 2% of an
earlier one at every point are called out in the caption and drawn hollow, so both stay visible."""


def coinciding(curves: dict, rtol: float = 1e-9) -> dict:
    """{series: the earlier series it coincides with} for series whose (x, y) points equal an
    earlier series' at every point (within relative tolerance ``rtol``)."""
    import numpy as np

    out, names = {}, list(curves)
    for j, b in enumerate(names):
        for a in names[:j]:
            if a not in out and curves[a].shape == curves[b].shape and np.allclose(curves[a], curves[b], rtol=rtol,
                                                                                   atol=0, equal_nan=True):
                out[b] = a
                break
    return out


def off_scale(maxima: dict, factor: float = 50.0) -> tuple[float | None, list]:
    """(upper y limit, series above it) when some series peak more than ``factor`` times above
    the median series' peak (orca and static at ~1,000 s against the others' ~1 s would flatten
    every other line); (None, []) otherwise."""
    import numpy as np

    peaks = [v for v in maxima.values() if np.isfinite(v) and v > 0]
    if len(peaks) < 3:
        return None, []
    limit = factor * float(np.median(peaks))
    above = [k for k, v in maxima.items() if np.isfinite(v) and v > limit]
    return (limit, above) if above else (None, [])


def _plain(v: float) -> str:
    """A number without exponent: 67,720, 60, 0.125."""
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def _minor(v: float, _pos=None) -> str:
    """A minor log tick's label: only the 2s and 5s of each decade."""
    import math

    if v <= 0:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v)), 6)
    return _plain(v) if lead in (2.0, 5.0) else ""


def line_figures(df, out: Path, *, x: str, xlabel: str, series: str, metrics, title: str,
                 log_x: bool = False) -> None:
    """One figure per ``(column, label, log_y[, scale])`` in ``metrics``: a line per ``series``
    value against ``x`` (values times ``scale``, e.g. 1e3 for seconds to ms), saved as PNG and
    SVG under ``out/figures``. Notes (coinciding series, series off the scale) go in a caption
    below the axes, never over the x-axis label."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    from sim.metrics.plots import _plt, save

    plt = _plt()
    markers, styles = "osD^vP*Xh<>", ["-", "--", "-.", ":"]
    plain = FuncFormatter(lambda v, _: _plain(v))  # 60, not 6x10^1
    for metric in metrics:
        col, label, log = metric[:3]
        scale = metric[3] if len(metric) > 3 else 1.0
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        groups = [(name, g.sort_values(x)) for name, g in df.groupby(series, sort=False)]
        curves = {name: np.column_stack([g[x].to_numpy(float), scale * g[col].to_numpy(float)]) for name, g in groups}
        same = coinciding(curves)
        near = {b: a for b, a in coinciding(curves, NEAR).items() if b not in same}
        limit, above = off_scale({name: np.nanmax(c[:, 1]) if len(c) else np.nan for name, c in curves.items()})
        for i, (name, c) in enumerate(curves.items()):
            hollow = name in same or name in near
            y = c[:, 1] if limit is None else np.minimum(c[:, 1], limit)
            ax.plot(c[:, 0], y, marker=markers[i % len(markers)], ls=styles[i % len(styles)],
                    ms=9 if hollow else 5, mfc="none" if hollow else None, label=name)
        notes = []
        if same:
            notes.append("identical at every point (drawn hollow): " + "; ".join(f"{b} = {a}" for b, a in same.items())
                         + ". The policies made the same decisions on this workload")
        if near:
            notes.append(f"within {NEAR:.0%} at every point (drawn hollow): "
                         + "; ".join(f"{b} ~ {a}" for b, a in near.items()))
        ax.set(xlabel=xlabel, ylabel=label, title=title)
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(FuncFormatter(_minor))  # 20 and 50 between 10 and 100
        if limit is not None:
            ax.set_ylim(top=limit * (1.3 if log else 1.05))
            peaks = ", ".join(f"{k} (up to {_plain(np.nanmax(curves[k][:, 1]))})" for k in above)
            notes.append(f"drawn at the top edge, off the scale: {peaks}")
        if log_x:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(plain)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: covers no line
        if notes:  # below the figure (the saved box is tight, so it grows to hold it)
            fig.text(0.01, -0.01, ". ".join(notes) + ".", fontsize=7, wrap=True, va="top")
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
