"""Replaying the measured serving runs of aiconfigurator-core's ``silicon_sample.csv`` as
closed-loop benchmarks, and scoring the simulator's TTFT and TPOT against them
(``servesim validate-silicon``; docs/kernel_database.md).

Each aggregated row is a benchmark at fixed concurrency: ``batch_size`` clients (equal to the
``silicon_concurrency`` recorded in ``silicon_data_source`` on every row) send requests of exactly
``isl`` prompt and ``osl`` output tokens with no think time. ``rounds`` x N requests are
simulated; the first N (ramp-up) and the last N (drain, fewer than N clients active) are left
out, the middle ones scored (all of them with fewer than 3 rounds). Measured values are the
rows' mean TTFT and TPOT.

Client start (``ramp``): ``none`` (default) starts all N clients at t = 0, as benchmark clients
with a concurrency limit do (``vllm bench serve --max-concurrency``, genai-perf/aiperf
``--concurrency``); the engine's token budget then admits the first wave's prompts over several
steps, so the waves that follow are staggered in groups as in the real engine, not in
lock-step. ``request`` staggers client i's first request by i/N of one predicted request
duration (every stage of a request's life present in the batch: the least bunched arrivals).

Row -> config: ``model_path`` -> catalog model through its aliases (an ``-Instruct``, ``-FP8``
or ``-NVFP4`` suffix names the same architecture); ``system`` -> catalog GPU
(``kerneldb_data.SYSTEMS``); ``precision`` -> ``dtype`` (empty: bf16, the checkpoint's dtype;
fp4: nvfp4, as ``gemm_quant_mode`` says, except gpt-oss, published only as mxfp4; the KV cache stays in
the activation dtype, except TRT-LLM's fp8 / nvfp4 rows: fp8, as its ``auto`` KV dtype follows the
ModelOpt checkpoint);
``backend`` -> ``cost.framework`` (the database's newest version of it; the row's own
version is recorded, not matched); ``tp_size`` -> ``parallelism.tp``. The scheduler is vLLM
V1's (``vllm_v1``: running requests first, then prompt chunks, in one 8192-token budget: also
how SGLang's chunked prefill and TRT-LLM's in-flight batching fill a step) with
``max_num_seqs`` at least the concurrency. Rows that
cannot be replayed are counted by reason.
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost import kerneldb_data as kd

BUCKETS = ((1, 8, "1-8"), (9, 32, "9-32"), (33, 127, "33-127"), (128, 10**9, "128+"))
SUFFIXES = ("-instruct", "-fp8", "-nvfp4", "-fp4")
PRECISION = {"fp4": "nvfp4"}  # the csv's fp4 rows are NVFP4 (gemm_quant_mode nvfp4)
FP8_KV_BACKENDS = {"trtllm"}
"""Backends whose default KV-cache dtype follows the checkpoint: TRT-LLM's ``kv_cache_config.dtype``
``auto`` takes the ModelOpt checkpoint's ``kv_cache_quant_algo`` (FP8 in NVIDIA's FP8 and NVFP4
Llama checkpoints), so its quantised rows run an fp8 KV cache; vLLM's and SGLang's ``auto`` keep
the model dtype."""
FP4_CHECKPOINT = {"gpt-oss-120b": "mxfp4"}
"""Models published only in an fp4 format of their own: their fp4 rows (labelled nvfp4 in the csv)
run that checkpoint (gpt-oss: mxfp4 experts, bf16 elsewhere)."""


def csv_path() -> Path:
    root = kd.package_root()
    if root is None:
        raise kd.KernelDbUnavailable("the measured runs come with the kernel database: pip install 'servesim[kernels-db]'")
    return root / "systems" / "silicon_sample.csv"


def bucket(c: int) -> str:
    return next(name for lo, hi, name in BUCKETS if lo <= c <= hi)


def catalog_model(model_path: str) -> str | None:
    """The catalog id of a Hugging Face repo id (``meta-llama/Llama-3.1-8B-Instruct`` ->
    ``llama-3.1-8b``), or None."""
    from sim.catalog import CatalogError, get_model, list_models

    base = model_path.split("/")[-1].lower()
    for card in list_models():
        if card.hf_repo and card.hf_repo.lower() == model_path.lower():
            return card.id
    cands = [base]
    stripped = base
    changed = True
    while changed:
        changed = False
        for s in SUFFIXES:
            if stripped.endswith(s):
                stripped, changed = stripped[: -len(s)], True
                cands.append(stripped)
    for name in cands:
        try:
            return get_model(name).id
        except CatalogError:
            continue
    return None


HARDWARE = {v: k for k, v in kd.SYSTEMS.items()}


def select(df: pd.DataFrame, *, models=None, systems=None, backends=None, mode: str = "agg",
           limit: int | None = None) -> tuple[pd.DataFrame, Counter]:
    """The rows to replay (with ``model``, ``hardware``, ``dtype``, ``concurrency`` columns added)
    and the skipped ones counted by reason. Filters take catalog ids or the csv's own names."""
    df = df[df["mode"] == mode]
    skipped: Counter = Counter()
    ids = df["model_path"].map(lambda p: catalog_model(str(p)))
    df = df.assign(model=ids, hardware=df["system"].map(HARDWARE))
    if systems:
        want = {HARDWARE.get(s, s) for s in systems}
        df = df[df["hardware"].isin(want) | df["system"].isin(systems)]
    if backends:
        df = df[df["backend"].isin(backends)]
    if models:
        df = df[df["model"].isin(models) | df["model_path"].isin(models)]
    keep = []
    for i, r in df.iterrows():
        if r["model"] is None:
            skipped[f"model not in the catalog ({r['model_path']})"] += 1
        elif r["hardware"] is None or (isinstance(r["hardware"], float) and math.isnan(r["hardware"])):
            skipped[f"system not in the catalog ({r['system']})"] += 1
        elif (r.get("attention_dp_size") or 1) > 1 or (r.get("moe_ep_size") or 1) > 1:
            skipped["attention data parallelism or expert parallelism"] += 1
        elif (r.get("pp_size") or 1) != 1:
            skipped["pipeline parallelism"] += 1
        elif _is_moe(r["model"]) and _moe_split(r) not in (None, r["tp_size"]):
            skipped["MoE tensor parallelism differs from attention TP"] += 1
        else:
            keep.append(i)
    df = df.loc[keep]
    prec = df["precision"].where(df["precision"].notna(), "bf16")
    native = df["model"].map(FP4_CHECKPOINT)
    prec = prec.replace(PRECISION).where(~((prec == "fp4") & native.notna()), native)
    df = df.assign(dtype=prec.astype(str), concurrency=df["batch_size"].astype(int), tp=df["tp_size"].astype(int))
    if limit is not None:
        df = df.head(limit)
    return df.reset_index(drop=True), skipped


