"""Replaying the measured serving runs of aiconfigurator-core's ``silicon_sample.csv`` as
closed-loop benchmarks, and scoring the simulator's TTFT and TPOT against them
(``servesim validate-silicon``; docs/kernel_database.md).

Each aggregated row is a benchmark at fixed concurrency: ``batch_size`` concurrent clients (equal
to the ``silicon_concurrency`` recorded in ``silicon_data_source``; rows where they differ outside
attention data parallelism are skipped, ``_recorded_concurrency``), no think time.
The replay reproduces the benchmark client each row was measured with (``Client``,
``client_for``): how many requests it sends (10 per concurrent slot), that all slots start
together (the first wave is one burst; the last drains), the length distribution
(``--random-range-ratio``), and which requests its mean covers (all of them: the burst counts).
``rounds`` waves are simulated: the burst, the drain, and steady waves that stand for the
benchmark's other steady waves (``blend``). The serving front end's round trip (``think_s``:
HTTP, tokenisation, streaming) is added to each TTFT and is the mean exponential gap between a
response and the client's next request, so a new request misses the engine step already
started, as it does on a real server.

Row -> config: ``model_path`` -> catalog model through its aliases (an ``-Instruct``, ``-FP8``
or ``-NVFP4`` suffix names the same architecture); ``system`` -> catalog GPU
(``kerneldb_data.SYSTEMS``); ``precision`` -> ``dtype`` (empty: bf16, the checkpoint's dtype;
fp4: nvfp4, as ``gemm_quant_mode`` says, except gpt-oss, published only as mxfp4); ``backend`` ->
``cost.framework`` (the database's newest version of it; the row's own version is recorded, not
matched) and the framework's scheduler and KV settings (``server``: TRT-LLM's fp8 / nvfp4 rows
run an fp8 KV cache, as its ``auto`` KV dtype follows the ModelOpt checkpoint); ``tp_size`` ->
``parallelism.tp``; ``max_num_seqs`` at least the concurrency. Rows that cannot be replayed are
counted by reason.

Disaggregated rows (``mode`` disagg, ``select_disagg``): each side's workers and placement
(``disagg_placement``) become a prefill pool and a decode pool (``disagg_pools``) on the row's
GPU, with the KV link of the cards; the same client, the framework's default settings (the
InferenceMAX launch scripts are single-node aggregated ones: ``launch_script`` returns None) with
each pool's launch limits (``disagg_limits``: the recipes' decode batch, aiconfigurator's
generator rules) and the closed loop at the row's concurrency; the client's first token streams
from the decode worker (``disagg_run``). Rows whose worker counts the csv does not record are
counted apart.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from sim.cost import kerneldb_data as kd

BUCKETS = ((1, 8, "1-8"), (9, 32, "9-32"), (33, 127, "33-127"), (128, 10**9, "128+"))
SUFFIXES = ("-instruct", "-fp8", "-nvfp4", "-fp4")
PRECISION = {"fp4": "nvfp4"}  # the csv's fp4 rows are NVFP4 (gemm_quant_mode nvfp4)
FP4_CHECKPOINT = {"gpt-oss-120b": "mxfp4"}
"""Models published only in an fp4 format of their own: their fp4 rows (labelled nvfp4 in the csv)
run that checkpoint (gpt-oss: mxfp4 experts, bf16 elsewhere)."""


def csv_path() -> Path:
    root = kd.package_root()
    if root is None:
        raise kd.KernelDbUnavailable("the measured runs come with the kernel database: pip install aiconfigurator-core==0.12.0, a dependency of servesim")
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


def _identified(df: pd.DataFrame, models, systems, backends) -> pd.DataFrame:
    """``df`` with its catalog ``model`` and ``hardware`` columns, filtered (catalog ids or the
    csv's own names)."""
    ids = df["model_path"].map(lambda p: catalog_model(str(p)))
    # InferenceMAX's DeepSeek-R1 runs (model prefix dsr1) that the database dump labels DeepSeek-V3
    ids = ids.where(~(df["id"].astype(str).str.startswith("dsr1_") & df["silicon_data_source"].astype(str)
                      .str.startswith(INFERENCEMAX_SOURCES) & (ids == "deepseek-v3")), "deepseek-r1")
    df = df.assign(model=ids, hardware=df["system"].map(HARDWARE))
    if systems:
        want = {HARDWARE.get(s, s) for s in systems}
        df = df[df["hardware"].isin(want) | df["system"].isin(systems)]
    if backends:
        df = df[df["backend"].isin(backends)]
    if models:
        df = df[df["model"].isin(models) | df["model_path"].isin(models)]
    return df


def _dtypes(df: pd.DataFrame) -> pd.Series:
    """The weight dtype each row runs (``PRECISION``, ``FP4_CHECKPOINT``)."""
    prec = df["precision"].where(df["precision"].notna(), "bf16")
    native = df["model"].map(FP4_CHECKPOINT)
    return prec.replace(PRECISION).where(~((prec == "fp4") & native.notna()), native).astype(str)


def _uncatalogued(r) -> str | None:
    """The skip reason of a row whose model or system the catalog lacks, else None."""
    if not isinstance(r["model"], str):  # None, or NaN once pandas has seen no id at all
        return f"model not in the catalog ({r['model_path']})"
    if r["hardware"] is None or (isinstance(r["hardware"], float) and math.isnan(r["hardware"])):
        return f"system not in the catalog ({r['system']})"
    return None


def select(df: pd.DataFrame, *, models=None, systems=None, backends=None, mode: str = "agg",
           limit: int | None = None) -> tuple[pd.DataFrame, Counter]:
    """The rows to replay (with ``model``, ``hardware``, ``dtype``, ``concurrency`` columns added)
    and the skipped ones counted by reason. Filters take catalog ids or the csv's own names.
    ``mode`` ``disagg``: the disaggregated rows (``select_disagg``)."""
    if mode == "disagg":
        return select_disagg(df, models=models, systems=systems, backends=backends, limit=limit)
    df = _identified(df[df["mode"] == mode], models, systems, backends)
    skipped: Counter = Counter()
    places = [placement(r) for _, r in df.iterrows()]
    df = df.assign(concurrency=[concurrency(r) for _, r in df.iterrows()],
                   tp=[t for t, _, _ in places], ep=[e for _, e, _ in places], dp=[d for _, _, d in places])
    df, dups = deduplicate(df)
    if dups:
        skipped["duplicate of another row's measurement (same configuration, same measured TTFT and TPOT)"] += dups
    keep = []
    for i, r in df.iterrows():
        if _uncatalogued(r):
            skipped[_uncatalogued(r)] += 1
        elif not attention_dp(r) and _recorded_concurrency(r) not in (None, r["batch_size"]):
            skipped["batch size differs from the recorded concurrency (silicon_concurrency)"] += 1
        elif (r.get("pp_size") or 1) != 1:
            skipped["pipeline parallelism"] += 1
        elif not attention_dp(r) and _is_moe(r["model"]) and _moe_split(r) not in (None, r["tp_size"]):
            skipped["MoE tensor parallelism differs from attention TP"] += 1
        else:
            keep.append(i)
    df = df.loc[keep]
    df = df.assign(dtype=_dtypes(df), speculative=[mtp_run(r) for _, r in df.iterrows()])
    if limit is not None:
        df = df.head(limit)
    return df.reset_index(drop=True), skipped


# ------------------------------------------------------------------ disaggregated rows

SIDES = ("prefill", "decode")
DISAGG_MEASUREMENT = ("measured_model", "system", "backend", "precision", "isl", "osl", "concurrency",
                      "silicon_ttft_ms", "silicon_tpot_ms")
"""What identifies one disaggregated measurement: the csv holds many twice, InferenceMAX's result files
(``2026-03-25.csv``, ``2026-04-06.csv``, without worker counts) and the database dump (with them) recording
the same run with the same measured TTFT and TPOT."""


def disagg_placement(r, side: str) -> tuple[int, int, int, int] | None:
    """(workers, attention tp, ep, attention-DP ranks) of one side (``prefill`` or ``decode``) of
    a disaggregated row, None when the csv does not record its worker count.

    The disaggregated rows that record workers (the database dump and aiconfigurator's gap
    analysis) record per worker ``{side}_tp_size`` = the attention TP of one rank,
    ``{side}_attention_dp_size`` = its ranks, ``{side}_moe_ep_size`` = the experts' EP over the
    worker's tp x dp GPUs (``{side}_moe_tp_size`` x ``{side}_moe_ep_size`` = those GPUs on every such
    MoE row; 0 or empty for dense models): the meaning of ``parallelism`` tp, dp and ep."""
    workers = _num(r, f"{side}_num_workers", 0)
    if workers < 1:
        return None
    return workers, _num(r, f"{side}_tp_size"), _num(r, f"{side}_moe_ep_size"), _num(r, f"{side}_attention_dp_size")


def disagg_concurrency(r) -> int | None:
    """The benchmark's concurrent clients: ``silicon_concurrency``; where the provenance records
    none (three of aiconfigurator's gap-analysis rows), ``decode_batch_size`` x decode workers x
    decode attention-DP ranks, the product that equals ``silicon_concurrency`` on every row that
    records both."""
    rec = _recorded_concurrency(r)
    if rec is not None:
        return rec
    workers = _num(r, "decode_num_workers", 0)
    batch = _num(r, "decode_batch_size", 0)
    return batch * workers * _num(r, "decode_attention_dp_size") if workers and batch else None


def _moe_split_problem(r, side: str) -> bool:
    """Whether a side's moe_tp x moe_ep differs from its worker's tp x attention-DP GPUs (asked of
    MoE models only: a dense model's rows carry 1 x 1 or 0 x 0 whatever its TP)."""
    mtp, mep = r.get(f"{side}_moe_tp_size"), r.get(f"{side}_moe_ep_size")
    if mtp is None or mep is None or (isinstance(mtp, float) and math.isnan(mtp)) or not mtp or not mep:
        return False
    return int(mtp) * int(mep) != _num(r, f"{side}_tp_size") * _num(r, f"{side}_attention_dp_size")


def select_disagg(df: pd.DataFrame, *, models=None, systems=None, backends=None,
                  limit: int | None = None) -> tuple[pd.DataFrame, Counter]:
    """The disaggregated rows to replay, each measurement once (a copy that records worker counts
    kept over one that does not), with ``model``, ``hardware``, ``dtype``, ``concurrency`` and per
    side ``{p,d}_{workers,tp,ep,dp}`` columns (``tp``, ``ep``, ``dp``: the decode side's, for the
    report's layout label), and the skipped ones counted by reason."""
    df = _identified(df[df["mode"] == "disagg"], models, systems, backends)
    skipped: Counter = Counter()
    df = df.assign(concurrency=[disagg_concurrency(r) for _, r in df.iterrows()],
                   _workers=df["prefill_num_workers"].notna() & df["decode_num_workers"].notna())
    # a measurement's copy with worker counts first, then the csv's order
    df = df.sort_values("_workers", ascending=False, kind="stable")
    df = df.assign(measured_model=df["model"].where(df["model"].notna(), df["model_path"]),
                   _ttft=df["silicon_ttft_ms"].round(6), _tpot=df["silicon_tpot_ms"].round(6))
    key = [c if c not in ("silicon_ttft_ms", "silicon_tpot_ms") else {"silicon_ttft_ms": "_ttft",
                                                                     "silicon_tpot_ms": "_tpot"}[c]
           for c in DISAGG_MEASUREMENT]
    dup = df.duplicated(key, keep="first")
    if dup.any():
        skipped["duplicate of another row's measurement (same configuration, same measured TTFT and TPOT)"] += int(dup.sum())
    df = df[~dup].sort_index().drop(columns=["measured_model", "_ttft", "_tpot", "_workers"])
    keep, cols = [], {k: [] for k in ("p_workers", "p_tp", "p_ep", "p_dp", "d_workers", "d_tp", "d_ep", "d_dp")}
    for i, r in df.iterrows():
        places = [disagg_placement(r, side) for side in SIDES]
        if _uncatalogued(r):
            skipped[_uncatalogued(r)] += 1
        elif None in places:
            skipped["worker counts not recorded (InferenceMAX's result files record each pool's parallelism, "
                    "not how many prefill and decode workers ran)"] += 1
        elif any((_num(r, f"{side}_pp_size")) != 1 for side in SIDES):
            skipped["pipeline parallelism"] += 1
        elif _is_moe(r["model"]) and any(_moe_split_problem(r, side) for side in SIDES):
            skipped["MoE split (moe_tp x moe_ep) differs from a worker's GPUs (tp x attention DP)"] += 1
        elif r["concurrency"] is None or (isinstance(r["concurrency"], float) and math.isnan(r["concurrency"])):
            skipped["no recorded concurrency"] += 1
        else:
            keep.append(i)
            for tag, (w, tp, ep, dp) in zip("pd", places):
                for k, v in (("workers", w), ("tp", tp), ("ep", ep), ("dp", dp)):
                    cols[f"{tag}_{k}"].append(v)
    df = df.loc[keep].assign(**cols)
    df = df.assign(concurrency=df["concurrency"].astype(int), tp=df["d_tp"], ep=df["d_ep"], dp=df["d_dp"],
                   dtype=_dtypes(df))
    df = df.assign(speculative=["mtp" if disagg_mtp_drafts(r) else "" for _, r in df.iterrows()])
    if limit is not None:
        df = df.head(limit)
    return df.reset_index(drop=True), skipped


def disagg_mtp_drafts(r) -> int | None:
    """MTP draft tokens of a disaggregated row its recipes name as an MTP run (InferenceMAX's
    DeepSeek-R1 TRT-LLM rows, ``disagg_launch.recipe_mtp_drafts``), else None: such a row replays
    with ``speculative: {method: mtp}`` on its decode pool (``row_config``), scored apart."""
    from sim.compare import disagg_launch as dl

    if r.get("backend") != "trtllm" or not inferencemax(r):
        return None
    side = {tag: (int(r[f"{tag}_workers"]), int(r[f"{tag}_tp"]), int(r[f"{tag}_dp"])) for tag in "pd"}
    return dl.recipe_mtp_drafts(r["model"], r["system"], r["precision"], int(r["isl"]), int(r["osl"]), side["p"],
                                side["d"], int(r["concurrency"]))


def disagg_limits(r) -> tuple[dict, dict]:
    """(prefill, decode) scheduler limits of a disaggregated row's workers as launched
    (``sim.compare.disagg_launch``): for aiconfigurator's gap-analysis rows, what its generator
    writes for the row's ``prefill_batch_size`` and ``decode_batch_size``; for InferenceMAX's
    DeepSeek-R1 TRT-LLM rows, the decode ``max_batch_size`` of the recipe the row's layout and
    concurrency name; else none ({}: the framework's defaults, ``server``)."""
    from sim.compare import disagg_launch as dl

    if aiconfigurator_generated(r):
        return dl.generated_limits(r["backend"], _num(r, "prefill_batch_size"), _num(r, "decode_batch_size"),
                                   int(r["isl"]))
    if r.get("backend") == "trtllm" and inferencemax(r):
        side = {tag: (int(r[f"{tag}_workers"]), int(r[f"{tag}_tp"]), int(r[f"{tag}_dp"])) for tag in "pd"}
        batch = dl.recipe_decode_batch(r["model"], r["system"], r["precision"], int(r["isl"]), int(r["osl"]), side["p"],
                                       side["d"], int(r["concurrency"]))
        if batch is not None:
            return {}, {"max_num_seqs": batch}
    return {}, {}


def disagg_pools(r) -> list[dict]:
    """The ``cluster.pools`` of a disaggregated row: a prefill pool of ``prefill_num_workers``
    replicas and a decode pool of ``decode_num_workers``, each with its side's tp, ep and dp, on
    the row's GPU, and its workers' launch limits (``disagg_limits``); the KV link the cards'
    (``sim.cluster.pools.link_bytes_per_s``). InferenceMAX's DeepSeek-R1 TRT-LLM decode workers price
    their routed experts from the trtllm-gen rows their MoE backend runs (``disagg_launch.decode_moe_table``,
    a pool's ``moe_table``); the SGLang ones whose recipes run DeepEP low-latency exchange their tokens
    with it (``disagg_launch.decode_moe_dispatch``, a pool's ``moe_dispatch``)."""
    from sim.compare import disagg_launch as dl

    limits = dict(zip(SIDES, disagg_limits(r)))
    tables = {"prefill": None, "decode": dl.decode_moe_table(r["model"], r["system"], r["precision"], int(r["d_dp"]))
              if r.get("backend") == "trtllm" and inferencemax(r) else None}
    dispatch = {"prefill": None, "decode": dl.decode_moe_dispatch(r["model"], r["system"], r["precision"],
                                                                 (int(r["d_tp"]), int(r["d_dp"]), int(r["d_ep"])))
                if r.get("backend") == "sglang" and inferencemax(r) else None}

    def one(tag, side):
        par = {"tp": int(r[f"{tag}_tp"]), "ep": int(r[f"{tag}_ep"]), "dp": int(r[f"{tag}_dp"])}
        return {"name": side, "hardware": r["hardware"], "role": side, "replicas": int(r[f"{tag}_workers"]),
                "parallelism": par, **({"scheduler": limits[side]} if limits[side] else {}),
                **({"moe_table": tables[side]} if tables[side] else {}),
                **({"moe_dispatch": dispatch[side]} if dispatch[side] else {})}

    return [one("p", "prefill"), one("d", "decode")]


MEASUREMENT = ("measured_model", "system", "backend", "precision", "mode", "isl", "osl", "concurrency", "tp", "ep", "dp", "pp_size",
               "silicon_ttft_ms", "silicon_tpot_ms")
"""What identifies one measurement, in the placement it ran with (``placement``, ``concurrency``), the model
by its catalog id where it has one (the database dump labels some DeepSeek-R1 runs DeepSeek-V3): the csv
holds some twice (InferenceMAX's DeepSeek-R1, gpt-oss, GLM-5 and MiniMax-M2.5 runs in both ``2026-03-25.csv``
and ``2026-04-06.csv``, some also in a database dump), with the same configuration and the same measured TTFT
and TPOT but different provenance strings, and for the expert- and attention-data-parallel runs different
encodings of the same placement (``2026-04-06.csv`` records TP x EP where ``2026-03-25.csv`` records the GPUs)."""


def deduplicate(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows with each measurement once (its first row in the csv), and how many copies were dropped."""
    df = df.assign(measured_model=df["model"].where(df["model"].notna(), df["model_path"])
                   if "model" in df.columns else df["model_path"])
    cols = [c for c in MEASUREMENT if c in df.columns]
    dup = df.duplicated(cols, keep="first")
    df = df.drop(columns="measured_model")
    return df[~dup], int(dup.sum())


def _is_moe(model_id: str) -> bool:
    from sim.catalog import get_model

    return get_model(model_id).is_moe


def _num(r, key, default=1) -> int:
    v = r.get(key)
    return default if v is None or (isinstance(v, float) and math.isnan(v)) or v <= 0 else int(v)


def attention_dp(r) -> bool:
    """Whether a row ran with attention data parallelism (``attention_dp_size`` > 1)."""
    return _num(r, "attention_dp_size") > 1


def placement(r) -> tuple[int, int, int]:
    """(attention tp, expert-parallel degree, attention-DP ranks) a row ran with.

    Without attention DP: InferenceMAX's expert-parallel rows record ``tp_size`` as TP x EP
    (``..._tp8_ep8_...`` has ``tp_size`` 64, ``moe_tp_size`` 8, ``moe_ep_size`` 8: eight GPUs of
    one node): the TP and EP of the row's id when it names them and their product is ``tp_size``;
    else, for the same square pattern (``moe_tp_size`` = ``moe_ep_size`` > 1, ``tp_size`` their
    product; the database dump's copies, whose ids name no TP), TP = EP = ``moe_ep_size``; else
    ``tp_size`` and ``moe_ep_size`` as recorded.

    With attention DP (``attention_dp_size`` > 1) every GPU is one rank of attention TP 1, as the
    launch scripts run them (InferenceMAX ``benchmarks/``): vLLM ``--tensor-parallel-size=1
    --data-parallel-size=$TP --enable-expert-parallel`` (ranks = EP = the GPUs; the database
    dump records ``tp_size`` = the GPUs and ``moe_ep_size`` = TP x EP of its config), TRT-LLM
    ``trtllm-serve --tp_size=$TP --ep_size=$EP_SIZE`` with ``enable_attention_dp: true`` (ranks =
    TP GPUs, experts EP ways, each ``TP / EP`` wide). TRT-LLM's GPUs and EP: the id's
    ``tpN[_0]_epM[_0]`` when it names them; else ``2026-04-06.csv``'s and the dump's encoding
    (``moe_tp_size`` = the GPUs, ``moe_ep_size`` = EP, ``attention_dp_size`` their product);
    else ``2026-03-25.csv``'s (``attention_dp_size`` = the GPUs, ``moe_ep_size`` = EP)."""
    import re

    tp, mtp, mep, dp = _num(r, "tp_size"), _num(r, "moe_tp_size"), _num(r, "moe_ep_size"), _num(r, "attention_dp_size")
    if dp > 1:
        if r.get("backend") == "vllm":
            return 1, tp, tp
        m = re.search(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_", str(r.get("id", "")))
        if m:
            gpus, ep = int(m.group(1)), int(m.group(2))
        elif mtp > 1 and dp == mtp * mep:
            gpus, ep = mtp, mep
        else:
            gpus, ep = dp, mep
        return 1, ep, gpus
    m = re.search(r"_tp(\d+)_ep(\d+)_", str(r.get("id", "")))
    if m and int(m.group(2)) > 1 and int(m.group(1)) * int(m.group(2)) == tp:
        return int(m.group(1)), int(m.group(2)), 1
    if mep > 1 and mtp == mep and tp == mtp * mep:
        return mep, mep, 1
    return tp, mep, 1


def concurrency(r) -> int:
    """The benchmark's concurrent clients: ``batch_size``, except with attention DP, where
    ``batch_size`` is one rank's share (or, in ``2026-04-06.csv``, the clients over TP x EP) and
    ``silicon_concurrency`` is the clients."""
    if attention_dp(r):
        rec = _recorded_concurrency(r)
        if rec is not None:
            return rec
        return int(r["batch_size"]) * _num(r, "attention_dp_size")
    return int(r["batch_size"])


MTP_SOURCE = ("InferenceMAX .github/configs/nvidia-master.yaml (SemiAnalysisAI/InferenceX, commit 0004cf5f), "
              "entries dsr1-{fp4,fp8}-b200-trt[-mtp] and dsr1-fp8-h200-trt[-mtp], with benchmarks/dsr1_*_trt_mtp.sh")
"""Where the MTP runs of InferenceMAX's DeepSeek-R1 TRT-LLM rows are read from."""
DSR1_TRT_SEARCH = {
    # (system, precision, isl, osl) -> (search space without speculation, with MTP); entries
    # (tp, ep, dp-attn, first concurrency, last concurrency), concurrencies the powers of two between
    ("b200_sxm", "fp4", 1024, 1024): (
        ((4, 1, False, 4, 16), (4, 4, True, 256, 256), (8, 1, False, 4, 4), (8, 8, False, 64, 64), (8, 8, True, 128, 256)),
        ((4, 1, False, 4, 8), (4, 4, True, 256, 256), (8, 1, False, 4, 4), (8, 1, False, 128, 128),
         (8, 8, False, 32, 128), (8, 8, True, 32, 64))),
    ("b200_sxm", "fp4", 1024, 8192): (
        ((4, 1, False, 4, 16), (4, 4, True, 256, 256), (8, 1, False, 4, 4), (8, 8, False, 64, 64), (8, 8, True, 128, 256)),
        ((4, 1, False, 16, 16), (4, 4, False, 8, 8), (4, 4, True, 256, 256), (8, 1, False, 4, 8),
         (8, 8, False, 32, 64), (8, 8, True, 128, 256))),
    ("b200_sxm", "fp4", 8192, 1024): (
        ((4, 1, False, 4, 32), (4, 4, False, 32, 32), (4, 4, True, 256, 256), (8, 1, False, 4, 4), (8, 8, True, 128, 256)),
        ((4, 1, False, 4, 16), (4, 4, False, 32, 32), (4, 4, True, 256, 256), (8, 1, False, 4, 4), (8, 8, True, 64, 256))),
    ("b200_sxm", "fp8", 1024, 1024): (
        ((8, 1, False, 64, 128), (4, 1, False, 8, 16), (8, 1, False, 4, 8)),
        ((8, 1, False, 4, 128), (8, 8, True, 256, 256))),
    ("b200_sxm", "fp8", 1024, 8192): (
        ((8, 8, True, 256, 256), (8, 1, False, 4, 128)),
        ((8, 1, False, 4, 64), (8, 8, True, 128, 256))),
    ("b200_sxm", "fp8", 8192, 1024): (
        ((8, 1, False, 64, 256), (4, 1, False, 8, 32), (8, 1, False, 4, 8)),
        ((8, 1, False, 4, 256),)),
    ("h200_sxm", "fp8", 1024, 1024): (
        ((8, 8, False, 4, 64),),
        ((8, 8, False, 4, 64), (8, 8, True, 128, 256))),
    ("h200_sxm", "fp8", 1024, 8192): (
        ((8, 8, False, 4, 64),),
        ((8, 8, False, 4, 128), (8, 8, True, 256, 256))),
    ("h200_sxm", "fp8", 8192, 1024): (
        ((8, 8, False, 4, 32), (8, 8, True, 64, 64)),
        ((8, 8, False, 4, 32), (8, 8, True, 64, 256))),
}
"""The search spaces of InferenceMAX's single-node DeepSeek-R1 TRT-LLM entries (``MTP_SOURCE``):
which (TP, EP, attention DP, concurrency) it measured without speculation and with MTP."""
DSR1_TRT_IMAGES = {"b200_sxm": ("1.2.0rc6.post2", "1.2.0rc6.post3"), "h200_sxm": ("1.1.0rc2.post2", "1.1.0rc2.post2")}
"""The TRT-LLM release each of those entries runs (without speculation, with MTP)."""


def _in_space(space, gpus: int, ep: int, dp: bool, c: int) -> bool:
    return any(t == gpus and e == ep and d == dp and lo <= c <= hi and c & (c - 1) == 0 for t, e, d, lo, hi in space)


def mtp_run(r) -> str:
    """Whether a row was measured with MTP speculative decoding, read from InferenceMAX's launch
    configuration (``MTP_SOURCE``): ``mtp`` where the row's TRT-LLM release is the one the ``-mtp``
    entry runs and its placement and concurrency lie in that entry's search space, and not also
    in the other entry's with its release; ``none`` the other way round; ``unknown`` where the
    configuration cannot tell: in both (H200: both entries run 1.1.0rc2.post2), in neither (an
    older release or search space: the configuration of its day was not read; a row without a
    release). ``""`` for rows of other models, frameworks or provenance: only InferenceMAX's
    DeepSeek-R1 TRT-LLM rows (its ``dsr1`` runs, some of which the database dump labels
    DeepSeek-V3) apply."""
    if not (r.get("backend") == "trtllm" and inferencemax(r)
            and (r.get("model") == "deepseek-r1" or str(r.get("id", "")).startswith("dsr1_"))):
        return ""
    key = (r.get("system"), r.get("precision"), int(r["isl"]), int(r["osl"]))
    if key not in DSR1_TRT_SEARCH:
        return "unknown"
    stp, mtp = DSR1_TRT_SEARCH[key]
    dp = int(r.get("dp", 1) or 1)
    gpus = int(r["tp"]) * dp
    point = (gpus, int(r.get("ep", 1) or 1), dp > 1, int(r["concurrency"]))
    plain, spec = DSR1_TRT_IMAGES[key[0]]
    version = str(r.get("backend_version", ""))
    runs = [name for name, space, image in (("mtp", mtp, spec), ("none", stp, plain))
            if version == image and _in_space(space, *point)]
    return runs[0] if len(runs) == 1 else "unknown"


MTP_KINDS = {"mtp": "DeepSeek-R1 TRT-LLM rows measured with MTP (replayed with it)",
             "none": "DeepSeek-R1 TRT-LLM rows measured without speculation",
             "unknown": "DeepSeek-R1 TRT-LLM rows the launch configuration cannot tell (replayed without MTP)"}
"""``mtp_run``'s answers, as the report names them."""
MTP_TOKENS = {False: 3, True: 1}
"""Draft tokens per verification in InferenceMAX's ``dsr1_*_trt_mtp.sh`` (``num_nextn_predict_layers``:
3, or 1 with attention DP)."""


def _recorded_concurrency(r) -> int | None:
    """The ``silicon_concurrency`` of a row's provenance, None when it records none. Outside attention
    data parallelism (where ``batch_size`` is one rank's share) it equals ``batch_size`` except on
    27 rows of aiconfigurator's gap-analysis runs (Qwen3-32B on GB200 / B200, DeepSeek NVFP4,
    gpt-oss on H100; e.g. 288 clients, batch size 144), which a replay of ``batch_size`` clients on
    one engine would misread."""
    import re

    m = re.search(r"silicon_concurrency=(\d+)", str(r.get("silicon_data_source", "")))
    return int(m.group(1)) if m else None


def _moe_split(r) -> float | None:
    """moe_tp x moe_ep of a row, None where the csv leaves them empty (dense models)."""
    tp, ep = r.get("moe_tp_size"), r.get("moe_ep_size")
    if tp is None or ep is None or (isinstance(tp, float) and math.isnan(tp)):
        return None
    return tp * (1 if isinstance(ep, float) and math.isnan(ep) else ep)


@dataclass(frozen=True)
class Client:
    """How a benchmark client drives the engine, and what its TTFT / TPOT figures average.

    ``per_client`` x N requests are sent by N concurrent slots (``--max-concurrency N``): all N
    at t = 0, then a new one each time one finishes (no think time), so the first wave arrives
    as one burst and the last wave drains with fewer than N in flight. The reported figure is
    the mean over every request but the first ``warmup_per_client`` x N. Prompt and output
    lengths are uniform integers in [int(``range_ratio`` x L), L] (vLLM ``benchmark_serving.py
    --random-range-ratio``; 1.0: exactly L)."""

    name: str
    per_client: int
    warmup_per_client: int
    range_ratio: float
    about: str
    drain: bool = True


CLIENTS = {c.name: c for c in (
    Client("bench-serving", 10, 0, 0.8,
           "vLLM benchmark_serving.py as InferenceMAX runs it: --num-prompts 10N --max-concurrency N "
           "--request-rate inf --random-range-ratio 0.8 --ignore-eos; mean over all requests"),
    Client("fixed", 10, 0, 1.0,
           "fixed lengths, 10N requests from a burst at t = 0 (aiconfigurator's eval runners: "
           "genai-perf / bench_serving with 10 requests per concurrent user); mean over all requests"),
    Client("genai-perf", 10, 2, 1.0,
           "fixed lengths, 10N requests after a 2N-request warm-up that is not scored (aiconfigurator's "
           "genai-perf runner: --request-count 10N --warmup-request-count 2N); the burst is in the warm-up"),
    Client("steady", 3, 1, 1.0,
           "fixed lengths; the burst wave and the drain wave are left out (steady state only)", drain=False),
)}
INFERENCEMAX_SOURCES = ("source_file=2026-04-06.csv", "source_file=2026-03-25.csv", "db-dump/")
"""Provenance prefixes of InferenceMAX's runs in ``silicon_data_source``: its two result files and the
database dump that shares measurements with them (same configuration, same measured TTFT and TPOT)."""
LAUNCH_SCRIPTS = {"llama-3.1-70b": "70b", "deepseek-r1": "dsr1", "gpt-oss-120b": "gptoss"}
"""Catalog model -> the InferenceMAX launch scripts (``benchmarks/<name>_*.sh``) whose server settings
``server`` reproduces; the other models' rows run each framework's defaults."""
GAP_ANALYSIS_SOURCE = "/aic-auto-gap-analysis/"
"""Folder in ``silicon_data_source`` of aiconfigurator's gap-analysis runs (Llama-3.1-8B: TRT-LLM
1.0.0rc3 on H100, SGLang 0.5.6.post2 and vLLM 0.12.0 on H200): servers launched with the engine
settings aiconfigurator's generator writes for a configuration of batch size ``batch_size``
(``generated_engine``)."""
TOKENS_PER_BLOCK = 32  # aiconfigurator's generator rounds TRT-LLM's max_num_tokens up to KV blocks of 32


def aiconfigurator_generated(row) -> bool:
    """Whether a row is one of aiconfigurator's gap-analysis runs (``GAP_ANALYSIS_SOURCE``)."""
    return GAP_ANALYSIS_SOURCE in str(row.get("silicon_data_source", ""))


def generated_engine(backend: str, batch_size: int, isl: int) -> dict:
    """The scheduler limits aiconfigurator's generator (``aiconfigurator.generator``: the
    ``rule_plugin`` rules and the version templates ``trtllm/extra_engine_args.1.0.0rc3``,
    ``sglang/cli_args.0.5.6.post2``, ``vllm/cli_args.0.12.0``) writes for an aggregated worker of
    batch size ``batch_size`` serving prompts of ``isl`` tokens:

    - TRT-LLM: ``max_batch_size`` = the batch size, ``max_num_tokens`` = batch size + isl + 1500
      rounded up to KV blocks of 32 tokens, chunked prefill off (its default): at most one or two
      whole prompts a step where the framework default (8192) takes eight 1k prompts;
    - SGLang: ``--max-running-requests`` = the batch size, ``--max-prefill-tokens`` = isl + 1500,
      ``--enable-mixed-chunk`` (decode tokens ride in the prefill step and count against its
      prefill budget): the replay's mixed ``vllm_v1`` steps with that budget;
    - vLLM: ``--max-num-seqs`` = max(512, batch size) and no ``--max-num-batched-tokens`` (the
      default 8192 stays): nothing the replay does not already do.
    Returns the scheduler keys that differ from the replay's framework defaults."""
    if backend == "trtllm":
        budget = math.ceil((batch_size + isl + 1500) / TOKENS_PER_BLOCK) * TOKENS_PER_BLOCK
        return {"max_num_batched_tokens": budget, "max_num_seqs": batch_size}
    if backend == "sglang":
        return {"max_num_batched_tokens": isl + 1500, "max_num_seqs": batch_size}
    return {}


def inferencemax(row) -> bool:
    """Whether a row is one of InferenceMAX's runs (``INFERENCEMAX_SOURCES``)."""
    return str(row.get("silicon_data_source", "")).startswith(INFERENCEMAX_SOURCES)


def client_for(row, name: str = "auto") -> Client:
    """The client a row was measured with: ``auto`` reads the row's provenance. InferenceMAX's rows
    (``2026-04-06.csv``, ``2026-03-25.csv`` and the database dump: Llama-3.1-70B, DeepSeek-R1,
    gpt-oss-120b, MiniMax-M2.5, Kimi-K2.5, GLM-5, Qwen3.5) were measured by its launch scripts, which
    all run ``benchmark_serving.py --num-prompts 10N --max-concurrency N --random-range-ratio``:
    client ``bench-serving``; the other rows name no client and get ``fixed``."""
    if name != "auto":
        return CLIENTS[name]
    return CLIENTS["bench-serving" if inferencemax(row) else "fixed"]


def launch_script(row, client: Client) -> str | None:
    """The InferenceMAX launch-script family whose server settings a row gets (``LAUNCH_SCRIPTS``),
    None for rows of other provenance or models whose scripts the replay does not reproduce."""
    if row.get("mode") == "disagg":  # multi-node recipes whose settings were not read: framework defaults
        return None
    return LAUNCH_SCRIPTS.get(row["model"]) if client.name == "bench-serving" else None


def server(row, client: Client) -> dict:
    """The engine's scheduler and KV settings for a row: each framework's defaults, and for
    InferenceMAX's rows (client ``bench-serving``) the settings of the launch scripts of the row's
    own model (``launch_script``):

    - Llama-3.1-70B (``benchmarks/70b_*.sh``): vLLM ``--max-num-batched-tokens 8192
      --kv-cache-dtype fp8`` (H200, B200) with async scheduling; ``trtllm-serve --max_num_tokens
      16384`` with an fp8 KV cache and, for ISL/OSL 1k/1k below TP 8, batch waiting
      (``batch_wait_timeout_iters: 20``, ``batch_wait_max_tokens_ratio: 0.9``);
    - DeepSeek-R1 (``dsr1_*.sh``): TRT-LLM ``kv_cache_config.dtype: fp8``, ``--max_batch_size``
      the concurrency and ``--max_num_tokens`` = (batch + ISL x (1 + range ratio + 0.05) + 127)
      rounded down to 64 (the formula of the script without speculation); on B200 fp8, routed experts from the trtllm-gen kernels its ``TRTLLM`` MoE
      backend runs (``trtllm_gen_moe``); with MTP (``mtp_run``), ``dsr1_*_trt_mtp.sh``'s drafts and
      token budget; SGLang ``--chunked-prefill-size 16384 --kv-cache-dtype fp8_e4m3
      --max-running-requests 256``;
    - gpt-oss-120b (``gptoss_*.sh``): vLLM ``max-num-batched-tokens: 8192``, ``async-scheduling:
      true``; TRT-LLM ``--max_num_tokens 20000 --max_batch_size 512``, KV dtype ``auto`` (bf16:
      the mxfp4 checkpoint names no KV quantisation).

    For aiconfigurator's gap-analysis rows, the limits its generator writes (``generated_engine``)."""
    backend, script = row["backend"], launch_script(row, client)
    isl, osl, tp, c = int(row["isl"]), int(row["osl"]), int(row["tp"]), int(row["concurrency"])
    kv: dict = {}
    cost: dict = {}
    if backend == "trtllm":
        # in-flight batching: generation first, whole prompts (chunked prefill is off by default)
        # GUARANTEED_NO_EVICT reserves prompt + max_tokens; the benchmarks send max_tokens = the
        # output length (with ignore_eos)
        # its overlap scheduler (TRT-LLM's default; aiconfigurator's generator keeps it on for
        # aggregated workers) forms each step's batch while the previous step runs
        sched = {"name": "trtllm", "max_num_batched_tokens": 8192, "max_tokens_oracle": True,
                 "overlap_scheduler": True}
        if script == "70b":
            sched["max_num_batched_tokens"] = 16384
            if isl == osl == 1024 and tp < 8:
                sched |= {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
        elif script == "dsr1" and row.get("speculative") == "mtp":
            # dsr1_*_trt_mtp.sh: max_batch_size CONC (CONC / TP with attention DP), max_num_tokens
            # ((MTP + 1) x max_batch_size + ISL + 64 + 63) rounded down to 64
            dp = int(row.get("dp", 1) or 1)
            batch = c // dp if dp > 1 else c
            k = MTP_TOKENS[dp > 1]
            sched |= {"max_num_batched_tokens": ((k + 1) * batch + isl + 64 + 63) // 64 * 64, "max_num_seqs": batch}
        elif script == "dsr1":
            max_isl = round(isl * (1 + client.range_ratio + 0.05))
            sched |= {"max_num_batched_tokens": (c + max_isl + 64 + 63) // 64 * 64, "max_num_seqs": c}
            if trtllm_gen_moe(row):
                cost["moe_table"] = TRTLLM_GEN_TABLE
        elif script == "gptoss":
            sched |= {"max_num_batched_tokens": 20000, "max_num_seqs": 512}
        # TRT-LLM's ``kv_cache_config.dtype: auto`` takes the ModelOpt checkpoint's kv_cache_quant_algo
        # (FP8 in NVIDIA's FP8 and NVFP4 checkpoints; InferenceMAX sets it too)
        if row["dtype"] in ("fp8", "nvfp4"):
            kv["dtype"] = "fp8"
    else:
        # vLLM V1: chunked prefill in one token budget, running requests first (8192: the V1
        # default of the OpenAI server on >= 70 GB GPUs, and what InferenceMAX sets). SGLang
        # (chunked_prefill_size 8192 on H100/H200) runs a waiting prefill batch before the
        # decode batch unless --enable-mixed-chunk, which aiconfigurator's generator sets for
        # aggregated SGLang workers (the csv's SGLang rows are its gap-analysis runs): mixed steps.
        sched = {"name": "vllm_v1", "max_num_batched_tokens": 8192}
        if backend == "sglang":
            # SGLang's overlap schedule (``disable_overlap_schedule: false``, its default; the
            # generator's SGLang templates have no flag that turns it off) forms the next batch
            # while a step runs, as vLLM's async scheduling does
            sched["async_scheduling"] = True
            if script == "dsr1":
                sched |= {"max_num_batched_tokens": 16384, "max_num_seqs": 256}
                kv["dtype"] = "fp8"
        elif script == "70b" and row["system"] != "h100_sxm":
            # InferenceMAX's H200 and B200 vLLM configs: kv-cache-dtype fp8, async-scheduling true
            kv["dtype"] = "fp8"
            sched["async_scheduling"] = True
        elif script == "gptoss":
            sched["async_scheduling"] = True
    if aiconfigurator_generated(row):
        sched |= generated_engine(backend, int(row["concurrency"]), isl)
    return {"scheduler": sched, "kv": kv, **({"cost": cost} if cost else {})}


TRTLLM_GEN_TABLE = "vllm"
"""The collection whose B200 ``fp8_block`` MoE rows time TRT-LLM's trtllm-gen kernels (vLLM 0.24's
FlashInfer TRT-LLM fp8 experts); TRT-LLM's own B200 collection times DeepGEMM only."""


def trtllm_gen_moe(row) -> bool:
    """Whether a DeepSeek-R1 TRT-LLM row ran the ``TRTLLM`` MoE backend (trtllm-gen kernels) on
    fp8 experts on B200: InferenceMAX's ``benchmarks/dsr1_fp8_b200_trt.sh`` (SemiAnalysisAI/InferenceX
    commit 0a919c5f) sets ``moe_config.backend: TRTLLM`` except at 256+ clients with 1k prompts
    (``DEEPGEMM``); its ``-mtp`` script runs ``DEEPGEMM`` (commit 111f0312), so MTP rows keep the
    TRT-LLM table."""
    return (row["backend"] == "trtllm" and row.get("system") == "b200_sxm" and row.get("dtype") == "fp8"
            and row.get("speculative") != "mtp"
            and not (int(row["isl"]) == 1024 and int(row["concurrency"]) >= 256))


SGLANG_STREAM_INTERVAL = {("b200_sxm", "fp8"): 30, ("b200_sxm", "fp4"): 10, ("h200_sxm", "fp8"): 10}
"""``--stream-interval`` of InferenceMAX's SGLang DeepSeek-R1 scripts (``benchmarks/dsr1_fp8_b200.sh``,
``dsr1_fp4_b200.sh``, ``dsr1_fp8_h200.sh``, SemiAnalysisAI/InferenceX commit 1fc5d73c), by (system, csv
precision)."""


def stream_interval(row, client: Client) -> int:
    """Tokens a server holds before it streams them to the client (1: each at once): SGLang sends
    a streamed request's output only when it holds a multiple of ``--stream-interval`` tokens
    (``scheduler_output_processor_mixin.stream_output``: ``len(req.output_ids) % stream_interval
    == 0``, and at its end), the first token included; InferenceMAX's SGLang DeepSeek-R1 rows run
    10 or 30 (``SGLANG_STREAM_INTERVAL``). Other rows: 1 (TRT-LLM's scripts set
    ``stream_interval: 10`` too; whether TRT-LLM holds the first token was not read)."""
    if row["backend"] != "sglang" or launch_script(row, client) != "dsr1":
        return 1
    return SGLANG_STREAM_INTERVAL.get((row.get("system"), row.get("precision")), 1)


def streamed(ttft: np.ndarray, tpot: np.ndarray, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) as a benchmark client measures them when the server streams a request's tokens
    ``k`` at a time: the first chunk arrives with token min(k, n) of the request's n, which comes
    (k - 1) of its mean token gaps after its first token (the engine's times, per request); TPOT =
    (E2E - TTFT) / (n - 1) over the client's TTFT, E2E unchanged."""
    n = tokens.astype(float)
    gap = np.where(n > 1, np.nan_to_num(tpot), 0.0)
    first = ttft + (np.minimum(k, n) - 1) * gap
    e2e = ttft + (n - 1) * gap
    with np.errstate(invalid="ignore", divide="ignore"):
        return first, np.where(n > 1, (e2e - first) / (n - 1), np.nan)


def lengths(value: int, ratio: float) -> dict:
    """The workload length distribution of a benchmark length ``value`` at range ratio ``ratio``."""
    if ratio >= 1.0:
        return {"kind": "fixed", "value": value}
    return {"kind": "uniform", "min": max(1, int(value * ratio)), "max": value}


def row_config(r, cost_model: str, client: Client | None = None, think_s: float = 0.0) -> dict:
    c = int(r["concurrency"])
    client = client or CLIENTS["steady"]
    srv = server(r, client)
    disagg = r.get("mode") == "disagg"
    return {
        "model": r["model"], "hardware": r["hardware"], "dtype": r["dtype"],
        **({"cluster": {"pools": disagg_pools(r), "router": "least_loaded"}} if disagg else {
            "parallelism": {"tp": int(r["tp"]), **({"ep": int(r["ep"])} if int(r.get("ep", 1) or 1) > 1 else {}),
                            **({"dp": int(r["dp"])} if int(r.get("dp", 1) or 1) > 1 else {})}}),
        "scheduler": {"max_num_seqs": max(256, c), **srv["scheduler"]},
        **({"speculative": {"method": "mtp", "num_speculative_tokens": (disagg_mtp_drafts(r) if disagg else None)
                            or MTP_TOKENS[int(r.get("dp", 1) or 1) > 1]}}
           if r.get("speculative") == "mtp" else {}),
        "kv": srv["kv"],
        "workload": {"num_requests": c, "prompt": lengths(int(r["isl"]), client.range_ratio),
                     "output": lengths(int(r["osl"]), client.range_ratio),
                     "closed_loop": {"clients": c, "think_time_s": think_s,
                                     "think": "exponential" if think_s > 0 else "fixed"}},
        "cost": {"model": cost_model, "framework": r["backend"], **srv.get("cost", {})},
        "output": {"plots": False, "progress": False, "step_records": False},
        "seed": 0,
    }


def _ramp(cfg) -> float:
    """The predicted duration of one request at this concurrency: prefill + osl decode steps."""
    from sim.catalog import get_hardware, get_model
    from sim.cost import make_cost_model
    from sim.types import BatchShape

    wl = cfg.workload
    c = wl.closed_loop.clients
    isl = wl.prompt.value if wl.prompt.kind == "fixed" else wl.prompt.max
    osl = wl.output.value if wl.output.kind == "fixed" else wl.output.max
    cm = make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))
    prefill = cm.step_time(BatchShape((min(isl, 8192),), (0,), tp=cfg.parallelism.tp)).total * math.ceil(isl / 8192)
    decode = cm.decode_step(c, c * (isl + osl // 2), isl + osl).total
    return prefill + osl * decode


RAMPS = ("none", "request")


def blend(values: np.ndarray, ids: np.ndarray, c: int, rounds: int, client: Client) -> float:
    """The benchmark's mean over its scored requests, from a replay of ``rounds`` x c requests.

    The benchmark's ``per_client`` x c requests form waves of c: wave 0 is the burst at t = 0
    (request ids < c), the last wave drains with fewer than c in flight (ids >= (rounds-1) c in
    the replay), the waves between are steady. The replay's middle waves stand for the
    benchmark's steady ones (a mean, weighted by their count there); the first
    ``warmup_per_client`` waves are not scored, nor the drain unless ``client.drain``."""
    first, last = ids < c, ids >= (rounds - 1) * c
    mid = ~(first | last)
    if rounds < 3 or not mid.any():
        return float(values.mean())
    w = client.warmup_per_client
    steady = max(0, client.per_client - 2 - max(0, w - 1))  # scored steady waves of the benchmark
    total, n = float(values[mid].mean()) * steady * c, steady * c
    if w == 0:
        total, n = total + float(values[first].sum()), n + int(first.sum())
    if client.drain:
        total, n = total + float(values[last].sum()), n + int(last.sum())
    return total / n


class Task(NamedTuple):
    """One replay: a csv row under one cost model, ``rounds`` waves of its concurrency; ``extra``
    ``key=value`` overrides; ramp ``request`` staggers the clients' first requests over one
    predicted request duration, ``none`` starts them all at t = 0 (as ``vllm bench serve
    --max-concurrency N`` does); client: a name of ``CLIENTS`` or ``auto`` (the row's
    provenance); think_s: the front end's round trip in seconds (added to TTFT; the mean
    exponential gap before each next request)."""

    row: dict
    cost_model: str
    rounds: int
    extra: tuple = ()
    ramp: str = "none"
    client: str = "auto"
    think_s: float = 0.0


def replay(task: tuple) -> dict:
    """One ``Task`` (or the tuple of its fields): {ttft_ms, tpot_ms} predicted, or {error}."""
    row, cost_model, rounds, extra, ramp_kind, client_name, think_s = Task(*task)
    extra, think_s = list(extra), float(think_s)
    client = client_for(row, client_name)
    from sim.api import simulate
    from sim.config import load_config
    from sim.errors import ServesimError

    rounds = min(rounds, client.per_client)
    try:
        cfg = load_config(row_config(row, cost_model, client, think_s), extra)
        c = int(row["concurrency"])
        ramp = _ramp(cfg) if ramp_kind == "request" else 0.0
        cfg = load_config(cfg, [f"workload.num_requests={rounds * c}",
                                f"workload.closed_loop.ramp_up_s={ramp}"])
        if row.get("mode") == "disagg":
            req, source = disagg_run(cfg)
        else:
            res = simulate(cfg, plots=False, progress=False)
            req, source = res.requests, res.summary["sim"]["cost_model"]
    except (ServesimError, ValueError) as e:
        return {"error": str(e).splitlines()[0][:200]}
    req = req[req["status"] == "finished"]
    if not len(req):
        return {"error": "no request finished (rejected: does the context fit?)"}
    ids = req["request_id"].to_numpy()
    ttft, tpot = req["ttft_s"].to_numpy(), req["tpot_s"].to_numpy()
    k = stream_interval(row, client)
    if k > 1:
        ttft, tpot = streamed(ttft, tpot, req["generated_tokens"].to_numpy(), k)
    ok = np.isfinite(tpot)
    return {"ttft_ms": 1e3 * (blend(ttft, ids, c, rounds, client) + think_s),
            "tpot_ms": 1e3 * blend(tpot[ok], ids[ok], c, rounds, client),
            "client": client.name, "cost_source": source}


STREAMED_FROM_DECODE = ("NVIDIA Dynamo docs, Disaggregated Serving (docs.nvidia.com/dynamo, user guide): Dynamo "
                        "routes each request through prefill first, transfers the KV cache to the decode worker, "
                        "then streams the response from the decode worker")
"""Where a disaggregated replay's client-side first token comes from (``disagg_run``)."""


def disagg_run(cfg) -> tuple[pd.DataFrame, str]:
    """Simulate a disaggregated row's fleet; the request rows with TTFT and TPOT as the benchmark
    client sees them when the response streams from the decode worker (``STREAMED_FROM_DECODE``):
    the first token reaches the client at the end of the request's first step on its decode
    replica (after the prefill, the KV transfer and the wait for that step), TPOT = (E2E - that
    TTFT) / (tokens - 1). A request that ends on its prefill replica (one output token) keeps the
    engine's times. Also the cost source."""
    from sim.engine import Engine
    from sim.metrics.records import requests_frame, steps_frame

    from sim.config import load_config

    # each step's duration from its row (disaggregation already runs without the fast paths)
    eng = Engine(load_config(cfg, ["output.step_records=true"]), record_plans=True)
    out = eng.run()
    req, steps = requests_frame(out), steps_frame(out)
    if len(steps) != len(eng.plans):
        raise ValueError(f"disagg_run: {len(steps)} step rows for {len(eng.plans)} plans")
    decode = {rep.idx for rep in eng.replicas if rep.role == "decode"}
    first_end: dict[int, float] = {}
    for (idx, start, ids, _), dur in zip(eng.plans, steps["duration_s"].to_numpy()):
        if idx in decode:
            for rid in ids:
                first_end.setdefault(rid, start + float(dur))
    seen = req["request_id"].map(first_end)
    ttft = (seen - req["arrival_s"]).where(seen.notna(), req["ttft_s"])
    n = req["generated_tokens"].astype(float)
    tpot = ((req["e2e_s"] - ttft) / (n - 1)).where(n > 1)
    return req.assign(ttft_s=ttft, tpot_s=tpot), out.cost_source


def implied_waiting(ttft_ms, e2e_ms, clients: int) -> tuple[float, float]:
    """(intercept ms, requests waiting) that measured rows of one closed-loop benchmark imply, from
    nothing but their own TTFT and end-to-end latency (E2E = TTFT + (osl - 1) x TPOT).

    Rows that differ only in output length share a prompt, so the part of their TTFT that grows
    with E2E is time spent waiting for a slot. With ``clients`` clients and no think time the
    request rate is clients / E2E, so by Little's law k requests waiting on average wait
    k x E2E / clients each: TTFT = intercept + (k / clients) x E2E. The least-squares line
    through (E2E, TTFT) gives the intercept and k = slope x clients (0: no queue in front of the
    engine; docs/kernel_database.md, what the residuals are)."""
    e2e, ttft = np.asarray(e2e_ms, dtype=float), np.asarray(ttft_ms, dtype=float)
    if len(e2e) < 2 or np.ptp(e2e) == 0:
        raise ValueError("implied_waiting needs at least two rows of different end-to-end latency")
    slope, intercept = np.polyfit(e2e, ttft, 1)
    return float(intercept), float(slope * clients)


FITS_FILE = Path(__file__).with_name("silicon_fits.json")
"""The csv rows each fit used (written by ``experiments/silicon_fit_rows.py``)."""


def fits() -> dict:
    import json

    return json.loads(FITS_FILE.read_text())


def fitted_by(ids: pd.Series) -> pd.Series:
    """Per row (by the csv's ``id``): the fits that used it, comma-separated; "" for a row no
    fit touched (held out)."""
    used = {name: set(f["ids"]) for name, f in fits()["fits"].items()}
    return ids.map(lambda i: ", ".join(name for name, s in used.items() if str(i) in s))


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
        by_model = []
        if "model" in d:
            ep = d["ep"].astype(int) if "ep" in d else pd.Series(1, index=d.index)
            dp = d["dp"].fillna(1).astype(int) if "dp" in d else pd.Series(1, index=d.index)
            par = ("tp" + d["tp"].astype(int).astype(str) + np.where(ep > 1, " ep" + ep.astype(str), "")
                   + np.where(dp > 1, " dp" + dp.astype(str), ""))
            d = d.assign(parallelism=par)
            for (m, s, b, p), g in d.groupby(["model", "system", "backend", "parallelism"], sort=True):
                by_model.append({"model": m, "system": s, "backend": b, "parallelism": p, **stats(g)})
            models = {m: stats(g) for m, g in d.groupby("model", sort=True)}
        else:
            models = {}
        out[cm] = {"overall": stats(d) if len(d) else {"rows": 0}, "groups": groups, "models": models,
                   "by_model": by_model}
    return out


def score_disagg(pred: pd.DataFrame, models: list[str]) -> dict:
    """The disaggregated rows' median and p90 APE of TTFT and TPOT, overall and by (backend,
    system), and whether the medians meet the targets (TPOT <= 12%, TTFT <= 20%)."""
    out: dict = {}
    for cm in models:
        d = pred[pred[f"{cm}_tpot_ms"].notna()]
        d = d.assign(ttft_ape=ape(d[f"{cm}_ttft_ms"], d["silicon_ttft_ms"]),
                     tpot_ape=ape(d[f"{cm}_tpot_ms"], d["silicon_tpot_ms"]),
                     tpot_ratio=d[f"{cm}_tpot_ms"] / d["silicon_tpot_ms"],
                     ttft_ratio=d[f"{cm}_ttft_ms"] / d["silicon_ttft_ms"])

        def stats(g):
            return {"rows": int(len(g)),
                    "ttft_ape_median": float(g["ttft_ape"].median()), "ttft_ape_p90": float(g["ttft_ape"].quantile(0.9)),
                    "tpot_ape_median": float(g["tpot_ape"].median()), "tpot_ape_p90": float(g["tpot_ape"].quantile(0.9)),
                    "ttft_ratio_median": float(g["ttft_ratio"].median()),
                    "tpot_ratio_median": float(g["tpot_ratio"].median())}

        overall = stats(d) if len(d) else {"rows": 0}
        if len(d):
            overall["meets_targets"] = {"tpot": overall["tpot_ape_median"] <= 0.12,
                                        "ttft": overall["ttft_ape_median"] <= 0.20}
        spec = d["speculative"] if "speculative" in d else pd.Series("", index=d.index)
        out[cm] = {"overall": overall,
                   "groups": [{"backend": b, "system": s, **stats(g)}
                              for (b, s), g in d.groupby(["backend", "system"], sort=True)],
                   "models": {m: stats(g) for m, g in d.groupby("model", sort=True)},
                   # the rows the recipes name as MTP runs (replayed with speculation), apart
                   "speculation": {("mtp" if k == "mtp" else "none"): stats(g)
                                   for k, g in d.groupby(spec.fillna("").astype(str), sort=True)}}
    return out


def print_disagg(scores: dict) -> None:
    for cm, sc in scores.items():
        print(f"\n{cm}, disaggregated rows: APE of the mean TTFT and TPOT per row (median / p90)")
        print(f"{'backend':<8}{'system':<10}{'rows':>6}{'TTFT med':>10}{'p90':>8}{'TPOT med':>10}{'p90':>8}")
        for g in sc["groups"]:
            print(f"{g['backend']:<8}{g['system']:<10}{g['rows']:>6}"
                  f"{100 * g['ttft_ape_median']:>9.1f}%{100 * g['ttft_ape_p90']:>7.1f}%"
                  f"{100 * g['tpot_ape_median']:>9.1f}%{100 * g['tpot_ape_p90']:>7.1f}%")
        for m, g in sc["models"].items():
            print(f"{m:<18}{g['rows']:>6}{100 * g['ttft_ape_median']:>9.1f}%{100 * g['ttft_ape_p90']:>7.1f}%"
                  f"{100 * g['tpot_ape_median']:>9.1f}%{100 * g['tpot_ape_p90']:>7.1f}%")
        for k, g in sc.get("speculation", {}).items():
            if k == "mtp":
                print(f"{'MTP rows (recipes)':<18}{g['rows']:>6}{100 * g['ttft_ape_median']:>9.1f}%"
                      f"{100 * g['ttft_ape_p90']:>7.1f}%{100 * g['tpot_ape_median']:>9.1f}%{100 * g['tpot_ape_p90']:>7.1f}%")
        o = sc["overall"]
        if o.get("rows"):
            t = o["meets_targets"]
            print(f"{'all':<18}{o['rows']:>6}{100 * o['ttft_ape_median']:>9.1f}%{100 * o['ttft_ape_p90']:>7.1f}%"
                  f"{100 * o['tpot_ape_median']:>9.1f}%{100 * o['tpot_ape_p90']:>7.1f}%"
                  f"   (predicted/measured medians: TTFT {o['ttft_ratio_median']:.2f}, TPOT {o['tpot_ratio_median']:.2f})")
            print(f"targets (medians): TPOT <= 12% {'met' if t['tpot'] else 'NOT met'}, "
                  f"TTFT <= 20% {'met' if t['ttft'] else 'NOT met'}")


def print_table(scores: dict, rows: str = "", overall_only: bool = False) -> None:
    for cm, sc in scores.items():
        print(f"\n{cm}{f', {rows}' if rows else ''}: APE of the mean TTFT and TPOT per row (median / p90)")
        print(f"{'system':<10}{'backend':<8}{'conc':>7}{'rows':>6}{'TTFT med':>10}{'p90':>8}{'TPOT med':>10}{'p90':>8}")
        for g in [] if overall_only else sc["groups"]:
            print(f"{g['system']:<10}{g['backend']:<8}{g['concurrency']:>7}{g['rows']:>6}"
                  f"{100 * g['ttft_ape_median']:>9.1f}%{100 * g['ttft_ape_p90']:>7.1f}%"
                  f"{100 * g['tpot_ape_median']:>9.1f}%{100 * g['tpot_ape_p90']:>7.1f}%")
        if sc.get("models"):
            print(f"\n{'model':<18}{'rows':>6}{'TTFT med':>10}{'p90':>8}{'TPOT med':>10}{'p90':>8}")
            for m, g in sc["models"].items():
                print(f"{m:<18}{g['rows']:>6}{100 * g['ttft_ape_median']:>9.1f}%{100 * g['ttft_ape_p90']:>7.1f}%"
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
    from sim.metrics.plots import save

    paths = [Path(f) for f in save(fig, out, "predicted_vs_measured")]
    plt.close(fig)
    return paths
