"""``report``: a Markdown and an HTML design-review report from a results folder.

Recognised folders: a ``servesim run`` folder (summary.json + requests.parquet), a sweep folder
(results.parquet + sweep.json), a plan folder (plan.parquet + plan.json), an A/B folder
(ab.json). The report holds the setup (model, hardware, parallelism, scheduler, workload, price
source), the headline numbers, latency CDFs, latency against load (a sweep over the arrival
rate), a cost table and the Pareto front (a plan). Figures are written as PNG and SVG beside the
report (``figures/``) and referenced by relative path; the HTML has its style inline and needs
nothing else.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd
import yaml

from sim.metrics.error_band import band_lines
from sim.metrics.verdict import verdict_line, worst_verdict
from sim.sweep.store import RunStore

RATE_KEYS = ("workload.rate", "workload.trace.rate")


# ------------------------------------------------------------------------------- document model


class Doc:
    """A list of blocks rendered to both Markdown and HTML."""

    def __init__(self, title: str):
        self.title = title
        self.blocks: list[tuple] = []

    def h(self, text: str) -> None:
        self.blocks.append(("h", text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, header: list[str], rows: list[list], labels: bool = True) -> None:
        """Column names go through ``sim.metrics.labels.label`` (raw keys become human names)
        unless ``labels`` is False (a header already in words)."""
        from sim.metrics.labels import cell_text, label

        self.blocks.append(("table", [label(h) if labels else h for h in header],
                            [[v if isinstance(v, str) else cell_text(v) for v in r] for r in rows]))

    def figure(self, stem: str, caption: str) -> None:
        """``stem``: the path of the figure relative to the report, without extension."""
        self.blocks.append(("fig", stem, caption))

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b[0] == "h":
                out += [f"## {b[1]}", ""]
            elif b[0] == "p":
                out += [b[1], ""]
            elif b[0] == "ul":
                out += [f"- {x}" for x in b[1]] + [""]
            elif b[0] == "table":
                out += ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
                out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in b[2]] + [""]
            else:
                out += [f"![{b[2]}]({b[1]}.png)", "", f"*{b[2]}* ([SVG]({b[1]}.svg))", ""]
        return "\n".join(out)

    def html(self) -> str:
        e = _inline
        body = [f"<h1>{e(self.title)}</h1>"]
        for b in self.blocks:
            if b[0] == "h":
                body.append(f"<h2>{e(b[1])}</h2>")
            elif b[0] == "p":
                body.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "ul":
                body.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in b[1]) + "</ul>")
            elif b[0] == "table":
                num = [all(_numeric(r[i]) for r in b[2]) and bool(b[2]) for i in range(len(b[1]))]
                cls = lambda i: ' class="num"' if num[i] else ""  # noqa: E731  (numbers right, words left)
                head = "".join(f"<th{cls(i)}>{e(c)}</th>" for i, c in enumerate(b[1]))
                rows = "".join("<tr>" + "".join(f"<td{cls(i)}>{e(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                               for r in b[2])
                body.append(f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')
            else:
                body.append(f'<figure><img src="{e(b[1])}.svg" alt="{e(b[2])}"><figcaption>{e(b[2])} '
                            f'(<a href="{e(b[1])}.png">PNG</a>, <a href="{e(b[1])}.svg">SVG</a>)</figcaption></figure>')
        # wide tables scroll inside their own box instead of overflowing the page; long notes wrap
        style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
                 ".wide{overflow-x:auto;max-width:100%;margin:1em 0}"
                 "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;"
                 "text-align:left;white-space:nowrap}td:last-child{white-space:normal;min-width:12em}"
                 "th{background:#f3f3f3;white-space:normal;vertical-align:bottom}.num{text-align:right}"
                 "code{background:#f3f3f3;padding:0 3px}"
                 "img{max-width:100%}figcaption{font-size:13px;color:#555}")
        return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{e(self.title)}</title>"
                f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")




def _num(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _pct(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def _dur(v) -> str:
    """A latency as the command line prints it (812.3 ms, 14.20 s, 35.1 min)."""
    from sim.commands.table import duration

    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else duration(float(v))


def _inline(text: str) -> str:
    """HTML-escaped text with Markdown's `code` spans as <code>."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _numeric(cell: str) -> bool:
    """A cell that reads as a number (with separators, sign, %, $ or a unit): right-aligned."""
    import re

    return cell == "-" or re.fullmatch(r"[+-]?\$?[\d,]*\.?\d+(e[+-]?\d+)?\s*(%|ms|s|min|h)?", cell) is not None