def _is_moe(model_id: str) -> bool:
    from sim.catalog import get_model

    return get_model(model_id).is_moe


def _moe_split(r) -> float | None:
    """moe_tp x moe_ep of a row, None where the csv leaves them empty (dense models)."""
    tp, ep = r.get("moe_tp_size"), r.get("moe_ep_size")
    if tp is None or ep is None or (isinstance(tp, float) and math.isnan(tp)):
        return None
    return tp * (1 if isinstance(ep, float) and math.isnan(ep) else ep)


def row_config(r, cost_model: str) -> dict:
    c = int(r["concurrency"])
    kv = {"dtype": "fp8"} if r["backend"] in FP8_KV_BACKENDS and r["dtype"] in ("fp8", "nvfp4") else {}
    return {
        "model": r["model"], "hardware": r["hardware"], "dtype": r["dtype"], "kv": kv,
        "parallelism": {"tp": int(r["tp"])},
        "scheduler": {"name": "vllm_v1", "max_num_seqs": max(256, c)},
        "workload": {"num_requests": c, "prompt": {"kind": "fixed", "value": int(r["isl"])},
                     "output": {"kind": "fixed", "value": int(r["osl"])},
                     "closed_loop": {"clients": c, "think_time_s": 0.0, "think": "fixed"}},
        "cost": {"model": cost_model, "framework": r["backend"]},
        "output": {"plots": False, "progress": False, "step_records": False},
        "seed": 0,
    }


