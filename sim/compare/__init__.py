"""Sim vs real: replay a ``vllm bench serve`` run in the simulator and report the error per metric.

``compare(result_json, config, overrides=..., out=DIR)``:

1. reads the result file (``sim.compare.vllm_bench``; per-request detail when it was saved with
   ``--save-detailed``, else the aggregates only) and counts the failed requests it excludes;
2. rebuilds the workload as a generic trace CSV ``DIR/workload.csv`` (``sim.compare.workload``)
   and points the config's ``workload`` at it, so the simulation reads it through the normal
   trace path; the serving setup (model, hardware, tp, scheduler knobs, ``kv.num_gpu_blocks``)
   comes from the user's config and overrides;
3. simulates (results folder ``DIR/sim/``), computes both sides under vLLM's benchmark
   definitions (``sim.compare.metrics``), writes ``DIR/comparison.json`` and the overlaid CDFs
   ``DIR/plots/cdf_{ttft,tpot,itl,e2e}.{png,svg}``.

See docs/sim_vs_real.md.
"""
from __future__ import annotations

import json
import math
from pathlib import Path


from sim.compare.metrics import comparison, detail_vs_file, format_table, real_metrics, sim_metrics
from sim.compare.vllm_bench import BenchFileError, BenchResult, load_vllm_bench
from sim.compare.workload import gamma_arrivals, rebuild, write_workload
from sim.errors import ConfigError

__all__ = ["compare", "load_vllm_bench", "BenchResult", "BenchFileError", "gamma_arrivals", "format_table"]

DETAIL_TOLERANCE = 1e-3


def _resolve_model(data: dict, res: BenchResult, notes: list[str]) -> None:
    if "model" in data:
        return
    from sim.catalog import CatalogError, get_model

    mid = res.meta.get("model_id")
    for key in ([mid, mid.rstrip("/").split("/")[-1]] if mid else []):
        try:
            data["model"] = get_model(key).id
        except CatalogError:
            continue
        notes.append(f"model {data['model']} taken from the result's model_id {mid!r}")
        return
    raise ConfigError(f"{res.path}: model_id {mid!r} is not a catalog model; give the model with --model ID "
                      "or model: in the config (servesim catalog models lists them)")


def _sim_config(config, overrides: list[str], res: BenchResult, workload_csv: Path, notes: list[str]):
    from sim.config import apply_overrides, build_config, read_yaml

    data = read_yaml(config) if config else {}
    data = apply_overrides(data, overrides)
    _resolve_model(data, res, notes)
    if "hardware" not in data:
        raise ConfigError("the result file does not record the GPU: give the server's hardware with --hardware ID "
                          "or hardware: in the config (servesim catalog hardware lists them)")
    wl = data.get("workload") or {}
    ignored = sorted(k for k in wl if k != "clip_to_context")
    if ignored:
        notes.append(f"config workload keys ignored (the workload comes from the result file): {', '.join(ignored)}")
    data["workload"] = {"trace": {"path": str(workload_csv), "format": "generic", "reorder_window_s": 0.0},
                        **({"clip_to_context": wl["clip_to_context"]} if "clip_to_context" in wl else {})}
    data["output"] = {**(data.get("output") or {}), "progress": False}
    return build_config(data)


def _inf(v):
    """JSON has no infinity: vLLM writes an infinite request rate as the string "inf"; so do we."""
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def _simulate(cfg, sim_dir: Path):
    """One simulation written to ``sim_dir``; returns its summary, requests and pooled ITLs."""
    from sim.api import simulate

    res = simulate(cfg, out=sim_dir, plots=False, progress=False)
    return res.summary, res.requests, res.itl_s