# ------------------------------------------------------------------------------- sections


def setup_section(doc: Doc, cfg: dict, summary: dict | None) -> None:
    w = cfg.get("workload", {})
    sch = cfg.get("scheduler", {})
    knobs = ", ".join(f"{k}={v}" for k, v in sch.items() if k != "name")
    if w.get("trace"):
        wl = f"trace {Path(w['trace']['path']).name} (rate {w['trace'].get('rate') or 'as recorded'}, first {w['trace'].get('num_requests') or 'all'} requests)"
    else:
        wl = f"{w.get('arrival', 'poisson')} arrivals at {w.get('rate')} req/s, {w.get('num_requests')} requests"
    items = [f"model: {cfg.get('model')} ({cfg.get('dtype')})",
             f"hardware: {cfg.get('cluster', {}).get('replicas', 1)} replica(s) x {cfg.get('hardware')}, "
             f"tp={cfg.get('parallelism', {}).get('tp')}, pp={cfg.get('parallelism', {}).get('pp')}",
             f"scheduler: {sch.get('name')}" + (f" ({knobs})" if knobs else ""),
             f"workload: {wl}; seed {cfg.get('seed')}",
             f"SLO: TTFT <= {cfg.get('slo', {}).get('ttft_s')} s, TPOT <= {cfg.get('slo', {}).get('tpot_s')} s"]
    if summary:
        c = summary["cost"]
        items.append(f"price: {c['usd_per_gpu_hour'] if c['usd_per_gpu_hour'] is not None else 'unknown'} $/GPU-hour "
                     f"({c['price_source']})")
        items.append(f"cost model: {summary['sim']['cost_model']}")
    doc.h("Setup")
    doc.bullets(items)


def headline(doc: Doc, s: dict) -> None:
    r, t, g, c = s["requests"], s["throughput"], s["goodput"], s["cost"]
    doc.h("Headline numbers")
    doc.table(["metric", "mean", "p50", "p90", "p99"],
              [[name] + [_dur(s[key].get(k)) for k in ("mean", "p50", "p90", "p99")]
               for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                                 ("e2e_s", "E2E"), ("queue_s", "queueing"))], labels=False)
    doc.bullets([f"requests: {r['arrived']} arrived, {r['completed']} completed, {r['rejected']} rejected, {r['preemptions']} preemptions",
                 f"throughput: {t['requests_per_s']:.2f} req/s, {t['output_tokens_per_s']:,.0f} output tokens/s",
                 f"goodput: {g['requests_per_s']:.2f} req/s, SLO attainment {100 * (g['slo_attainment'] or 0):.1f}%"]
                + ([verdict_line(s["verdict"])] if s.get("verdict") else [])
                + ([" ".join(x.strip() for x in band_lines(s["error_band"], s))] if s.get("error_band") else []))
    doc.h("Cost")
    doc.table(["GPUs", "GPU-hours", "$ / GPU-hour", "cost ($)", "$ / M output tokens", "price source"],
              [[str(c["gpus"]), _num(c["gpu_hours"], ",.3f"), _num(c["usd_per_gpu_hour"], ",.2f"), _num(c["usd"], ",.2f"),
                _num(c["usd_per_million_output_tokens"], ",.2f"), c["price_source"]]], labels=False)


