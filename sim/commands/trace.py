"""``servesim trace stats FILE [--format F] [--out DIR]``: a trace's request count, duration,
rate, inter-arrival CV and length percentiles; with ``--out``, ``stats.json`` and figures."""
from __future__ import annotations

import json
from pathlib import Path

def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="inspect request trace files")
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    s = sub.add_parser("stats", help="count, rate and length statistics of a trace (one streaming pass)")
    s.add_argument("file", help="trace file (CSV, JSONL or ShareGPT JSON; .gz accepted)")
    s.add_argument("--format", default="auto", help=(
        "trace format: auto (detect), azure, burstgpt, mooncake, sharegpt, generic, or any other "
        "entry of sim.workload.traces.FORMATS"))
    s.add_argument("--out", help="write stats.json and arrival / length figures (PNG, SVG) here")
    s.set_defaults(func=_stats)


def _stats(args) -> int:
    from sim.workload.stats import format_stats, plot_trace_stats, trace_stats
    from sim.workload.traces import trace_format

    if args.format != "auto":
        trace_format(args.format)  # an unknown name: one line listing the known ones

    st = trace_stats(args.file, args.format, keep_arrays=bool(args.out))
    print(format_stats(st))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot_trace_stats(st, out)
        (out / "stats.json").write_text(json.dumps({k: v for k, v in st.items() if not k.startswith("_")}, indent=2) + "\n")
        print(f"\nwrote {out / 'stats.json'} and figures (arrivals, lengths) in {out}")
    return 0
