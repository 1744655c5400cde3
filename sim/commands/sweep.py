"""Capacity-planning commands: ``sweep``, ``capacity``, ``plan``, ``ab``, ``report``.

All of them run simulations through the run store of ``sim/sweep`` (one folder per resolved
config under ``--out``/runs), so rerunning a command reuses every finished run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from sim.commands.common import HelpFormatter, add_set_arg, int_list, positive_float, positive_int

F = HelpFormatter


def _backend_args(p) -> None:
    p.add_argument("--workers", type=positive_int, default=max(1, min(os.cpu_count() or 1, 8)),
                   help="parallel simulations (local process pool; 1 = in this process)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="where runs execute")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _slo_args(p, seeds: int = 3) -> None:
    """The search settings shared by ``capacity`` and ``plan``: same flags, same defaults, so
    both give the same capacity for the same candidate."""
    from sim.sweep.capacity import PROBE_REQUESTS, SearchSettings

    d = SearchSettings()
    p.add_argument("--slo-ttft-p99", type=positive_float, default=d.ttft_p99_s, metavar="S", help="p99 TTFT limit (s)")
    p.add_argument("--slo-tpot-p99", type=positive_float, default=d.tpot_p99_s, metavar="S", help="p99 TPOT limit (s)")
    p.add_argument("--seeds", type=positive_int, default=seeds, metavar="N",
                   help="seeds 0..N-1: each its own arrivals and lengths, searched separately")
    p.add_argument("--start-rate", type=positive_float, default=d.start_rate, metavar="RATE", help="first rate probed (req/s)")
    p.add_argument("--rel-tol", type=positive_float, default=d.rel_tol, metavar="FRACTION",
                   help="precision: stop bisecting when hi/lo <= 1 + this")
    p.add_argument("--num-requests", type=positive_int, default=PROBE_REQUESTS, metavar="N",
                   help=f"requests per probe, raised to cover {d.min_window_s:g} s of arrivals and at least "
                        f"{d.min_requests} (default {PROBE_REQUESTS}, the same for capacity and plan)")
    p.add_argument("--no-early-stop", action="store_true", help="always simulate every request of a probe")


def _settings(args):
    from sim.sweep.capacity import SearchSettings

    return SearchSettings(ttft_p99_s=args.slo_ttft_p99, tpot_p99_s=args.slo_tpot_p99, seeds=tuple(range(args.seeds)),
                          start_rate=args.start_rate, rel_tol=args.rel_tol, early_stop=not args.no_early_stop)


def _base(args) -> dict:
    """The config file (or the default) plus --set overrides, as a dict."""
    from sim.config import apply_overrides, read_yaml

    data = read_yaml(args.config) if getattr(args, "config", None) else {}
    if getattr(args, "trace", None):  # (before the request count, which goes to the trace then)
        data = apply_overrides(data, [f"workload.trace.path={args.trace}"])
    sets = []
    if getattr(args, "num_requests", None):  # first, so that an explicit --set wins (as in plan)
        key = "workload.trace.num_requests" if (data.get("workload") or {}).get("trace") else "workload.num_requests"
        sets.append(f"{key}={args.num_requests}")
    return apply_overrides(data, sets + list(getattr(args, "sets", []) or []))


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of simulations (resumable)", formatter_class=F,
                       description="Run every point of a YAML sweep spec (base, grid, zip, seeds); finished runs are "
                                   "stored under OUT/runs/<config key> and reused on the next invocation.")
    p.add_argument("spec", help="sweep spec YAML")
    p.add_argument("--out", required=True, help="sweep folder")
    _backend_args(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("capacity", help="highest arrival rate within p99 SLOs", formatter_class=F,
                       description="Find the highest arrival rate a config sustains with p99 TTFT and p99 TPOT within "
                                   "limits and every request completed (bracketing + geometric bisection per seed).")
    p.add_argument("config", nargs="?", help="YAML config (default: the embedded default)")
    p.add_argument("--out", default="results/capacity", help="folder for capacity.json and the run store")
    add_set_arg(p, "config override")
    _slo_args(p)
    _backend_args(p)
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("plan", help="cheapest fleet meeting p99 SLOs at a rate", formatter_class=F,
                       description="Search GPUs x tensor parallelism x schedulers for the cheapest fleet serving --rate "
                                   "within the p99 SLOs; writes plan.parquet, plan.md, figures/pareto.{png,svg} and the "
                                   "chosen fleet as a runnable config.yaml.")
    p.add_argument("--model", required=True, help="catalog model id")
    p.add_argument("--rate", type=positive_float, required=True, help="target arrival rate (req/s)")
    p.add_argument("--gpus", default="h100-sxm,a100-80gb,h200-sxm,b200", help="hardware ids, comma-separated")
    p.add_argument("--tp", type=int_list, default=[1, 2, 4, 8], metavar="TP,TP,...",
                   help="tensor-parallel degrees, comma-separated (default: 1,2,4,8)")
    p.add_argument("--schedulers", default="vllm_v1", help="schedulers, comma-separated; knobs as name+key=value")
    p.add_argument("--layouts", default="agg", help=(
        "agg (replicas that prefill and decode), disagg (xPyD prefill and decode pools, a GPU and TP each), "
        "or agg,disagg"))
    p.add_argument("--max-prefill", type=positive_int, default=8, help="disagg: most prefill replicas (the x of xPyD)")
    p.add_argument("--max-decode", type=positive_int, default=8, help="disagg: most decode replicas (the y of xPyD)")
    p.add_argument("--verify-top", type=positive_int, default=3, help=(
        "disagg: layouts verified by simulation, the cheapest by their static bound first"))
    p.add_argument("--time-budget", type=positive_float, default=None, metavar="SECONDS", help=(
        "verify fewer disaggregated layouts when the search's estimate exceeds it, and none when the aggregated "
        "search already took longer"))
    p.add_argument("--workload", default=None, help="YAML with a workload section (or a whole config)")
    p.add_argument("--trace", default=None, help="trace file replayed (rescaled to each probed rate)")
    add_set_arg(p, "config override")
    p.add_argument("--out", required=True, help="plan folder")
    _slo_args(p)
    _backend_args(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("ab", help="paired A/B comparison with confidence intervals", formatter_class=F,
                       description="Run variants A and B on the same workloads (same seed per pair) and report the mean "
                                   "difference per metric with a 95% paired-t confidence interval. A trace replays the "
                                   "same requests whatever the seed: without --resample, A/B runs it once and says it "
                                   "cannot test.")
    p.add_argument("config", nargs="?", help="YAML config (default: the embedded default)")
    p.add_argument("--trace", default=None, help="trace file replayed by both variants")
    p.add_argument("--resample", choices=["none", "arrivals"], default="none",
                   help="with a trace: 'arrivals' re-draws its arrival times per seed (Poisson at its mean rate; "
                        "each request keeps its lengths and prefix), so that the seeds are independent runs")
    p.add_argument("--a", action="append", default=[], metavar="KEY=VALUE", help="override for A (repeatable)")
    p.add_argument("--b", action="append", default=[], metavar="KEY=VALUE", help="override for B (repeatable)")
    p.add_argument("--seeds", type=positive_int, default=5, help="seeds 0..N-1")
    add_set_arg(p, "override for both")
    p.add_argument("--num-requests", type=positive_int, default=None, help="requests per run (default: the config's)")
    p.add_argument("--out", default="results/ab", help="folder for ab.json, ab.md and the run store")
    _backend_args(p)
    p.set_defaults(func=cmd_ab)

    p = sub.add_parser("report", help="Markdown + HTML report of a results folder", formatter_class=F,
                       description="Write report.md, report.html and figures/ for a run, sweep, plan or ab folder.")
    p.add_argument("results", help="results folder")
    p.add_argument("--out", default=None, help="report folder (default: RESULTS/report)")
    p.set_defaults(func=cmd_report)


SWEEP_COLUMNS = ("ttft_s.p50", "ttft_s.p99", "tpot_s.p99", "throughput.output_tokens_per_s", "goodput.slo_attainment",
                 "cost.usd_per_million_output_tokens", "verdict.state")
"""The metrics of the table ``sweep`` prints at the end (results.parquet holds them all)."""


def cmd_sweep(args) -> int:
    from sim.sweep.spec import load_spec
    from sim.sweep.sweep import run_sweep

    from sim.metrics.labels import text_table

    spec = load_spec(args.spec)
    table, c = run_sweep(spec, args.out, workers=args.workers, backend=args.backend, address=args.address,
                         progress=False if args.quiet else None)
    cols = [k for k in spec.varied if k in table] + ["seed", "status"] + [
        k for k in SWEEP_COLUMNS if k in table]
    print(text_table(table.to_dict("records"), cols))
    print(f"sweep: {c['points']} runs: {c['reused']} reused, {c['run']} run, {c['failed']} failed "
          f"({c['wall_s']:.1f} s); table {args.out}/results.parquet")
    for _, r in table[table["status"] == "error"].iterrows():
        print(f"  failed {r['key']}: {r['error']}")
    return 1 if c["failed"] else 0


def cmd_capacity(args) -> int:
    from sim.config import load_config
    from sim.sweep.capacity import find_capacity, probe_estimate, with_slos
    from sim.sweep.runner import Driver
    from sim.sweep.store import RunStore

    s = _settings(args)
    base = with_slos(_base(args), s)
    cfg = load_config(base)
    out = Path(args.out)
    t0 = time.perf_counter()
    d = Driver(RunStore(out), args.backend, args.workers, args.address, False if args.quiet else None, desc="probes",
               total=probe_estimate(s, len(s.seeds)))
    cap = find_capacity(base, s, d)
    res = {"kind": "capacity", "model": cfg.model, "hardware": cfg.hardware, "tp": cfg.parallelism.tp,
           "replicas": cfg.cluster.replicas, "scheduler": cfg.scheduler.name, **cap.as_dict(),
           "runs": {"reused": d.counts.reused, "run": d.counts.run, "failed": d.counts.failed},
           "wall_s": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(res, indent=2) + "\n")
    r = res["rps"]
    print(f"{cfg.model} on {cfg.cluster.replicas} x {cfg.parallelism.tp} {cfg.hardware}, {cfg.scheduler.name}: capacity "
          f"{r['min']:.4g} req/s (sustained by every one of {len(s.seeds)} seeds; mean {r['mean']:.4g}, max {r['max']:.4g}) "
          f"within p99 TTFT <= {s.ttft_p99_s:g} s, p99 TPOT <= {s.tpot_p99_s * 1e3:g} ms")
    print(f"precision: each seed's capacity lies between the rate that passed and the next that failed, at most "
          f"{100 * cap.precision:.1f}% apart (--rel-tol {s.rel_tol:g}); probes of at least {s.min_requests} requests "
          f"and {s.min_window_s:g} s of arrivals")
    for c in cap.per_seed:
        bracket = f"[{c.rps:.4g}, {c.fail_rps:.4g})" if c.fail_rps else f">= {c.rps:.4g}"
        print(f"  seed {c.seed}: {c.rps:.4g} req/s in {bracket} ({'at least; ' if c.capped else ''}limit {c.reason})")
    print(f"runs: {d.counts.line()}; {res['wall_s']:.1f} s; {out}/capacity.json")
    return 0


def cmd_plan(args) -> int:
    from sim.config import apply_overrides, read_yaml
    from sim.sweep.plan import parse_schedulers, plan

    base: dict = {}
    if args.workload:
        data = read_yaml(args.workload)
        base["workload"] = data["workload"] if "workload" in data else data
    if args.trace:
        base.setdefault("workload", {})["trace"] = {"path": args.trace}
    key = "workload.trace.num_requests" if args.trace or (base.get("workload") or {}).get("trace") else "workload.num_requests"
    base = apply_overrides(base, [f"{key}={args.num_requests}"] + list(args.sets))
    res = plan(args.model, args.rate, gpus=[g.strip() for g in args.gpus.split(",") if g.strip()],
               tps=args.tp, schedulers=parse_schedulers(args.schedulers),
               settings=_settings(args), out=args.out, base=base, workers=args.workers, backend=args.backend,
               address=args.address, progress=False if args.quiet else None,
               layouts=tuple(x.strip() for x in args.layouts.split(",") if x.strip()), max_prefill=args.max_prefill,
               max_decode=args.max_decode, verify_top=args.verify_top, time_budget_s=args.time_budget,
               say=None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True)))
    print((Path(args.out) / "plan.md").read_text())
    if res.chosen is None:
        print("no fleet meets the SLOs at a known price")
        return 1
    print(f"chosen fleet written to {args.out}/config.yaml (servesim run {args.out}/config.yaml)")
    return 0


def cmd_ab(args) -> int:
    from sim.config import apply_overrides
    from sim.sweep.ab import ab_test

    if not args.a and not args.b:
        from sim.errors import ServesimError

        raise ServesimError("ab needs --a and/or --b overrides, e.g. --a scheduler.name=vllm --b scheduler.name=sarathi")
    base = _base(args)
    if args.resample != "none":
        if not (base.get("workload") or {}).get("trace"):
            from sim.errors import ConfigError

            raise ConfigError("--resample: re-draws a trace's arrivals; give --trace (or a config with workload.trace)")
        base = apply_overrides(base, ["workload.trace.arrivals=poisson"])
    r = ab_test(base, args.a, args.b, list(range(args.seeds)), args.out, workers=args.workers,
                backend=args.backend, address=args.address, progress=False if args.quiet else None)
    print((Path(args.out) / "ab.md").read_text())
    print(f"runs: {r['runs']['reused']} reused, {r['runs']['run']} run, {r['runs']['failed']} failed; {args.out}/ab.json")
    return 1 if r["failed"] else 0


def cmd_report(args) -> int:
    from sim.sweep.report import make_report

    out = args.out or str(Path(args.results) / "report")
    files = make_report(args.results, out)
    print("report: " + ", ".join(str(f) for f in files))
    return 0