def compare(result: str | Path, config: str | Path | None = None, *, overrides: list[str] | None = None,
            out: str | Path, arrivals: str | None = None, plots: bool = True) -> dict:
    """Replay ``result`` (a ``vllm bench serve`` JSON) in the simulator; returns the report that
    is also written to ``out/comparison.json`` (its ``table`` is the printed error table)."""
    out = Path(out)
    res = load_vllm_bench(result)
    notes: list[str] = []
    csv_path = out / "workload.csv"
    cfg = _sim_config(config, list(overrides or []), res, csv_path, notes)
    # the seed for synthesized arrivals: the result's own (--metadata seed=N) if present
    seed = res.meta["seed"] if res.meta.get("seed") is not None else cfg.seed
    rb = rebuild(res, seed=seed, arrivals=arrivals)
    notes += rb.notes
    write_workload(rb, csv_path)
    summary, req, itl = _simulate(cfg, out / "sim")
    real = real_metrics(res)
    cmp = comparison(real, sim_metrics(req, itl, summary))
    checks = _checks(res, real, notes)
    notes += _sim_notes(summary)
    figures = _figures(res, req, itl, cfg, out) if plots else []
    report = _report(res, rb, cfg, summary, cmp, checks, notes, figures, csv_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _checks(res: BenchResult, real: dict, notes: list[str]) -> dict:
    """Consistency checks of the result file itself (its stated aggregates against its
    per-request lists; tokens per streamed chunk); each finding is also added to ``notes``."""
    checks = {"detail_vs_file": detail_vs_file(res, real)}
    for k, v in checks["detail_vs_file"].items():
        if v["rel_diff"] is not None and abs(v["rel_diff"]) > DETAIL_TOLERANCE:
            notes.append(f"the file states {k} = {v['file']:.6g} but its per-request lists give {v['recomputed']:.6g}")
    if res.detailed:
        ok = res.ok
        tokens_after_first = int((ok["output_tokens"] - 1).clip(lower=0).sum())
        gaps = int((ok["chunks"] - 1).sum())
        checks["tokens_per_chunk"] = tokens_after_first / gaps if gaps else None
        if gaps and tokens_after_first / gaps > 1.01:
            notes.append(f"the server streamed {tokens_after_first / gaps:.2f} tokens per chunk: the real ITL is per "
                         "chunk, the simulated per token, so compare TPOT rather than ITL")
        if len(ok) != res.completed:
            notes.append(f"'completed' says {res.completed} but the per-request lists hold {len(ok)} successful requests")
    return checks


def _sim_notes(summary: dict) -> list[str]:
    sr = summary["requests"]
    if not (sr["rejected"] or sr["unfinished"]):
        return []
    return [f"the simulator rejected {sr['rejected']} and left {sr['unfinished']} requests unfinished "
            f"({', '.join(f'{k} {v}' for k, v in sr['rejected_by_reason'].items()) or 'no reasons'}); "
            "they are missing from the simulated metrics"]


def _figures(res: BenchResult, req, itl, cfg, out: Path) -> list[str]:
    """Overlaid real / simulated CDFs; paths relative to ``out``."""
    from sim.compare.plots import plot_cdfs

    done = req[req["status"] == "finished"]
    sim_vals = {"ttft_s": done["ttft_s"].to_numpy(), "tpot_s": done["tpot_s"].to_numpy(), "itl_s": itl,
                "e2e_s": done["e2e_s"].to_numpy()}
    real_vals = ({"ttft_s": res.ok["ttft_s"].to_numpy(), "tpot_s": res.ok["tpot_s"].to_numpy(),
                  "itl_s": res.itl_s, "e2e_s": res.ok["e2e_s"].to_numpy()} if res.detailed else None)
    title = f"{cfg.model} on {cfg.parallelism.tp}x {cfg.hardware}, {cfg.scheduler.name}; real: {res.path.name}"
    return [str(Path(f).relative_to(out)) for f in plot_cdfs(real_vals, res.file_metrics, sim_vals, out / "plots", title)]


DEFINITIONS = {
    "error": "(sim - real) / real; negative = simulator optimistic",
    "ttft_s": "first token (real: first streamed chunk) - arrival (real: request sent)",
    "tpot_s": "(E2E - TTFT) / (output tokens - 1), requests with > 1 output token, one value per request",
    "itl_s": "real: gaps between streamed chunks (vLLM); sim: gaps between tokens; equal at 1 token per chunk",
    "e2e_s": "last token (real: last chunk) - arrival (real: request sent)",
    "throughput": "real: completed / benchmark duration; sim: completed / makespan (first arrival to last step)",
    "percentiles": "numpy.percentile, linear interpolation (as vLLM)",
}


def _report(res: BenchResult, rb, cfg, summary: dict, cmp: dict, checks: dict, notes: list[str], figures: list[str],
            csv_path: Path) -> dict:
    """The comparison.json document."""
    from sim.metrics.summary import clean_json

    m, sr = res.meta, summary["requests"]
    failed = int((~res.requests["ok"]).sum()) if res.detailed else res.failed
    report = clean_json({
        "source": {"file": res.path.name, "tool": "vllm bench serve", "detail": res.detailed,
                   **{k: _inf(m.get(k)) for k in ("date", "backend", "model_id", "num_prompts", "request_rate", "burstiness",
                                                  "max_concurrency", "seed")}},
        "requests": {"real": {"recorded": len(res.requests) if res.detailed else res.completed + res.failed,
                              "completed": int(len(res.ok)) if res.detailed else res.completed,
                              "failed_excluded": failed},
                     "sim": {k: sr[k] for k in ("arrived", "completed", "rejected", "unfinished", "preemptions")}},
        "workload": {"path": csv_path.name, "requests": len(rb.frame), "arrivals": rb.arrivals, "lengths": rb.lengths},
        "setup": {"model": cfg.model, "hardware": cfg.hardware, "tp": cfg.parallelism.tp, "pp": cfg.parallelism.pp,
                  "replicas": cfg.cluster.replicas, "scheduler": cfg.scheduler.name,
                  "kv_num_gpu_blocks": cfg.kv.num_gpu_blocks, "kv_blocks_per_replica": summary["kv"].get("num_gpu_blocks"),
                  "cost_model": summary["sim"]["cost_model"], "sim_results": "sim/"},
        "metrics": {k: v for k, v in cmp.items() if k != "throughput"},
        "throughput": cmp["throughput"],
        "scope": "per-request distributions" if res.detailed else "aggregate metrics only (summary-only result)",
        "definitions": DEFINITIONS,
        "checks": checks,
        "notes": notes,
        "figures": figures,
    })
    report["table"] = format_table(cmp)
    return report
