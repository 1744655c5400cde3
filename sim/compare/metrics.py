"""Real and simulated metrics under the same definitions, and the signed error between them.

Both sides use vLLM's benchmark definitions, which match ours (docs/architecture.md section 4) except
where stated: TTFT per successful request; TPOT = (E2E - TTFT) / (output tokens - 1) for
requests with more than one output token, one value per request; ITL = every gap, pooled;
E2E = last token - arrival (vLLM: last chunk - request sent). mean / p50 / p90 / p99 by
``numpy.percentile`` (linear), as vLLM computes them.

Differences that remain, reported, not hidden:
- ITL: vLLM records gaps between streamed *chunks*; the simulator between *tokens*. They agree
  when every chunk carries one token; ``checks.tokens_per_chunk`` says how far the real run was
  from that (speculative decoding, ``--stream-interval``, detokenizer bundling raise it).
- Client overhead: the real TTFT and E2E include HTTP, tokenization and detokenization; the
  simulator has none of it, so a small negative TTFT error at low load is expected.
- Throughput: vLLM divides by the benchmark duration (client start to last response); the
  simulator by its makespan (first arrival to the end of the last step).

Signed relative error = (sim - real) / real: negative means the simulator is optimistic (faster).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sim.compare.vllm_bench import BenchResult
from sim.metrics.summary import dist

STATS = ("mean", "p50", "p90", "p99")
LATENCY = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"))
THROUGHPUT = (("requests_per_s", "request throughput (req/s)"), ("output_tokens_per_s", "output throughput (tok/s)"),
              ("duration_s", "duration (s)"))


def _stats(values) -> dict:
    d = dist(values)
    return {k: d[k] for k in STATS}


def real_metrics(res: BenchResult) -> dict:
    """The measured side: from the per-request lists when present, else the file's aggregates
    (a statistic the file does not hold, e.g. p90 by default, is None)."""
    if res.detailed:
        ok = res.ok
        lat = {"ttft_s": _stats(ok["ttft_s"]), "tpot_s": _stats(ok["tpot_s"]), "itl_s": _stats(res.itl_s),
               "e2e_s": _stats(ok["e2e_s"])}
        out_tok = int(ok["output_tokens"].sum())
        thr = {"requests_per_s": len(ok) / res.duration_s, "output_tokens_per_s": out_tok / res.duration_s}
    else:
        lat = {k: {s: res.file_metrics.get(k, {}).get(s) for s in STATS} for k, _ in LATENCY}
        thr = {"requests_per_s": res.request_throughput if res.request_throughput is not None else res.completed / res.duration_s,
               "output_tokens_per_s": res.output_throughput if res.output_throughput is not None else
               (res.total_output_tokens / res.duration_s if res.total_output_tokens is not None else None)}
    thr["duration_s"] = res.duration_s
    return {**lat, "throughput": thr}


def sim_metrics(req: pd.DataFrame, itl_s: np.ndarray, summary: dict) -> dict:
    done = req[req["status"] == "finished"]
    t = summary["throughput"]
    return {"ttft_s": _stats(done["ttft_s"]), "tpot_s": _stats(done["tpot_s"]), "itl_s": _stats(itl_s),
            "e2e_s": _stats(done["e2e_s"]),
            "throughput": {"requests_per_s": t["requests_per_s"], "output_tokens_per_s": t["output_tokens_per_s"],
                           "duration_s": summary["sim"]["makespan_s"]}}


def rel_error(real, sim):
    if real is None or sim is None or real == 0:
        return None
    return (sim - real) / real


def comparison(real: dict, sim: dict) -> dict:
    """``{metric: {"real": {...}, "sim": {...}, "error": {...}}}`` for latencies and throughput."""
    out = {}
    for key, _ in LATENCY:
        out[key] = {"real": real[key], "sim": sim[key], "error": {s: rel_error(real[key][s], sim[key][s]) for s in STATS}}
    out["throughput"] = {k: {"real": real["throughput"][k], "sim": sim["throughput"][k],
                             "error": rel_error(real["throughput"][k], sim["throughput"][k])} for k, _ in THROUGHPUT}
    return out


def detail_vs_file(res: BenchResult, real: dict) -> dict:
    """Each aggregate the file states next to the same figure recomputed from its per-request
    lists (relative difference). They agree unless the file was edited or vLLM changed a
    definition; a large difference is reported in the notes."""
    out = {}
    if not res.detailed:
        return out
    for key, _ in LATENCY:
        for s in STATS:
            f = res.file_metrics.get(key, {}).get(s)
            r = real[key][s]
            if f is not None and r is not None:
                out[f"{key}.{s}"] = {"file": f, "recomputed": r, "rel_diff": rel_error(f, r) if f else (0.0 if r == 0 else None)}
    for key, f in (("throughput.requests_per_s", res.request_throughput), ("throughput.output_tokens_per_s", res.output_throughput)):
        r = real["throughput"][key.split(".")[1]]
        if f is not None:
            out[key] = {"file": f, "recomputed": r, "rel_diff": rel_error(f, r)}
    return out


def _fmt(v, scale=1e3, digits=1) -> str:
    return "-" if v is None else f"{v * scale:,.{digits}f}"


def _pct(e) -> str:
    return "-" if e is None else f"{100 * e:+.1f}%"


def format_table(cmp: dict) -> str:
    lines = [f"{'metric':<10}{'stat':<6}{'real (ms)':>12}{'sim (ms)':>12}{'error':>10}"]
    for key, name in LATENCY:
        c = cmp[key]
        for s in STATS:
            lines.append(f"{name:<10}{s:<6}{_fmt(c['real'][s]):>12}{_fmt(c['sim'][s]):>12}{_pct(c['error'][s]):>10}")
    lines.append("")
    lines.append(f"{'':<28}{'real':>12}{'sim':>12}{'error':>10}")
    for key, name in THROUGHPUT:
        c = cmp["throughput"][key]
        lines.append(f"{name:<28}{_fmt(c['real'], 1, 2):>12}{_fmt(c['sim'], 1, 2):>12}{_pct(c['error']):>10}")
    return "\n".join(lines)