def cdf_figure(frames: dict[str, pd.DataFrame], figdir: Path, slo: dict | None) -> None:
    from sim.metrics.plots import _plt, cdf, log_scale, save

    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, col, name, lim in ((axes[0], "ttft_s", "TTFT", (slo or {}).get("ttft_s")),
                               (axes[1], "tpot_s", "TPOT", (slo or {}).get("tpot_s")), (axes[2], "e2e_s", "E2E", None)):
        for label, df in frames.items():
            cdf(ax, df[col].to_numpy(float), label, 1e3)
        if lim:
            ax.axvline(lim * 1e3, color="crimson", ls="--", lw=1, label=f"SLO {lim * 1e3:g} ms")
        log_scale(ax)  # latencies span decades; an SLO line must not squash the curves
        ax.set_xlabel(f"{name} (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{name} CDF", fontsize=10)
        if len(frames) <= 8:
            ax.legend(fontsize=7, loc="lower right")
    save(fig, figdir, "latency_cdf")
    plt.close(fig)


def series_label(keys: list[str], name) -> str:
    """A legend entry that says what varies: ``TP 4, scheduler vllm`` (not ``4 vllm``)."""
    from sim.metrics.labels import label

    if not keys:
        return str(name)
    vals = name if isinstance(name, tuple) else (name,)
    return ", ".join(f"{label(k)} {v}" for k, v in zip(keys, vals))


