"""``plan`` over disaggregated fleets: xPyD layouts, a GPU and a TP per pool (``cluster.pools``).

Coarse to fine, so that a plan over 4 GPUs x 4 TPs stays short:

1. **Units**: every (GPU, TP) the model fits (the engine's memory plan, as for aggregated
   candidates).
2. **Static bounds** (no simulation): per unit, from its own cost model and the workload's mean
   prompt P and output O (the first 1,000 requests of the configured stream):

   - prefill: 1 / (the step time of one P-token prefill): requests per second a prefill replica
     computes when never idle;
   - decode: the largest batch b whose decode step at context P + O/2 is within the p99 TPOT
     limit and whose KV (b x (P + O) tokens) fits the replica, then b / (O x that step): the
     requests per second it finishes, never idle.

   Both are upper bounds (no queueing, no KV growth), so x = ceil(rate / prefill bound) and
   y = ceil(rate / decode bound) are lower bounds on the replicas each pool needs; layouts with
   x or y outside the stated xPyD range are listed as such. Every (prefill unit, decode unit)
   pair is ranked by the $/hour of its bound-sized fleet.
3. **Verification** (simulation, the plan's seeds and run store): the ``verify_top`` cheapest
   layouts (plus the cheapest with one GPU type and the cheapest with two, when the top ones
   lack either) are simulated at the target rate as whole fleets (``cluster.pools``), growing the pool
   that misses: a TTFT miss adds a prefill replica, a TPOT miss a decode replica, an incomplete
   or overloaded run the busier pool (``summary["pools"][...]["busy_share"]``), up to
   ``max_extra`` additions. A layout is *verified* when its fleet meets the SLOs on every seed.

Departures: the decode replica's KV transfer is priced at each pair's own links (the
simulation), but the static bound ignores it; the layouts' router is ``least_loaded`` (the
hand-off already picks the least loaded decode replica; round robin would send arrivals to a
prefill replica regardless of its queue).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.sweep.capacity import SearchSettings, judge, set_key, sized

STATIC_SAMPLE = 1000
"""Requests drawn from the configured workload to take the mean prompt and output from."""


@dataclass(frozen=True)
class Unit:
    hardware: str
    tp: int

    @property
    def label(self) -> str:
        return f"{self.hardware} tp{self.tp}"


@dataclass(frozen=True)
class Layout:
    pre: Unit
    dec: Unit
    x: int
    y: int
    scheduler: str

    @property
    def label(self) -> str:
        return f"{self.x}P {self.pre.label} + {self.y}D {self.dec.label} {self.scheduler}"

    def pools(self, x: int | None = None, y: int | None = None) -> list[dict]:
        return [{"name": "prefill", "hardware": self.pre.hardware, "parallelism": {"tp": self.pre.tp},
                 "replicas": self.x if x is None else x, "role": "prefill"},
                {"name": "decode", "hardware": self.dec.hardware, "parallelism": {"tp": self.dec.tp},
                 "replicas": self.y if y is None else y, "role": "decode"}]


def fleet_config(base: dict, lay: Layout, x: int, y: int, rate: float, s: SearchSettings, seed: int) -> dict:
    """The ``x``P``y``D fleet of ``lay`` at ``rate`` (sized like a capacity probe) for ``seed``."""
    cfg = set_key(set_key(base, "cluster.pools", lay.pools(x, y)), "cluster.router", "least_loaded")
    cfg = {**cfg, "cluster": {k: v for k, v in cfg["cluster"].items() if k not in ("replicas", "prefill_replicas")}}
    return set_key(sized(cfg, rate, s), "seed", seed)


def mean_lengths(base: dict) -> tuple[float, float]:
    """(mean prompt, mean output) tokens of the first ``STATIC_SAMPLE`` requests of ``base``'s workload."""
    from sim.catalog import get_model
    from sim.config import load_config
    from sim.workload import build_workload

    cfg = load_config(base)
    wl = build_workload(cfg.workload, max_context=get_model(cfg.model).max_context,
                        rng=np.random.default_rng(cfg.seed))
    p, o = [], []
    for spec in wl:
        p.append(spec.prompt_tokens)
        o.append(spec.output_tokens)
        if len(p) >= STATIC_SAMPLE:
            break
    return float(np.mean(p)), float(np.mean(o))


def static_bounds(base: dict, unit: Unit, prompt: float, output: float, tpot_s: float) -> tuple[float, float, str]:
    """(prefill req/s, decode req/s, how the decode bound was limited) of one replica of ``unit``
    (the module docstring's step 2)."""
    from sim.catalog import get_hardware, get_model
    from sim.config import load_config
    from sim.cost import make_cost_model
    from sim.cost.memory import memory_for_config
    from sim.types import BatchShape

    cfg = load_config(set_key(set_key(base, "hardware", unit.hardware), "parallelism.tp", unit.tp))
    model, hw = get_model(cfg.model), get_hardware(cfg.hardware)
    cost = make_cost_model(cfg, model, hw)
    p, o = max(1, round(prompt)), max(1, round(output))
    pre = 1.0 / cost.step_time(BatchShape((p,), (0,), tp=unit.tp)).total
    mem = memory_for_config(cfg, model, hw)
    ctx = p + o // 2
    kv_batch = mem.num_gpu_blocks * cfg.kv.block_size // (p + o)
    most = max(1, min(cfg.scheduler.knobs().max_num_seqs, kv_batch))
    step = lambda b: cost.step_time(BatchShape((1,) * b, (ctx,) * b, tp=unit.tp)).total  # noqa: E731
    if step(1) > tpot_s:
        return pre, 0.0, f"one decode step ({step(1) * 1e3:.3g} ms) exceeds the TPOT limit"
    lo, hi = 1, most
    while lo < hi:  # the largest batch within the TPOT limit
        mid = (lo + hi + 1) // 2
        if step(mid) <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    limit = "KV capacity" if lo == kv_batch else "max_num_seqs" if lo == most else "TPOT limit"
    return pre, lo / (o * step(lo)), f"batch {lo} ({limit})"


def layouts(base: dict, units: list[Unit], rate: float, s: SearchSettings, scheduler: str, max_prefill: int,
            max_decode: int, price) -> tuple[list[dict], dict]:
    """Every (prefill unit, decode unit) pair with its bound-sized xPyD and estimated $/hour, the
    cheapest first (those outside the range or without a price after), and the units' bounds."""
    prompt, output = mean_lengths(base)
    bounds = {u: static_bounds(base, u, prompt, output, s.tpot_p99_s) for u in units}
    rows = []
    for a in units:
        for b in units:
            cp, cd = bounds[a][0], bounds[b][1]
            x = math.ceil(rate / cp) if cp > 0 else None
            y = math.ceil(rate / cd) if cd > 0 else None
            pa, pb = price(a.hardware), price(b.hardware)
            usd = None if None in (x, y, pa, pb) else x * a.tp * pa + y * b.tp * pb
            why = ("decode: " + bounds[b][2]) if y is None else (
                f"{x}P{y}D is outside the range (at most {max_prefill}P{max_decode}D)"
                if x > max_prefill or y > max_decode else None)
            rows.append({"layout": Layout(a, b, x or 0, y or 0, scheduler), "estimate_usd_per_hour": usd, "why": why,
                         "prefill_bound_rps": cp, "decode_bound_rps": cd, "decode_limit": bounds[b][2]})
    rows.sort(key=lambda r: (r["why"] is not None, r["estimate_usd_per_hour"] is None,
                             r["estimate_usd_per_hour"] or 0.0, r["layout"].label))
    return rows, {"prompt_mean": prompt, "output_mean": output,
                  "bounds": {u.label: {"prefill_rps": v[0], "decode_rps": v[1], "decode_limit": v[2]}
                             for u, v in bounds.items()}}


def verify_layout(base: dict, lay: Layout, rate: float, s: SearchSettings, max_extra: int):
    """Generator task: the smallest fleet from ``lay``'s xPyD meeting the SLOs on every seed,
    growing the pool that misses (the module docstring's step 3)."""
    x, y, why = lay.x, lay.y, ""
    runs: list = []
    for _ in range(max_extra + 1):
        runs, grow = [], None
        for seed in s.seeds:
            res = yield fleet_config(base, lay, x, y, rate, s, seed)
            runs.append(res)
            if res["status"] != "ok":
                why, grow = (res.get("error") or "run failed").splitlines()[0], "stop"
                break
            good, why = judge(res.get("summary"), s)
            if not good:
                grow = _which(res["summary"], why)
                break
        if grow is None:
            return {"x": x, "y": y, "verified": True, "runs": runs, "why": "meets the SLOs"}
        if grow == "stop":
            break
        x, y = (x + 1, y) if grow == "prefill" else (x, y + 1)
    return {"x": x, "y": y, "verified": False, "runs": runs, "why": why}


def _which(summary: dict, why: str) -> str:
    """Which pool to grow after a miss: TTFT -> prefill, TPOT -> decode, else the busier pool."""
    if why.startswith("p99 TTFT"):
        return "prefill"
    if why.startswith("p99 TPOT"):
        return "decode"
    pools = summary.get("pools") or {}
    pre = (pools.get("prefill") or {}).get("busy_share") or 0.0
    dec = (pools.get("decode") or {}).get("busy_share") or 0.0
    return "prefill" if pre >= dec else "decode"
