"""``servesim run``: one simulation, a results folder and a summary table."""
from __future__ import annotations

from sim.commands.common import HelpFormatter, add_config_args, nonneg_int, positive_float, positive_int, shortcut_sets

SHORTCUTS = [
    ("--model", "model", str, "catalog model id (e.g. llama-3.1-70b), a card .yaml or a Hugging Face config.json"),
    ("--hardware", "hardware", str, "catalog hardware id, e.g. a100-80gb"),
    ("--dtype", "dtype", str, "weight dtype: bf16, fp16, fp8, nvfp4 (Blackwell), mxfp4 (gpt-oss), int4 (Kimi-K2.5 experts)"),
    ("--tp", "parallelism.tp", positive_int, "tensor-parallel degree"),
    ("--pp", "parallelism.pp", positive_int, "pipeline stages"),
    ("--cost-model", "cost.model", str, "auto, kerneldb, profiled or roofline"),
    ("--framework", "cost.framework", str, "serving framework priced by the kernel database: vllm, sglang, trtllm"),
    ("--framework-version", "cost.framework_version", str, "framework version in the kernel database (default newest)"),
    ("--replicas", "cluster.replicas", positive_int, "identical replicas"),
    ("--scheduler", "scheduler.name", str, "scheduling policy"),
    ("--router", "cluster.router", str, "router across replicas"),
    ("--rate", "workload.rate", positive_float, "arrival rate (req/s); with --trace, rescales the trace to it"),
    ("--num-requests", "workload.num_requests", positive_int, "requests to simulate (with --trace: its first N rows)"),
    ("--seed", "seed", nonneg_int, "random seed"),
    ("--workers", "engine.workers", positive_int, "processes for replicas that share no state (round robin)"),
]


EXIT_ALL_REJECTED = 3
"""Exit status of a run that served nothing because every request was rejected (results written)."""


def register(sub) -> None:
    p = sub.add_parser("run", help="run one simulation", description="Run one simulation and write a results folder.",
                       formatter_class=HelpFormatter)
    p.add_argument("config", nargs="?", help="YAML config (default: the embedded default)")
    p.add_argument("--out", default="results/run", help="results folder")
    add_config_args(p, SHORTCUTS)
    p.add_argument("--trace", help="replay a trace file (format detected from its columns)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.set_defaults(func=run)


def overrides_from_args(args) -> list[str]:
    trace = getattr(args, "trace", None)
    if not trace:
        return shortcut_sets(args, SHORTCUTS)
    # with a trace, --rate and --num-requests rescale and cap the trace
    in_trace = ("workload.rate", "workload.num_requests")
    rename = lambda key: key.replace("workload.", "workload.trace.") if key in in_trace else key  # noqa: E731
    return [f"workload.trace.path={trace}"] + shortcut_sets(args, SHORTCUTS, rename)


def run(args) -> int:
    from sim.api import simulate
    from sim.commands.table import print_summary

    from pathlib import Path

    replaced = (Path(args.out) / "summary.json").exists()
    res = simulate(args.config, overrides=overrides_from_args(args), out=args.out,
                   plots=False if args.no_plots else None, progress=False if args.quiet else None)
    if not args.quiet:
        print_summary(res.summary, res.config)
        names = [n for n in ("summary.json", "requests.parquet", "steps.parquet", "fleet.parquet", "config.yaml", "plots/")
                 if (Path(args.out) / n.rstrip("/")).exists()]
        again = ", replacing the previous run there" if replaced else ""
        print(f"results written to {args.out}/ ({', '.join(names)}{again})")
    r = res.summary["requests"]
    if r["arrived"] and r["rejected"] == r["arrived"]:
        import sys

        from sim.commands.table import rejection_hints

        why = "; ".join(rejection_hints(res.summary, res.config)) or ", ".join(sorted(r.get("rejected_by_reason") or {}))
        print(f"servesim: error: every request was rejected, nothing was served ({why})", file=sys.stderr)
        return EXIT_ALL_REJECTED
    return 0