def load_figure(table: pd.DataFrame, rate_key: str, others: list[str], figdir: Path) -> None:
    from sim.metrics.plots import _plt, log_scale, save

    plt = _plt()
    ok = table[table["status"] == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    groups = ok.groupby(others, dropna=False) if others else [("all", ok)]
    for i, (name, g) in enumerate(groups):
        color = f"C{i % 10}"
        mean = g.groupby(rate_key)[["ttft_s.p99", "ttft_s.p50", "tpot_s.p99", "goodput.slo_attainment"]].mean().sort_index()
        label = series_label(others, name)
        axes[0].plot(mean.index, mean["ttft_s.p99"] * 1e3, marker="o", lw=1.2, color=color, label=f"{label} p99")
        axes[0].plot(mean.index, mean["ttft_s.p50"] * 1e3, marker=".", ls=":", lw=1, color=color, label=f"{label} p50")
        axes[1].plot(mean.index, mean["tpot_s.p99"] * 1e3, marker="o", lw=1.2, color=color, label=label)
        axes[2].plot(mean.index, 100 * mean["goodput.slo_attainment"], marker="o", lw=1.2, color=color, label=label)
    for ax, y in zip(axes, ("TTFT (ms)", "p99 TPOT (ms)", "SLO attainment (%)")):
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(y)
        ax.legend(fontsize=7)
    log_scale(axes[0], "y")
    fig.suptitle("Latency against load (mean over seeds)", fontsize=10)
    save(fig, figdir, "latency_vs_load")
    plt.close(fig)


def capacity_figure(probes: list[dict], settings: dict, figdir: Path) -> None:
    """p99 TTFT and p99 TPOT against the probed rate, a colour per seed (hollow: failed), the
    SLOs dashed."""
    from sim.metrics.plots import _plt, log_scale, save

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for i, seed in enumerate(sorted({p["seed"] for p in probes})):
        for ax, key in zip(axes, ("ttft_p99_s", "tpot_p99_s")):
            mine = sorted((p for p in probes if p["seed"] == seed and p.get(key) is not None), key=lambda p: p["rate"])
            for passed in (True, False):  # probes at one rate repeat (longer probes): markers, no line
                pts = [p for p in mine if p["passed"] == passed]
                ax.plot([p["rate"] for p in pts], [1e3 * p[key] for p in pts], "o", ls="none", color=f"C{i % 10}",
                        mfc=f"C{i % 10}" if passed else "none", label=f"seed {seed}" if passed else None)
    for ax, key, name in zip(axes, ("ttft_p99_s", "tpot_p99_s"), ("p99 TTFT (ms, log scale)", "p99 TPOT (ms, log scale)")):
        ax.axhline(1e3 * settings[key], color="crimson", ls="--", lw=1, label=f"SLO {1e3 * settings[key]:g} ms")
        log_scale(ax, "y")
        ax.set_xlabel("probed arrival rate (req/s)")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    save(fig, figdir, "capacity_probes")
    plt.close(fig)


# ------------------------------------------------------------------------------- per folder kind


def _run_report(src: Path, doc: Doc, figdir: Path) -> None:
    s = json.loads((src / "summary.json").read_text())
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    setup_section(doc, cfg, s)
    headline(doc, s)
    req = pd.read_parquet(src / "requests.parquet")
    steps = src / "steps.parquet"
    if steps.exists():  # the run's own time series (its latency CDF is redrawn below)
        from sim.metrics.plots import plot_run

        plot_run(req, pd.read_parquet(steps), figdir, slo=None)
    doc.h("Latency distributions")
    cdf_figure({cfg.get("scheduler", {}).get("name", "run"): req[req["status"] == "finished"]}, figdir, cfg.get("slo"))
    doc.figure("figures/latency_cdf", "TTFT, TPOT and end-to-end latency CDFs of completed requests")
    if steps.exists():
        doc.h("Over time")
        doc.figure("figures/batch_kv_over_time", "Sequences per step and KV-cache use over simulated time")
        doc.figure("figures/e2e_vs_arrival", "End-to-end latency of each request against its arrival time")
        doc.h("Where the time goes")
        doc.figure("figures/step_breakdown", "Share of busy GPU time per step-time component")


def _sweep_report(src: Path, doc: Doc, figdir: Path) -> None:
    meta = json.loads((src / "sweep.json").read_text())
    table = pd.read_parquet(src / "results.parquet")
    store = RunStore(src)
    ok = table[table["status"] == "ok"]
    first = ok.iloc[0] if len(ok) else None
    if first is not None:
        cfg = yaml.safe_load((store.path(first["key"]) / "config.yaml").read_text())
        setup_section(doc, cfg, json.loads((store.path(first["key"]) / "summary.json").read_text()))
        doc.p("Setup of the first run; the sweep varies: " + ", ".join(meta["varied"]) + f" over seeds {meta['seeds']}.")
    c = meta["counts"]
    doc.h("Headline numbers")
    doc.p(f"{c['points']} runs: {c['reused']} reused, {c['run']} run, {c['failed']} failed.")
    varied = [k for k in meta["varied"] if k in table]
    agg = table.groupby(varied, dropna=False, sort=False) if varied else [("all", table)]
    rows = []
    for name, g in agg:
        gk = g[g["status"] == "ok"]
        vals = list(name) if isinstance(name, tuple) else [name]
        m = gk.mean(numeric_only=True) if len(gk) else pd.Series(dtype=float)
        worst = (worst_verdict(gk["verdict.state"].tolist()) if "verdict.state" in gk else None) or "-"
        rows.append([str(v) for v in vals] + [
            f"{len(gk)}/{len(g)}", worst, _dur(m.get("ttft_s.p50")), _dur(m.get("ttft_s.p99")), _dur(m.get("tpot_s.p99")),
            _num(m.get("throughput.output_tokens_per_s"), ",.0f"), _pct(m.get("goodput.slo_attainment")),
            _num(m.get("cost.usd_per_million_output_tokens"), ",.2f")])
    from sim.metrics.labels import label

    doc.table([label(k) for k in varied] + ["ok runs", "verdict (worst)", "p50 TTFT", "p99 TTFT", "p99 TPOT", "output tokens / s",
                                            "SLO attainment", "$ / M output tokens"], rows, labels=False)
    doc.p("Means over seeds. Cost: GPU-hours over each run's makespan x the price stated in the setup.")
    frames = {}
    for name, g in (ok.groupby(varied, dropna=False, sort=False) if varied else [("run", ok)]):
        lat = [store.latency(k) for k in g["key"]]
        lat = [x for x in lat if x is not None]
        if lat:
            frames[series_label(varied, name) if varied else str(name)] = pd.concat(lat, ignore_index=True)
    if frames:
        doc.h("Latency distributions")
        cdf_figure(frames, figdir, (yaml.safe_load((store.path(first["key"]) / "config.yaml").read_text()) or {}).get("slo"))
        doc.figure("figures/latency_cdf", "Latency CDFs per sweep point (all seeds pooled)")
    rate_key = next((k for k in RATE_KEYS if k in varied), None)
    if rate_key is not None and ok[rate_key].nunique() > 1:
        doc.h("Latency against load")
        load_figure(table, rate_key, [k for k in varied if k != rate_key], figdir)
        doc.figure("figures/latency_vs_load", "p50/p99 TTFT, p99 TPOT and SLO attainment against arrival rate")


def _plan_report(src: Path, doc: Doc, figdir: Path) -> None:
    import shutil

    meta = json.loads((src / "plan.json").read_text())
    table = pd.read_parquet(src / "plan.parquet")
    if (src / "config.yaml").is_file():
        cfg = yaml.safe_load((src / "config.yaml").read_text())
        setup_section(doc, cfg, None)
        doc.p("Setup of the chosen fleet (config.yaml in the plan folder; `servesim run config.yaml` reproduces it).")
    doc.h("Headline numbers")
    ch = meta.get("chosen")
    slo = meta["slo"]
    doc.p(f"Target: {meta['model']} at {meta['rate']:g} req/s with p99 TTFT <= {slo['ttft_p99_s']:g} s and p99 TPOT <= "
          f"{slo['tpot_p99_s'] * 1e3:g} ms.")
    if ch:
        doc.p(f"Cheapest fleet: {int(ch['replicas'])} x {ch['candidate']} = {int(ch['gpus'])} GPUs at ${ch['usd_per_hour']:.2f}/hour "
              f"(${ch.get('usd_per_million_output_tokens') or float('nan'):.2f} per million output tokens), headroom "
              f"{100 * ch['headroom']:.0f}%, verified p99 TTFT {_dur(ch['ttft_p99_s'])}, p99 TPOT {_dur(ch['tpot_p99_s'])}.")
    else:
        doc.p("No fleet meets the SLOs at a known price.")
    doc.h("Cost table")
    doc.bullets([f"{g}: {p['usd_per_gpu_hour'] if p['usd_per_gpu_hour'] is not None else 'unknown'} $/GPU-hour ({p['source']})"
                 for g, p in meta["prices"].items()])
    from sim.sweep.plan import PLAN_HEADER, plan_rows

    doc.table(PLAN_HEADER, plan_rows(table), labels=False)
    pareto = src / "figures" / "pareto.png"
    if pareto.is_file():
        for ext in ("png", "svg"):
            shutil.copyfile(src / "figures" / f"pareto.{ext}", figdir / f"pareto.{ext}")
        doc.h("Pareto front")
        doc.figure("figures/pareto", "Fleet cost against verified p99 latency; the dashed line joins the Pareto front")
    if ch and len(table):
        keys = [k for k in (meta.get("chosen_keys") or [])]
        lat = [RunStore(src).latency(k) for k in keys]
        lat = [x for x in lat if x is not None]
        if lat:
            doc.h("Latency distributions")
            cdf_figure({"chosen fleet": pd.concat(lat, ignore_index=True)}, figdir,
                       {"ttft_s": slo["ttft_p99_s"], "tpot_s": slo["tpot_p99_s"]})
            doc.figure("figures/latency_cdf", "Latency CDFs of the chosen fleet at the target rate (verification runs)")


def _capacity_report(src: Path, doc: Doc, figdir: Path) -> None:
    r = json.loads((src / "capacity.json").read_text())
    store = RunStore(src)
    probes = [p for c in r["per_seed"] for p in c["probes"]]
    first = next((p for p in probes if (store.path(p["key"]) / "config.yaml").is_file()), None)
    if first is not None:
        cfg = yaml.safe_load((store.path(first["key"]) / "config.yaml").read_text())
        setup_section(doc, cfg, None)
        doc.p("Setup of the first probe; the search varies the arrival rate (and its request count) and the seed.")
    st = r["settings"]
    doc.h("Headline numbers")
    rps = r["rps"]
    doc.p(f"Capacity {rps['min']:.4g} req/s: the highest rate every one of {len(r['per_seed'])} seeds sustained with "
          f"p99 TTFT <= {st['ttft_p99_s']:g} s, p99 TPOT <= {st['tpot_p99_s'] * 1e3:g} ms and every request completed "
          f"(mean over seeds {rps['mean']:.4g}, max {rps['max']:.4g}). Precision: each seed's capacity lies between "
          f"its highest passing and lowest failing rate, at most {100 * r.get('precision', st['rel_tol']):.1f}% apart.")
    doc.table(["seed", "capacity (req/s)", "lowest failing rate (req/s)", "limit"],
              [[str(c["seed"]), _num(c["rps"], ".4g"), _num(c.get("fail_rps"), ".4g"), c["limit"]] for c in r["per_seed"]],
              labels=False)
    if probes:
        doc.h("Probes")
        capacity_figure(probes, st, figdir)
        doc.figure("figures/capacity_probes", "p99 TTFT and p99 TPOT of every probe against its arrival rate, a colour "
                   "per seed; the dashed lines are the SLOs, hollow markers the probes that failed")
        doc.table(["seed", "rate (req/s)", "stage", "passed", "p99 TTFT", "p99 TPOT", "load", "reason"],
                  [[str(p["seed"]), _num(p["rate"], ".4g"), p["stage"], "yes" if p["passed"] else "no",
                    _dur(p.get("ttft_p99_s")), _dur(p.get("tpot_p99_s")), p.get("verdict") or "-", p["reason"]]
                   for p in probes], labels=False)


def _ab_report(src: Path, doc: Doc, figdir: Path) -> None:
    from sim.sweep.ab import AB_HEADER, ab_intro, ab_rows, ab_title

    r = json.loads((src / "ab.json").read_text())
    doc.h("Headline numbers")
    doc.p(ab_title(r))
    for para in ab_intro(r):
        doc.p(para)
    doc.table(AB_HEADER, ab_rows(r), labels=False)
    store = RunStore(src)
    frames = {}
    for v in ("a", "b"):
        lat = [store.latency(r["keys"][f"{v}:{s}"]) for s in r["paired_seeds"]]
        lat = [x for x in lat if x is not None]
        if lat:
            frames[f"{v.upper()}: {' '.join(r[v])}"] = pd.concat(lat, ignore_index=True)
    if frames:
        doc.h("Latency distributions")
        cdf_figure(frames, figdir, None)
        doc.figure("figures/latency_cdf", "Latency CDFs of A and B (all seeds pooled)")


def detect(src: Path) -> str:
    if (src / "plan.json").is_file():
        return "plan"
    if (src / "capacity.json").is_file():
        return "capacity"
    if (src / "sweep.json").is_file():
        return "sweep"
    if (src / "ab.json").is_file():
        return "ab"
    if (src / "summary.json").is_file() and (src / "requests.parquet").is_file():
        return "run"
    from sim.errors import ServesimError

    raise ServesimError(f"{src} is not a results folder (expected summary.json + requests.parquet from `servesim run`, "
                        "sweep.json, plan.json, capacity.json or ab.json)")


def make_report(src: str | Path, out: str | Path) -> list[Path]:
    """Write report.md, report.html and figures/ into ``out``; return the two report paths."""
    src, out = Path(src), Path(out)
    kind = detect(src)
    figdir = out / "figures"
    figdir.mkdir(parents=True, exist_ok=True)
    doc = Doc({"run": "Simulation report", "sweep": "Sweep report", "plan": "Fleet plan report", "ab": "A/B report",
               "capacity": "SLO capacity report"}[kind] + f": {src.name}")
    {"run": _run_report, "sweep": _sweep_report, "plan": _plan_report, "ab": _ab_report,
     "capacity": _capacity_report}[kind](src, doc, figdir)
    doc.p("Generated by servesim. Metric definitions: docs/architecture.md section 4 and docs/planning.md "
          "(TTFT, TPOT = (E2E - TTFT) / (output tokens - 1), goodput counts requests within every SLO).")
    md, ht = out / "report.md", out / "report.html"
    md.write_text(doc.markdown())
    ht.write_text(doc.html())
    return [md, ht]
