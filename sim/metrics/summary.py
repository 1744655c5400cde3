"""Records -> summary.json (docs/architecture.md section 4; the metric definitions are part of the product).

- TTFT = first output token time - arrival. TPOT = (E2E - TTFT) / (output tokens - 1), for
  requests with at least two output tokens. ITL = every gap between consecutive output tokens.
  E2E = last output token time - arrival. Queueing delay = first scheduled - arrival.
- Throughput = tokens (or requests) completed / makespan, where makespan runs from the first
  arrival to the end of the last step.
- Goodput = requests per second that met every SLO (TTFT <= ttft_s and TPOT <= tpot_s, per SLO
  class when classes are configured); ``slo_attainment`` = those requests / all arrived requests
  (a rejected request misses its SLO).
- Cost = GPU-hours over the makespan x $/GPU-hour; $ per million output tokens. With
  autoscaling, GPU-hours count each replica only while provisioned (cold start included), from
  t = 0 to the end of the run, and the ``autoscale`` block gives them over time.
- Error band: the kernel database's measured error on the nearest validated group of measured
  runs, as a range around the TTFT and TPOT percentiles (``sim/metrics/error_band.py``).
- Verdict: stable, backlogged or overloaded, with its evidence and the knob to turn, from the
  request rows (``sim/metrics/verdict.py``); an overloaded run also gets a warning.
- Requests: arrived = completed + rejected + lost + unfinished (lost: taken by a fault, with the
  reason; unfinished is 0 at the end of every run).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.catalog import get_hardware
from sim.metrics.columns import FrameColumns, RequestColumns
from sim.metrics.error_band import error_band
from sim.metrics.extrapolation import annotate
from sim.metrics.verdict import LoadFold, verdict_line
from sim.metrics.weighted import PCTS, dist, weighted_dist


def slo_met(req: pd.DataFrame, slo) -> np.ndarray:
    """Boolean per request: completed and within its class's TTFT and TPOT limits."""
    ttft_lim = np.full(len(req), slo.ttft_s)
    tpot_lim = np.full(len(req), slo.tpot_s)
    for name, c in slo.classes.items():
        m = (req["slo_class"] == name).to_numpy()
        ttft_lim[m], tpot_lim[m] = c.ttft_s, c.tpot_s
    done = (req["status"] == "finished").to_numpy()
    ttft = req["ttft_s"].to_numpy()
    tpot = req["tpot_s"].fillna(0.0).to_numpy()
    return done & (ttft <= ttft_lim) & (tpot <= tpot_lim)


GROUPS = ("slo_class", "tenant")
TALLY_COLUMNS = ["status", "arrival_s", "prompt_tokens", "generated_tokens", "ttft_s", "tpot_s", "preemptions",
                 "cached_tokens", "slo_class", "tenant", "reject_reason", "first_scheduled_s", "finish_s"]


def _reasons(into: dict, reasons: pd.Series) -> None:
    """Count ``reasons`` by their code (the text before ':'; "unknown" when there is none)."""
    for r, n in reasons.value_counts(dropna=False).items():
        if n:
            key = r.split(":")[0] if isinstance(r, str) and r else "unknown"
            into[key] = into.get(key, 0) + int(n)


class Tally:
    """The counts and sums of the requests table, folded batch by batch: every figure is an
    integer count or sum, or a minimum, so neither the batches' size nor their order changes it."""

    def __init__(self, slo):
        self.slo = slo
        self.arrived = self.completed = self.rejected = self.lost = self.preemptions = 0
        self.output_tokens = self.input_tokens = self.met = 0  # tokens of the completed requests
        self.admitted_prompt = self.cached = 0  # prompt and prefix-cached tokens of the admitted ones
        self.t0 = math.inf  # the first arrival
        self.reject_reasons: dict[str, int] = {}
        self.lost_reasons: dict[str, int] = {}
        self.groups: dict[str, dict] = {g: {} for g in GROUPS}  # value -> [arrived, completed, SLO met]

    def add(self, req: pd.DataFrame) -> None:
        n = len(req)
        if not n:
            return
        status = req["status"]
        done = (status == "finished").to_numpy()
        rejected = (status == "rejected").to_numpy()
        lost = (status == "lost").to_numpy()
        met = slo_met(req, self.slo)
        self.arrived += n
        self.completed += int(done.sum())
        self.rejected += int(rejected.sum())
        self.lost += int(lost.sum())
        self.preemptions += int(req["preemptions"].sum())
        self.output_tokens += int(req["generated_tokens"].to_numpy()[done].sum())
        self.input_tokens += int(req["prompt_tokens"].to_numpy()[done].sum())
        self.met += int(met.sum())
        self.admitted_prompt += int(req["prompt_tokens"].to_numpy()[~rejected].sum())
        self.cached += int(req["cached_tokens"].to_numpy()[~rejected].sum())
        self.t0 = min(self.t0, float(req["arrival_s"].min()))
        _reasons(self.reject_reasons, req["reject_reason"][rejected])
        _reasons(self.lost_reasons, req["reject_reason"][lost])
        for g in GROUPS:
            keys = req[g]
            for key in keys.dropna().unique():
                m = (keys == key).to_numpy()
                c = self.groups[g].setdefault(key, [0, 0, 0])
                c[0] += int(m.sum())
                c[1] += int((m & done).sum())
                c[2] += int(met[m].sum())


def by_group(tally: Tally, src: RequestColumns, column: str, makespan: float) -> dict:
    """Per value of ``column`` (SLO class or tenant): arrivals, completions, SLO attainment,
    goodput and p99 latencies; empty when no request carries the column."""
    groups = tally.groups[column]
    if not groups:
        return {}
    p99 = {c: {k: dist(v)["p99"] for k, v in src.finished_by(c, column)} for c in ("ttft_s", "tpot_s")}
    out = {}
    for key in sorted(groups):
        arrived, completed, ok = groups[key]
        out[str(key)] = {
            "arrived": arrived, "completed": completed, "slo_attainment": ok / arrived,
            "goodput_requests_per_s": ok / makespan,
            "ttft_p99_s": p99["ttft_s"].get(key), "tpot_p99_s": p99["tpot_s"].get(key),
        }
    return out


def price_of(cfg) -> tuple[float | None, str]:
    """$/GPU-hour and a one-line statement of where it comes from."""
    if cfg.cost.usd_per_gpu_hour is not None:
        return cfg.cost.usd_per_gpu_hour, "cost.usd_per_gpu_hour (set by the user)"
    hw = get_hardware(cfg.hardware)
    if hw.price is None:
        return None, f"no public price for {hw.id} in the reference table; set cost.usd_per_gpu_hour"
    p = hw.price
    return p.usd_per_gpu_hour, f"{p.provider} {p.offer}, {p.date} ({p.basis}; {p.source})"


def summarize(out, req: pd.DataFrame | RequestColumns, steps: pd.DataFrame, wall_s: float) -> dict:
    """The summary (summary.json) of a run, its requests table given in memory (a DataFrame) or
    as a ``RequestColumns`` source (a streamed ``requests.parquet``: ``ParquetColumns``); both
    give the same numbers."""
    cfg = out.config
    src = req if isinstance(req, RequestColumns) else FrameColumns(req)
    tally = Tally(cfg.slo)
    load = LoadFold(out.simulated_s)
    for batch in src.batches(TALLY_COLUMNS):
        tally.add(batch)
        load.add(batch)
    verdict = load.verdict(cfg.cluster.replicas)
    cost_block = cost_model_block(out)
    extrap_warnings = []
    if "extrapolated" in cost_block:
        cost_block["extrapolated"], extrap_warnings = annotate(cost_block["extrapolated"], out.steps.busy_ns / 1e9)
    arrived = tally.arrived
    t0 = tally.t0 if arrived else 0.0
    makespan = max(out.simulated_s - t0, 1e-12)
    ttft, tpot = dist(src.finished("ttft_s")), dist(src.finished("tpot_s"))
    e2e_v = src.finished("e2e_s")
    e2e, in_flight = dist(e2e_v), float(np.nansum(e2e_v)) / makespan / max(1, cfg.cluster.replicas)
    del e2e_v
    out_tok, in_tok, met = tally.output_tokens, tally.input_tokens, tally.met
    price, price_src = price_of(cfg)
    fleet = getattr(out, "fleet", None)
    # a fixed fleet is paid for over the makespan; an autoscaled one while each replica is provisioned
    gpu_hours = out.num_gpus * makespan / 3600.0 if fleet is None else fleet.gpu_hours(out.simulated_s)
    usd = None if price is None else gpu_hours * price
    pools = getattr(out, "pools", None)
    # the first pool's config: what the memory, cost-model and error-band figures describe (with
    # pools, ``pools`` gives every pool's own figures)
    first = next(iter(pools.values()))["spec"].cfg if pools else cfg
    if pools:  # each pool its own GPUs and price, summed
        pools = pools_block(out, src, makespan)
        gpu_hours = sum(p["gpu_hours"] for p in pools.values())
        usd = None if any(p["usd"] is None for p in pools.values()) else sum(p["usd"] for p in pools.values())
        price = usd / gpu_hours if usd is not None and gpu_hours else None
        price_src = "per pool (pools.<name>.price_source); usd_per_gpu_hour here is the fleet's average"
    log = out.steps  # running totals: present with or without per-step rows
    sources = dict(log.sources)
    extra = {}
    if getattr(out, "faults", None) is not None:
        extra["faults"] = out.faults
    if getattr(out, "speculative", None) is not None:
        extra["speculative"] = out.speculative
    if fleet is not None:
        extra["autoscale"] = autoscale_block(fleet, out.simulated_s, price)
    if cfg.frontend.active:
        extra["frontend"] = frontend_block(cfg.frontend, src)
    if pools:
        extra["pools"] = pools
    return {
        "requests": {
            "arrived": arrived,
            "completed": tally.completed,
            "rejected": tally.rejected,
            "unfinished": arrived - tally.completed - tally.rejected - tally.lost,
            "preemptions": tally.preemptions,
            "rejected_by_reason": dict(sorted(tally.reject_reasons.items())),
            **({"lost": tally.lost, "lost_reasons": dict(sorted(tally.lost_reasons.items()))} if tally.lost or extra else {}),
        },
        "ttft_s": ttft,
        "tpot_s": tpot,
        "itl_s": out.itl.dist() if hasattr(out.itl, "dist") else weighted_dist(out.itl.values, *out.itl.runs()),
        "e2e_s": e2e,
        "queue_s": dist(src.finished("queue_s")),
        "throughput": {
            "requests_per_s": tally.completed / makespan,
            "output_tokens_per_s": out_tok / makespan,
            "total_tokens_per_s": (out_tok + in_tok) / makespan,
        },
        "goodput": {"requests_per_s": met / makespan, "slo_attainment": met / arrived if arrived else None,
                    "slo": {"ttft_s": cfg.slo.ttft_s, "tpot_s": cfg.slo.tpot_s},
                    "by_class": by_group(tally, src, "slo_class", makespan),
                    "by_tenant": by_group(tally, src, "tenant", makespan)},
        "cost": {
            "gpus": out.num_gpus,
            "gpu_hours": gpu_hours,
            "usd_per_gpu_hour": price,
            "price_source": price_src,
            "usd": usd,
            "usd_per_million_output_tokens": (usd / out_tok * 1e6) if (usd is not None and out_tok) else None,
        },
        "kv": {**out.memory, "peak_blocks_used": int(log.peak_kv_blocks), "gpu_memory_source": memory_source(first)},
        "precision": {"weights": cfg.dtype, "activations": cfg.act_dtype, "kv_cache": cfg.kv_dtype,
                      "communication": cfg.comm_dtype},
        "prefix_cache": prefix_cache(cfg, tally, getattr(out, "kv_tiers", None)),
        "workload": out.workload_info,
        "cost_model": cost_block,
        "error_band": error_band(getattr(out, "cost_info", None), out.cost_source, first.hardware, first.dtype, in_flight,
                                 ttft, tpot),
        "verdict": verdict,
        "warnings": list(getattr(out, "warnings", [])) + extrap_warnings
                    + ([verdict_line(verdict)] if verdict["state"] == "overloaded" else []),
        "sim": {
            "wall_s": wall_s,
            "steps": int(log.count),
            "step_records": bool(log.keep_rows),
            "simulated_s": out.simulated_s,
            "makespan_s": makespan,
            "seed": cfg.seed,
            "cost_model": out.cost_source,
            "cost_model_params": out.cost_params,
            "steps_by_cost_source": {str(k): int(v) for k, v in sorted(sources.items())},
            "out_of_range_queries": int(out.out_of_range),
        },
        **extra,
    }


def frontend_block(fe, src) -> dict:
    """The serving front end's settings, how long finished requests took to reach the engine
    (``wait_s``: engine_arrival_s - arrival_s) and the engine-side TTFT (first token - the engine's
    receipt), beside the client-side ``ttft_s`` of the summary (sim/cluster/frontend.py)."""
    arrival, engine = src.finished("arrival_s"), src.finished("engine_arrival_s")
    first = src.finished("first_token_s")
    return {"api_overhead_s": fe.api_overhead_s, "tokenize_s_per_token": fe.tokenize_s_per_token,
            "detokenize_s_per_token": fe.detokenize_s_per_token,
            "wait_s": dist(engine - arrival), "engine_ttft_s": dist(first - engine)}


def pools_block(out, src, makespan: float) -> dict:
    """summary.json's ``pools`` block (``cluster.pools``): per pool its layout, replicas and GPUs,
    busy share (step time over the replica-time paid for; with attention DP each rank counts as
    a replica), requests served (a prefill pool: the requests it prefilled, handed off or finished
    there; the others: the requests that finished on it), GPU-hours and dollars (a fixed pool paid over the makespan, an autoscaled one while
    each replica is provisioned)."""
    from sim.cluster.pools import price_of_pool

    cfg = out.config
    owner = {}
    for name, p in out.pools.items():
        owner.update((i, name) for i in p["replicas"])
    finished = dict.fromkeys(out.pools, 0)
    for batch in src.batches(["replica", "status"]):
        done = batch["replica"][batch["status"] == "finished"].value_counts()
        for i, n in done.items():
            finished[owner[int(i)]] += int(n)
    block = {}
    for name, p in out.pools.items():
        spec, fleet = p["spec"], p["fleet"]
        gpus = spec.replicas * spec.gpus_per_replica
        hours = gpus * makespan / 3600.0 if fleet is None else fleet.gpu_hours(out.simulated_s)
        replica_s = hours * 3600.0 / spec.gpus_per_rank  # (rank-seconds: each attention rank logs its steps)
        price, src_line = price_of_pool(cfg, spec)
        b = {"role": spec.role, "hardware": spec.hardware, "dtype": spec.dtype, "tp": spec.tp, "pp": spec.pp,
             **{k: v for k, v in (("ep", spec.ep), ("dp", spec.dp)) if v > 1},
             "replicas": spec.replicas, "gpus": gpus, "kv_blocks_per_replica": p["kv_blocks_per_replica"],
             "busy_share": p["busy_ns"] / 1e9 / replica_s if replica_s > 0 else None,
             "requests_served": finished[name] + p["handed_off"],
             **({"requests_handed_off": p["handed_off"]} if spec.role == "prefill" else {}),
             "gpu_hours": hours, "usd_per_gpu_hour": price, "price_source": src_line,
             "usd": None if price is None else hours * price}
        if fleet is not None:
            b["autoscale"] = autoscale_block(fleet, out.simulated_s, price)
        block[name] = b
    return block


def autoscale_block(fleet, end_s: float, price: float | None) -> dict:
    """Replica count and cost over time: one point per fleet change, then the end of the run."""
    rows = fleet.frame_rows(end_s)
    return {"gpu_hours": fleet.gpu_hours(end_s), "usd": None if price is None else fleet.gpu_hours(end_s) * price,
            "peak_provisioned": max(p for _, p, _, _ in rows), "replicas_started": len(fleet.provisioned),
            "replicas_drained": fleet.drained,
            "series": [{"t_s": t, "provisioned": p, "serving": s, "gpu_hours": g,
                        "usd": None if price is None else g * price} for t, p, s, g in rows]}


def cost_model_block(out) -> dict:
    """What priced the run: the kernel database's own description (package and framework versions,
    system, kernels, engine overhead), or the analytic/profiled source and its parameters' origin."""
    info = getattr(out, "cost_info", None)
    if info:
        return dict(info)
    names = {"roofline": "roofline (analytic)", "profiled": "profiled tables"}
    return {"source": names.get(out.cost_source, out.cost_source), "params_source": out.cost_params.get("source")}


def memory_source(cfg) -> str:
    """Where the GPU memory the KV capacity starts from comes from."""
    hw = get_hardware(cfg.hardware)
    if hw.usable_memory_gib is None:
        return f"datasheet ({hw.memory_gib:g} GiB)"
    return f"driver-reported total ({hw.usable_memory_gib:g} GiB of {hw.memory_gib:g} GiB datasheet): {hw.usable_memory_source}"


def prefix_cache(cfg, tally: Tally, tiers: dict | None = None) -> dict:
    """Hit rate = prompt tokens served from the prefix cache at first admission / prompt tokens of
    the admitted (not rejected) requests; saved prefill tokens = those cached tokens. With a
    tiered cache (``tiers``: ``sim.kv.tiers.tier_block``), ``tiers`` splits them by the tier
    that served them (the GPU's share is what host and disk did not serve), with each tier's
    size and block moves."""
    prompt, cached = tally.admitted_prompt, tally.cached
    out = {"enabled": cfg.kv.prefix_caching, "eviction": cfg.kv.eviction, "prompt_tokens": prompt,
           "saved_prefill_tokens": cached, "hit_rate": cached / prompt if prompt else None}
    if tiers is not None:
        out["tiers"] = tier_split(tiers, prompt, cached)
    return out


def tier_split(t: dict, prompt: int, cached: int) -> dict:
    """``prefix_cache``'s ``tiers`` block."""
    rate = (lambda n: n / prompt if prompt else None)  # noqa: E731
    host, disk = t["hit_tokens_host"], t["hit_tokens_disk"]
    out = {"gpu": {"hit_tokens": cached - host - disk, "hit_rate": rate(cached - host - disk)},
           "host": {"blocks": t["host_blocks"], "gib_per_gpu": t["host_gib"], "hit_tokens": host,
                    "hit_rate": rate(host), "offloaded_blocks": t["offloaded"], "loaded_blocks": t["loaded_host"],
                    "to_disk_blocks": t["to_disk"]},
           "dropped_blocks": t["dropped"], "superseded_blocks": t["superseded"]}
    if t["disk_blocks"]:
        out["disk"] = {"blocks": t["disk_blocks"], "gib_per_gpu": t["disk_gib"], "hit_tokens": disk,
                       "hit_rate": rate(disk), "loaded_blocks": t["loaded_disk"]}
    return out


def clean_json(obj):
    """NaN/inf -> None, numpy scalars -> Python, recursively (for strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj
