"""Human names for result columns: the one mapping every table uses (the summary, sweep, plan,
capacity and report tables), so a column reads the same everywhere."""
from __future__ import annotations

LABELS = {
    # plan table
    "rank": "rank", "candidate": "candidate", "status": "status", "note": "note",
    "capacity_rps_min": "capacity / replica (req/s, min over seeds)",
    "capacity_rps_mean": "capacity / replica (req/s, mean)", "capacity_rps_max": "capacity / replica (req/s, max)",
    "replicas": "replicas", "gpus": "GPUs", "usd_per_gpu_hour": "$ / GPU-hour", "usd_per_hour": "$ / hour",
    "usd_per_million_output_tokens": "$ / M output tokens", "headroom": "headroom",
    "ttft_p99_s": "TTFT p99 (s)", "tpot_p99_s": "TPOT p99 (s)", "e2e_p99_s": "E2E p99 (s)",
    "slo_attainment": "SLO attainment", "cost_model": "cost model", "price_source": "price source",
    # flattened summaries (sweep results)
    "ttft_s.p50": "TTFT p50 (s)", "ttft_s.p99": "TTFT p99 (s)", "tpot_s.p50": "TPOT p50 (s)",
    "tpot_s.p99": "TPOT p99 (s)", "e2e_s.p50": "E2E p50 (s)", "e2e_s.p99": "E2E p99 (s)",
    "itl_s.p99": "ITL p99 (s)", "queue_s.p99": "queueing p99 (s)",
    "throughput.requests_per_s": "throughput (req/s)", "throughput.output_tokens_per_s": "output tokens / s",
    "goodput.requests_per_s": "goodput (req/s)", "goodput.slo_attainment": "SLO attainment",
    "cost.usd": "cost ($)", "cost.usd_per_million_output_tokens": "$ / M output tokens",
    "requests.completed": "completed", "requests.rejected": "rejected", "requests.preemptions": "preemptions",
    "workload.rate": "arrival rate (req/s)", "workload.trace.rate": "arrival rate (req/s)",
    "scheduler.name": "scheduler", "parallelism.tp": "TP", "parallelism.pp": "PP", "cluster.replicas": "replicas",
    "hardware": "hardware", "model": "model", "seed": "seed", "verdict.state": "load", "verdict": "load (worst run)",
    # capacity probes
    "rate": "rate (req/s)", "stage": "stage", "passed": "passed", "reason": "reason",
    "fail_rps": "lowest failing rate (req/s)", "rps": "capacity (req/s)",
}


def label(col: str) -> str:
    """The human name of a column; an unknown one is spelled out from its key
    (``kv.block_size`` -> "kv block size")."""
    if col in LABELS:
        return LABELS[col]
    text = col.replace(".", " ").replace("_", " ")
    for unit, name in ((" s", " (s)"), (" gib", " (GiB)"), (" usd", " ($)")):
        if text.endswith(unit):
            text = text[: -len(unit)] + name
    return text


def cell_text(v) -> str:
    """A table cell: '-' for missing, thousands separators for large floats, 3 digits otherwise."""
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def text_table(records: list[dict], cols: list[str]) -> str:
    """A plain-text table (columns as wide as their widest cell, headers from ``label``)."""
    head = [label(c) for c in cols]
    body = [[cell_text(r.get(c)) for c in cols] for r in records]
    width = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, width)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in width])] + [line(r) for r in body])
