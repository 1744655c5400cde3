"""``servesim run``: one simulation, a results folder and a summary table."""
from __future__ import annotations

import argparse

SHORTCUTS = [
    ("--model", "model", str, "catalog model id, e.g. llama-3.1-70b"),
    ("--hardware", "hardware", str, "catalog hardware id, e.g. a100-80gb"),
    ("--tp", "parallelism.tp", int, "tensor-parallel degree"),
    ("--pp", "parallelism.pp", int, "pipeline stages"),
    ("--replicas", "cluster.replicas", int, "identical replicas"),
    ("--scheduler", "scheduler.name", str, "scheduling policy"),
    ("--rate", "workload.rate", float, "arrival rate (req/s); with --trace, rescales the trace to it"),
    ("--num-requests", "workload.num_requests", int, "requests to simulate (with --trace: its first N rows)"),
    ("--seed", "seed", int, "random seed"),
]


def register(sub) -> None:
    p = sub.add_parser("run", help="run one simulation", description="Run one simulation and write a results folder.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("config", nargs="?", help="YAML config (default: the embedded default)")
    p.add_argument("--out", default="results/run", help="results folder")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key by its dotted path (repeatable)")
    for flag, key, typ, help_ in SHORTCUTS:
        p.add_argument(flag, dest=key.replace(".", "__"), type=typ, help=f"{help_} (= --set {key}=...)")
    p.add_argument("--trace", help="replay a trace file (format detected from its columns)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.set_defaults(func=run)


def overrides_from_args(args) -> list[str]:
    sets = []
    trace = getattr(args, "trace", None)
    if trace:
        sets.append(f"workload.trace.path={trace}")
    for flag, key, _, _ in SHORTCUTS:
        v = getattr(args, key.replace(".", "__"), None)
        if v is None:
            continue
        if trace and key in ("workload.rate", "workload.num_requests"):
            key = key.replace("workload.", "workload.trace.")
        sets.append(f"{key}={v}")
    return sets + list(args.sets)


def run(args) -> int:
    from sim.api import simulate
    from sim.commands.table import print_summary

    res = simulate(args.config, overrides=overrides_from_args(args), out=args.out,
                   plots=False if args.no_plots else None, progress=False if args.quiet else None)
    if not args.quiet:
        print_summary(res.summary, res.config)
        print(f"results written to {args.out}/")
    return 0