def _ramp(cfg) -> float:
    """The predicted duration of one request at this concurrency: prefill + osl decode steps."""
    from sim.catalog import get_hardware, get_model
    from sim.cost import make_cost_model
    from sim.types import BatchShape

    wl = cfg.workload
    c, isl, osl = wl.closed_loop.clients, wl.prompt.value, wl.output.value
    cm = make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))
    prefill = cm.step_time(BatchShape((min(isl, 8192),), (0,), tp=cfg.parallelism.tp)).total * math.ceil(isl / 8192)
    decode = cm.decode_step(c, c * (isl + osl // 2), isl + osl).total
    return prefill + osl * decode


RAMPS = ("none", "request")


def replay(task: tuple) -> dict:
    """One row under one cost model: {ttft_ms, tpot_ms} predicted, or {error}. ``task`` is
    (row dict, cost model, rounds[, extra ``key=value`` overrides[, ramp]]); ramp ``request``
    staggers the clients' first requests over one predicted request duration, ``none`` starts
    them all at t = 0 (as ``vllm bench serve --max-concurrency N`` does)."""
    row, cost_model, rounds = task[:3]
    extra = list(task[3]) if len(task) > 3 else []
    ramp_kind = task[4] if len(task) > 4 else "none"
    from sim.api import simulate
    from sim.config import load_config
    from sim.errors import ServesimError

    try:
        cfg = load_config(row_config(row, cost_model), extra)
        c = int(row["concurrency"])
        ramp = _ramp(cfg) if ramp_kind == "request" else 0.0
        cfg = load_config(cfg, [f"workload.num_requests={rounds * c}",
                                f"workload.closed_loop.ramp_up_s={ramp}"])
        res = simulate(cfg, plots=False, progress=False)
    except (ServesimError, ValueError) as e:
        return {"error": str(e).splitlines()[0][:200]}
    req = res.requests
    req = req[req["status"] == "finished"]
    if rounds >= 3:
        req = req[(req["request_id"] >= c) & (req["request_id"] < (rounds - 1) * c)]
    if not len(req):
        return {"error": "no request finished (rejected: does the context fit?)"}
    return {"ttft_ms": float(req["ttft_s"].mean() * 1e3), "tpot_ms": float(req["tpot_s"].mean() * 1e3),
            "cost_source": res.summary["sim"]["cost_model"]}


def ape(pred: pd.Series, meas: pd.Series) -> pd.Series:
    return (pred - meas).abs() / meas


def score(pred: pd.DataFrame, models: list[str]) -> dict:
    """Median and p90 APE of TTFT and TPOT, overall and by (system, backend, concurrency bucket)."""
    out: dict = {}
    for cm in models:
        d = pred[pred[f"{cm}_tpot_ms"].notna()]
        d = d.assign(ttft_ape=ape(d[f"{cm}_ttft_ms"], d["silicon_ttft_ms"]),
                     tpot_ape=ape(d[f"{cm}_tpot_ms"], d["silicon_tpot_ms"]),
                     tpot_ratio=d[f"{cm}_tpot_ms"] / d["silicon_tpot_ms"])

        def stats(g):
            return {"rows": int(len(g)),
                    "ttft_ape_median": float(g["ttft_ape"].median()), "ttft_ape_p90": float(g["ttft_ape"].quantile(0.9)),
                    "tpot_ape_median": float(g["tpot_ape"].median()), "tpot_ape_p90": float(g["tpot_ape"].quantile(0.9)),
                    "tpot_ratio_median": float(g["tpot_ratio"].median())}

        groups = []
        for (s, b, k), g in d.groupby(["system", "backend", "bucket"], sort=True):
            groups.append({"system": s, "backend": b, "concurrency": k, **stats(g)})
        out[cm] = {"overall": stats(d) if len(d) else {"rows": 0}, "groups": groups}
    return out


def print_table(scores: dict) -> None:
    for cm, sc in scores.items():
        print(f"\n{cm}: APE of the mean TTFT and TPOT per row (median / p90)")
        print(f"{'system':<10}{'backend':<8}{'conc':>7}{'rows':>6}{'TTFT med':>10}{'p90':>8}{'TPOT med':>10}{'p90':>8}")
        for g in sc["groups"]:
            print(f"{g['system']:<10}{g['backend']:<8}{g['concurrency']:>7}{g['rows']:>6}"
                  f"{100 * g['ttft_ape_median']:>9.1f}%{100 * g['ttft_ape_p90']:>7.1f}%"
                  f"{100 * g['tpot_ape_median']:>9.1f}%{100 * g['tpot_ape_p90']:>7.1f}%")
        o = sc["overall"]
        if o.get("rows"):
            print(f"{'all':<25}{o['rows']:>6}{100 * o['ttft_ape_median']:>9.1f}%{100 * o['ttft_ape_p90']:>7.1f}%"
                  f"{100 * o['tpot_ape_median']:>9.1f}%{100 * o['tpot_ape_p90']:>7.1f}%"
                  f"   (TPOT predicted/measured median {o['tpot_ratio_median']:.2f})")


def plot(pred: pd.DataFrame, models: list[str], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    colors = {"roofline": "tab:orange", "kerneldb": "tab:blue"}
    for ax, metric, name in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "tpot_ms", "TPOT (ms)")):
        meas = pred[f"silicon_{metric}"]
        lo, hi = meas.min(), meas.max()
        for cm in models:
            p = pred[f"{cm}_{metric}"]
            ax.scatter(meas, p, s=9, alpha=0.6, label=cm, color=colors.get(cm))
            lo, hi = min(lo, p.min()), max(hi, p.max())
        if np.isfinite(lo) and lo > 0:
            ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, ls="--", label="exact")
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel(f"measured {name}"), ax.set_ylabel(f"predicted {name}")
        ax.set_title(f"{name.split()[0]}: {len(pred)} measured runs")
        ax.legend(fontsize=8)
    fig.suptitle("servesim vs aiconfigurator-core silicon_sample.csv (closed-loop replays)")
    fig.tight_layout()
    paths = [out / "predicted_vs_measured.png", out / "predicted_vs_measured.svg"]
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths
