"""The short summary table printed after a run."""
from __future__ import annotations

from sim.metrics.error_band import band_lines
from sim.metrics.verdict import verdict_line


UNITS = (("ms", 1e-3, 1.0), ("s", 1.0, 60.0), ("min", 60.0, 3600.0), ("h", 3600.0, float("inf")))
"""(unit, seconds per unit, below this many seconds): a duration takes the first unit it fits."""
COL = 12


def duration(v: float | None) -> str:
    """A duration in seconds, in the unit that keeps it short: 812.3 ms, 14.20 s, 35.1 min, 26.0 h.
    The text never exceeds ``COL - 1`` characters, so the table's columns stay aligned."""
    if v is None:
        return "-"
    for unit, scale, below in UNITS:  # the last unit takes everything
        if abs(v) < below:
            x = v / scale
            digits = 1 if unit == "ms" else 2 if abs(x) < 100 else 1 if abs(x) < 1000 else 0
            text = f"{x:,.{digits}f} {unit}"
            return text if len(text) < COL else f"{x:.3g} {unit}"


def _by_reason(reasons: dict) -> str:
    """`` (exceeds_context 3, aborted 1)``: rejections by reason code, largest first."""
    if not reasons:
        return ""
    return " (" + ", ".join(f"{k} {v:,}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))) + ")"


def cost_line(s: dict) -> str:
    """The cost model and, for the kernel database, its package, framework, version and system."""
    cm = s.get("cost_model") or {}
    if cm.get("framework"):
        return (f"{s['sim']['cost_model']} ({cm['source']} {cm['package_version']}: {cm['framework']} "
                f"{cm['framework_version']} on {cm['system']})")
    if cm.get("why_not_kerneldb"):
        return f"{s['sim']['cost_model']} ({cm['why_not_kerneldb']})"
    return s["sim"]["cost_model"]


def model_label(model: str) -> str:
    """A run's model as people name it: the catalog id, or for a config.json or card file the
    model it describes (``acme/Tiny-2L (from models/tiny/config.json)``)."""
    from pathlib import Path

    from sim.catalog import get_model

    if not (model.endswith((".json", ".yaml", ".yml")) or Path(model).is_dir()):
        return model
    return f"{get_model(model).name} (from {model})"


def fleet_label(cfg) -> str:
    """``4 x 1 h100-sxm``, with the prefill/decode split of a disaggregated fleet (an expert group
    of ``dp`` attention ranks counts its tp x pp x dp GPUs as one replica)."""
    c, gpus = cfg.cluster, cfg.parallelism.tp * cfg.parallelism.pp * cfg.parallelism.dp
    if c.pools:  # pools: each as ``name: 2 x 4 h100-sxm (tp=4, pp=1), decode``
        parts = []
        for p in c.pools:
            par = p.parallelism or cfg.parallelism
            dtype = f", {p.dtype}" if p.dtype and p.dtype != cfg.dtype else ""
            parts.append(f"{p.name}: {p.replicas} x {par.tp * par.pp} {p.hardware} (tp={par.tp}, pp={par.pp}{dtype}), "
                         f"{p.role}")
        return "; ".join(parts)
    split = f" ({c.prefill_replicas} prefill + {c.replicas - c.prefill_replicas} decode)" if c.prefill_replicas else ""
    return f"{c.replicas} x {gpus} {cfg.hardware}{split}"


def rejection_hints(s: dict, cfg) -> list[str]:
    """For each rejection code of the run, the knob behind it and what to change."""
    from sim.catalog import get_model

    codes = (s["requests"].get("rejected_by_reason") or {})
    knobs = cfg.scheduler.knobs()
    out = []
    if "exceeds_token_budget" in codes:
        budget = getattr(knobs, "max_num_batched_tokens", None)
        out.append(f"exceeds_token_budget: these prompts are longer than scheduler.max_num_batched_tokens ({budget:,}), "
                   f"and {cfg.scheduler.name} runs a prompt in one step: raise it (--set "
                   "scheduler.max_num_batched_tokens=N) or use a chunked-prefill scheduler (vllm_v1, sarathi)")
    if "exceeds_context" in codes:
        out.append(f"exceeds_context: prompt + output exceed {get_model(cfg.model).max_context:,} tokens, the model's "
                   "context: shorten the lengths or set workload.clip_to_context=true")
    if "exceeds_kv_capacity" in codes:
        out.append("exceeds_kv_capacity: one request needs more KV blocks than a replica holds: raise parallelism.tp or "
                   "kv.gpu_memory_utilization, or choose a GPU with more memory")
    return out


def reservation_line(cfg, trace_bound: int | None = None) -> str | None:
    """What a reservation policy (orca; trtllm's GUARANTEED_NO_EVICT) reserved per request on
    admission: the prompt plus the request's output limit (None for the other policies);
    ``trace_bound``: a trace's longest output, the limit of its requests without their own."""
    name, k = cfg.scheduler.name, cfg.scheduler.knobs()
    if name == "orca" and k.reserve == "context":
        return "reservation (orca): each request reserves the model's whole context (scheduler.reserve=context)"
    if not (name == "orca" or (name == "trtllm" and k.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
                                and not k.max_tokens_oracle)):
        return None
    wl = cfg.workload
    if wl.trace is not None:
        what = ("the trace's max_output_tokens where it gives one, else the trace's longest output"
                + (f" ({trace_bound:,} tokens)" if trace_bound is not None else "") + ", within the context")
    elif wl.tenants:
        what = "each tenant's output bound (its distribution's max), within the context"
    else:
        from sim.workload.synthetic import output_bound

        bound = output_bound(wl.output, {})
        what = (f"at most {bound:,} (workload.output's bound)" if bound is not None
                else "the context minus the prompt (workload.output has no max)")
    return f"reservation ({name}): each request reserves its prompt + its output limit: {what}"


def print_summary(s: dict, cfg) -> None:
    r = s["requests"]
    par = cfg.parallelism
    groups = "".join(f", {k}={v}" for k, v in (("ep", par.ep), ("dp", par.dp)) if v > 1)
    layout = "" if cfg.cluster.pools else f" (tp={par.tp}, pp={par.pp}{groups})"
    print(f"\n{model_label(cfg.model)} | {fleet_label(cfg)}{layout} | scheduler {cfg.scheduler.name} | "
          f"cost model {cost_line(s)}")
    print(f"requests: {r['arrived']:,} arrived, {r['completed']:,} completed, {r['rejected']:,} rejected"
          f"{_by_reason(r.get('rejected_by_reason') or {})}, {r['preemptions']:,} preemptions"
          + (f", {r['lost']:,} lost" if r.get("lost") else ""))
    for hint in rejection_hints(s, cfg):
        print(f"  {hint}")
    f = s.get("faults")
    if f:
        kinds = ", ".join(f"{v} {k}" for k, v in f["by_kind"].items()) or "none reached"
        parked = f"{f['parked_for_decode']:,} parked for a decode replica, " if f.get("parked_for_decode") else ""
        print(f"faults: {kinds} | {f['requeued']:,} re-queued, {parked}{f['lost']:,} lost ({f['on_crash']} on crash)")
    a = s.get("autoscale")
    if a:
        print(f"autoscale: {a['replicas_started']} replicas started, {a.get('replicas_drained', 0)} drained, "
              f"peak {a['peak_provisioned']} provisioned, "
              f"{a['gpu_hours']:.3f} GPU-hours while provisioned")
    for name, p in (s.get("pools") or {}).items():  # one line per pool
        usd = "-" if p["usd"] is None else f"${p['usd']:.2f}"
        busy = "-" if p["busy_share"] is None else f"{100 * p['busy_share']:.0f}%"
        scaled = ""
        if p.get("autoscale"):
            a = p["autoscale"]
            scaled = f", autoscaled: {a['replicas_started']} started, {a['replicas_drained']} drained, peak {a['peak_provisioned']}"
        print(f"pool {name} ({p['role']}): {p['requests_served']:,} requests served, busy {busy}, "
              f"{p['gpu_hours']:.3f} GPU-hours, {usd}, KV cache {p['kv_blocks_per_replica']:,} blocks per "
              f"replica{scaled}")
    sp = s.get("speculative")
    if sp:
        rate = "-" if sp["acceptance_rate"] is None else f"{100 * sp['acceptance_rate']:.0f}%"
        length = "-" if sp["mean_acceptance_length"] is None else f"{sp['mean_acceptance_length']:.2f}"
        print(f"speculative ({sp['method']}, k={sp['num_speculative_tokens']}): {sp['verifications']:,} verifications, "
              f"{rate} of drafts accepted, {length} tokens per verification")
    fe = s.get("frontend")
    if fe:
        print(f"front end (TTFT and E2E as the client sees them): mean {fe['wait_s']['mean'] * 1e3:.1f} ms to reach "
              f"the engine, p90 {fe['wait_s']['p90'] * 1e3:.1f} ms; engine-side TTFT mean "
              f"{fe['engine_ttft_s']['mean'] * 1e3:.1f} ms, p90 {fe['engine_ttft_s']['p90'] * 1e3:.1f} ms")
    reserved = reservation_line(cfg, (s.get("workload") or {}).get("output_bound"))
    if reserved:
        print(reserved)
    wl = s.get("workload") or {}
    for key, what in (("clipped", "to their length distributions' bounds"), ("clipped_to_context", "to the context")):
        clip = wl.get(key)
        if isinstance(clip, dict) and (clip.get("prompt") or clip.get("output")):
            print(f"clipped {what}: {clip['prompt']:,} prompts, {clip['output']:,} outputs")
    print(f"{'metric':<8}" + "".join(f"{k:>{COL}}" for k in ("mean", "p50", "p90", "p99")))
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"), ("queue_s", "queue")):
        d = s[key]
        print(f"{name:<8}" + "".join(f"{duration(d.get(k)):>{COL}}" for k in ("mean", "p50", "p90", "p99")))
    t, g, c = s["throughput"], s["goodput"], s["cost"]
    print(f"throughput: {t['requests_per_s']:.2f} req/s, {t['output_tokens_per_s']:,.0f} output tok/s | "
          f"goodput {g['requests_per_s']:.2f} req/s ({100 * (g['slo_attainment'] or 0):.1f}% within "
          f"TTFT<={g['slo']['ttft_s']} s, TPOT<={g['slo']['tpot_s']} s)")
    if c["usd"] is None:
        print(f"cost: {c['gpu_hours']:.3f} GPU-hours; price unknown ({c['price_source']})")
    else:
        per_m = c["usd_per_million_output_tokens"]
        print(f"cost: {c['gpu_hours']:.3f} GPU-hours x ${c['usd_per_gpu_hour']:.2f}/h = ${c['usd']:.2f}; "
              + (f"${per_m:.2f} per million output tokens" if per_m is not None else "no output tokens"))
    pc = s.get("prefix_cache") or {}
    if pc.get("enabled"):
        print(f"prefix cache ({pc['eviction']}): hit rate {100 * (pc['hit_rate'] or 0):.1f}% of prompt tokens, "
              f"{pc['saved_prefill_tokens']:,} prefill tokens saved")
        tiers = pc.get("tiers")
        if tiers:
            pct = lambda x: 100 * (x or 0)  # noqa: E731
            disk = tiers.get("disk")
            print(f"  by tier: GPU {pct(tiers['gpu']['hit_rate']):.1f}%, host {pct(tiers['host']['hit_rate']):.1f}% "
                  f"({tiers['host']['gib_per_gpu']:g} GiB per GPU, {tiers['host']['loaded_blocks']:,} blocks loaded)"
                  + (f", disk {pct(disk['hit_rate']):.1f}% ({disk['gib_per_gpu']:g} GiB per GPU, "
                     f"{disk['loaded_blocks']:,} blocks loaded)" if disk else ""))
    pr, kv = s.get("precision"), s.get("kv") or {}
    if pr:
        print(f"precision: weights {pr['weights']}, activations {pr['activations']}, KV cache {pr['kv_cache']}, "
              + (f"all-reduce {pr['communication']}" if s.get("pools") else  # (each pool's KV cache: its line above)
                 f"all-reduce {pr['communication']} | KV cache {kv.get('num_gpu_blocks', 0):,} blocks per GPU "
                 f"from {kv.get('gpu_gib', 0):g} GiB"))
    for line in band_lines(s.get("error_band"), s, duration):
        print(line)
    line = verdict_line(s.get("verdict"))
    if line:
        print(line)
    sim = s["sim"]
    print(f"simulated {sim['simulated_s']:,.1f} s in {sim['steps']:,} steps, wall {sim['wall_s']:.2f} s")
    if sim.get("out_of_range_queries"):
        ext = (s.get("cost_model") or {}).get("extrapolated")
        where = ""
        if ext:
            where = ": " + "; ".join(f"{e['operator']} {e['queries']:,} ({100 * (e['gpu_share'] or 0):.1f}% of GPU time"
                                     f"{', material' if e['material'] else ''})" for e in ext)
        print(f"note: {sim['out_of_range_queries']:,} operator queries fell outside the profiled grid "
              f"(priced at the grid edge, scaled by the roofline){where}")
    print()
