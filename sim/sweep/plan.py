"""``plan``: the cheapest fleet that serves a model at a target rate within percentile SLOs.

For every candidate (GPU, tensor-parallel degree, scheduler with its knobs):

1. Skip it, saying why, when the model does not fit (``plan_memory`` raises) or ``tp`` does not
   divide the attention heads.
2. Find the per-replica capacity with the capacity search (one replica, the plan's seeds); the
   sizing rate is its minimum over seeds.
3. Replicas = ceil(rate / capacity); verify by simulating the fleet (round-robin router) at the
   target rate for every seed, adding a replica while any seed misses an SLO (at most
   ``max_extra_replicas`` times). A fleet is *verified* when its own simulation meets the SLOs.
4. Cost: GPUs x $/GPU-hour from the hardware card's dated public price (or
   ``cost.usd_per_gpu_hour``); $ per million output tokens in steady state at the target rate
   (fleet $/hour over output tokens/hour = rate x mean output tokens per request x 3600);
   headroom = capacity x replicas / rate - 1.

Candidates are ranked: verified and priced first by $/hour (then p99 TTFT), then verified
fleets whose GPU has no public price (cost unknown, never chosen as the cheapest), then the
candidates that cannot meet the SLOs, then those that do not fit. The cheapest verified, priced
fleet is written as a runnable ``config.yaml``. Every run goes through the sweep store, so a
repeated or interrupted plan reuses what it already simulated.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from sim.catalog import CatalogError, get_hardware, get_model
from pydantic import ValidationError

from sim.config import SchedulerSection, _format_error, load_config
from sim.cost.memory import MemoryShortfall, memory_for_config
from sim.errors import ConfigError, ServesimError
from sim.metrics.summary import price_of
from sim.metrics.verdict import worst_verdict
from sim.sweep.capacity import Capacity, SearchSettings, capacity_tasks, probe_estimate, set_key, sized, with_slos
from sim.sweep.runner import Driver
from sim.sweep.store import RunStore


@dataclass(frozen=True)
class Candidate:
    hardware: str
    tp: int
    scheduler: str
    knobs: tuple = ()  # ((key, value), ...)

    @property
    def label(self) -> str:
        k = "".join(f" {a}={b}" for a, b in self.knobs)
        return f"{self.hardware} tp{self.tp} {self.scheduler}{k}"

    def apply(self, base: dict) -> dict:
        cfg = set_key(set_key(base, "hardware", self.hardware), "parallelism.tp", self.tp)
        cfg = set_key(cfg, "scheduler", {"name": self.scheduler, **dict(self.knobs)})
        return set_key(cfg, "cluster.replicas", 1)


def parse_schedulers(text: str) -> list[tuple[str, tuple]]:
    """``vllm,static,vllm+max_num_seqs=64`` -> [(name, ((knob, value), ...)), ...]."""
    out = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        name, *knobs = item.split("+")
        pairs = []
        for kv in knobs:
            if "=" not in kv:
                raise ConfigError(f"--schedulers: knob {kv!r} of {item!r} must be key=value")
            k, v = kv.split("=", 1)
            pairs.append((k, yaml.safe_load(v)))
        out.append((name, tuple(pairs)))
    return out


def fits(cfg: dict) -> str | None:
    """Why this config cannot run (None when it can): the model does not split over its
    parallelism, or does not fit in memory (the engine's own memory plan)."""
    model = get_model(cfg.get("model", "llama-3.1-8b"))
    par = cfg.get("parallelism") or {}
    why = model.parallelism_problem(int(par.get("tp", 1)), int(par.get("pp", 1)))
    if why:
        return why
    c = load_config(cfg)
    try:
        memory_for_config(c, model, get_hardware(c.hardware))
    except MemoryShortfall as e:
        return f"does not fit: {e.short()}"
    return None


def _gpu_price(base: dict, hardware: str) -> tuple[float | None, str]:
    """A GPU's price under ``base``; a GPU skipped for lacking the weight dtype still has one."""
    return price_of(load_config(set_key(set_key(base, "hardware", hardware), "dtype", "bf16")))


def _fleet(cfg: dict, rate: float, replicas: int, s: SearchSettings, seed: int) -> dict:
    """The fleet at the target rate, sized like a capacity probe (enough requests for a p99)."""
    return set_key(set_key(sized(cfg, rate, s), "cluster.replicas", replicas), "seed", seed)


def _verify(cfg: dict, rate: float, start: int, s: SearchSettings, max_extra: int):
    """Generator task: the smallest fleet from ``start`` replicas meeting the SLOs on every seed."""
    from sim.sweep.capacity import judge

    why = ""
    for n in range(start, start + max_extra + 1):
        runs, ok = [], True
        for seed in s.seeds:
            res = yield _fleet(cfg, rate, n, s, seed)
            good, why = judge(res.get("summary"), s) if res["status"] == "ok" else (False, res["error"].splitlines()[0])
            runs.append(res)
            if not good:
                ok = False
                break
        if ok:
            return {"replicas": n, "verified": True, "runs": runs, "why": "meets the SLOs"}
    return {"replicas": n, "verified": False, "runs": runs, "why": why}


@dataclass
class PlanResult:
    table: pd.DataFrame
    chosen: dict | None
    meta: dict
    out: Path
    files: list = field(default_factory=list)


def plan(model: str, rate: float, *, gpus: list[str], tps: list[int], schedulers: list[tuple[str, tuple]],
         settings: SearchSettings, out: str | Path, base: dict | None = None, workers: int = 1,
         backend: str = "local", address: str | None = None, max_extra_replicas: int = 3,
         progress: bool | None = None, layouts: tuple = ("agg",), max_prefill: int = 8, max_decode: int = 8,
         verify_top: int = 3, time_budget_s: float | None = None, say=None) -> PlanResult:
    """Search the candidates and write plan.parquet, plan.md, plan.json, config.yaml, figures.
    ``layouts``: ``agg`` (replicas that do both), ``disagg`` (xPyD prefill and decode pools, a GPU
    and TP each: ``sim/sweep/fleets.py``), or both. ``say``: where the time estimate is printed
    before the search starts (a function of one line; None: nowhere)."""
    t0 = time.perf_counter()
    out = Path(out)
    base = plan_base(model, base, settings)
    check_choices(base, gpus, tps, schedulers)
    bad = [x for x in layouts if x not in ("agg", "disagg")] or ([] if layouts else ["(none)"])
    if bad:
        raise ConfigError(f"--layouts: {', '.join(bad)} not one of agg, disagg")
    if "disagg" in layouts and (base.get("workload") or {}).get("closed_loop"):
        raise ConfigError("--layouts disagg: plan sizes disaggregated fleets for open-loop arrivals")
    cands = [Candidate(g, tp, name, knobs) for g in gpus for tp in tps for name, knobs in schedulers] \
        if "agg" in layouts else []
    live, skipped = screen(cands, base)
    units = disagg_units(base, gpus, tps, schedulers) if "disagg" in layouts else []
    estimate = search_estimate(base, live, units, rate, settings, verify_top, workers, time_budget_s)
    verify_top = estimate["verify_top"]
    if say is not None:
        say(estimate["line"])
    out.mkdir(parents=True, exist_ok=True)
    run = _Runs(RunStore(out), backend, workers, address, progress)
    caps = search_capacities(live, base, settings, run)
    ver = verify_fleets(live, caps, base, rate, settings, run, max_extra_replicas)
    rows = [candidate_row(c, base, rate, settings, skipped.get(c), caps.get(c), ver.get(c)) for c in cands]
    static = None
    if units:
        over = time_budget_s is not None and time.perf_counter() - t0 > time_budget_s
        drows, static = plan_disagg(base, units, rate, settings, schedulers[0], run, 0 if over else verify_top,
                                    max_prefill, max_decode, 2 * max_extra_replicas, out)
        rows += drows
    table, fleets, run_keys = rank(rows)
    chosen = write_chosen(table, fleets, out)
    table.to_parquet(out / "plan.parquet", index=False)
    meta = {
        "kind": "plan", "model": model, "rate": rate, "slo": {"ttft_p99_s": settings.ttft_p99_s, "tpot_p99_s": settings.tpot_p99_s},
        "settings": asdict(settings), "gpus": gpus, "tps": tps, "schedulers": [s[0] + "".join(f"+{a}={b}" for a, b in s[1]) for s in schedulers],
        "prices": {g: dict(zip(("usd_per_gpu_hour", "source"), _gpu_price(base, g))) for g in gpus},
        "candidates": len(cands), "skipped": len(skipped), "runs": run.totals(),
        "wall_s": time.perf_counter() - t0, "chosen": _jsonable(chosen),
        "chosen_keys": list(run_keys.iloc[0]) if chosen is not None else [], "backend": backend, "workers": workers,
        "capacity": {c.label: caps[c].as_dict()["rps"] for c in live},
        "layouts": list(layouts), "estimate": estimate, "disaggregated": static,
    }
    (out / "plan.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    (out / "plan.md").write_text(plan_markdown(table, meta))
    files = plot_pareto(table, out / "figures", title=f"{model} at {rate:g} req/s")
    if static is not None:
        files.append(str(out / "layouts.parquet"))
    return PlanResult(table, chosen, meta, out, files)


def plan_base(model: str, base: dict | None, settings: SearchSettings) -> dict:
    """The shared config of every candidate: the model and the SLOs set; validated (errors
    name the key) before anything runs."""
    base = with_slos(set_key(dict(base or {}), "model", model), settings)
    load_config(base)
    return base


def check_choices(base: dict, gpus: list[str], tps: list[int], schedulers: list[tuple[str, tuple]]) -> None:
    """Every GPU id and scheduler (with its knobs) is valid, before anything runs: a typo is an
    error, not a table of skipped candidates. (A tp that does not suit the model is a skip.)"""
    if not gpus or not tps or not schedulers:
        raise ConfigError("plan needs at least one GPU (--gpus), one tp (--tp) and one scheduler (--schedulers)")
    for g in gpus:  # the id only: a GPU without the weight dtype is a skipped candidate
        try:
            get_hardware(g)
        except CatalogError as e:
            raise ConfigError(f"--gpus: {e}") from None
    for name, knobs in schedulers:
        try:  # the scheduler section alone (its name and knobs), whatever the GPU
            SchedulerSection(name=name, **dict(knobs))
        except ValidationError as e:
            raise ConfigError(f"--schedulers {name}: " + _format_error(e, {"scheduler": {"name": name}})
                              .removeprefix("invalid config: ").replace("unknown config key ", "unknown knob ")) from None
    bad = [t for t in tps if not isinstance(t, int) or not 1 <= t <= 64]
    if bad:
        raise ConfigError(f"--tp: {bad} are not tensor-parallel degrees (integers 1..64)")


def screen(cands: list[Candidate], base: dict) -> tuple[list[Candidate], dict]:
    """(candidates that can run, {candidate: why not} for the others)."""
    live, skipped = [], {}
    for c in cands:
        try:
            why = fits(c.apply(base))
        except ServesimError as e:
            why = str(e)
        if why:
            skipped[c] = why
        else:
            live.append(c)
    return live, skipped


class _Runs:
    """Drivers over one store and backend; counts add up over the plan's passes."""

    def __init__(self, store, backend, workers, address, progress):
        self.store, self.args, self.progress, self.drivers = store, (backend, workers, address), progress, []

    def driver(self, desc: str, total: int | None) -> Driver:
        d = Driver(self.store, *self.args, self.progress, desc=desc, total=total)
        self.drivers.append(d)
        return d

    def totals(self) -> dict:
        return {k: sum(getattr(d.counts, k) for d in self.drivers) for k in ("reused", "run", "failed")}


def search_capacities(live: list[Candidate], base: dict, settings: SearchSettings, run: _Runs) -> dict:
    """Each live candidate's per-replica capacity (one driver pass for all searches)."""
    searches = {}
    for i, c in enumerate(live):
        searches.update(capacity_tasks(c.apply(base), settings, tag=(i,)))
    res = run.driver("capacity probes", probe_estimate(settings, len(searches))).run(searches)
    return {c: Capacity([res[(i, seed)] for seed in settings.seeds], settings) for i, c in enumerate(live)}


def verify_fleets(live, caps, base, rate, settings, run: _Runs, max_extra: int) -> dict:
    """{candidate: verification} for every candidate with a positive capacity: its fleet sized
    from the capacity's minimum over seeds, simulated at the target rate."""
    checks = {c: _verify(c.apply(base), rate, max(1, math.ceil(rate / caps[c].min)), settings, max_extra)
              for c in live if caps[c].min > 0}
    return run.driver("fleet checks", len(checks) * len(settings.seeds)).run(checks)


def _fleet_metrics(v: dict) -> dict:
    """Means over seeds of the verification runs' p99s and SLO attainment."""
    sums = [r["summary"] for r in v["runs"] if r.get("summary")]
    if not sums:
        return {}
    mean = lambda f: sum(f(s) for s in sums) / len(sums)  # noqa: E731
    s0 = sums[0]
    out_tok = s0["throughput"]["output_tokens_per_s"] * s0["sim"]["makespan_s"]
    return {"ttft_p99_s": mean(lambda s: s["ttft_s"]["p99"]), "tpot_p99_s": mean(lambda s: s["tpot_s"]["p99"] or 0.0),
            "e2e_p99_s": mean(lambda s: s["e2e_s"]["p99"]), "slo_attainment": mean(lambda s: s["goodput"]["slo_attainment"]),
            "cost_model": s0["sim"]["cost_model"], "mean_output_tokens": out_tok / max(1, s0["requests"]["completed"]),
            "verdict": worst_verdict([(s.get("verdict") or {}).get("state") for s in sums])}



def candidate_row(c: Candidate, base: dict, rate: float, settings: SearchSettings, skipped: str | None,
                  cap: Capacity | None, v: dict | None) -> dict:
    """One row of the plan table: price, capacity, verified fleet, cost and status."""
    price, source = _gpu_price(base, c.hardware) if skipped else price_of(load_config(c.apply(base)))
    row = {"candidate": c.label, "layout": "agg", "hardware": c.hardware, "tp": c.tp, "scheduler": c.scheduler,
           "knobs": ",".join(f"{a}={b}" for a, b in c.knobs), "usd_per_gpu_hour": price, "price_source": source}
    if skipped:
        return {**row, "status": "does not fit", "note": skipped}
    row.update({"capacity_rps_min": cap.min, "capacity_rps_mean": cap.mean, "capacity_rps_max": cap.max,
                "capacity_limit": cap.per_seed[0].reason})
    if v is None:
        return {**row, "status": "SLO unreachable", "note": cap.per_seed[0].reason}
    n = v["replicas"]
    row.update({"replicas": n, "gpus": n * c.tp, "headroom": cap.min * n / rate - 1, "verified": v["verified"]})
    row.update(_fleet_metrics(v))
    row["profiled"] = row.get("cost_model") in ("profiled", "kerneldb")  # measured kernels (ours or the database's)
    if price is not None:
        row["usd_per_hour"] = n * c.tp * price
        if row.get("mean_output_tokens"):
            row["usd_per_million_output_tokens"] = row["usd_per_hour"] / (rate * row["mean_output_tokens"] * 3600) * 1e6
    if not v["verified"]:
        status, note = "fleet misses SLOs", f"{n} replicas: {v['why']}"
    elif price is None:
        status, note = "cost unknown", source
    else:
        status, note = "ok", ""
    if row.get("cost_model") and not row["profiled"]:
        note = (note + "; " if note else "") + f"unprofiled hardware ({row['cost_model']} cost model)"
    return {**row, "status": status, "note": note, "_fleet": _fleet(c.apply(base), rate, n, settings, settings.seeds[0]),
            "_keys": [r["key"] for r in v["runs"]]}


STATUS_ORDER = {"ok": 0, "cost unknown": 1, "fleet misses SLOs": 2, "SLO unreachable": 3, "does not fit": 4}


def rank(rows: list[dict]) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """The ranked table (cheapest verified first; at equal cost more headroom, then lower p99
    TTFT), and the fleet configs and run keys popped off it."""
    table = pd.DataFrame(rows)
    for col in ("usd_per_hour", "ttft_p99_s"):
        if col not in table:
            table[col] = float("nan")
    table["_order"] = table["status"].map(STATUS_ORDER)
    table["_margin"] = -table["headroom"] if "headroom" in table else 0.0
    table = table.sort_values(["_order", "usd_per_hour", "_margin", "ttft_p99_s", "candidate"], na_position="last",
                              kind="stable").drop(columns=["_order", "_margin"]).reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    fleets = table.pop("_fleet") if "_fleet" in table else pd.Series([None] * len(table))
    run_keys = table.pop("_keys") if "_keys" in table else pd.Series([None] * len(table))
    return table, fleets, run_keys


def write_chosen(table: pd.DataFrame, fleets: pd.Series, out: Path) -> dict | None:
    """The first row when it is verified and priced; its fleet written as a runnable config.yaml."""
    chosen = None
    if len(table) and table.loc[0, "status"] == "ok":
        chosen = table.loc[0].to_dict()
        fleet_cfg = load_config(fleets.iloc[0]).to_dict()
        (out / "config.yaml").write_text(
            "# servesim plan: the cheapest fleet meeting the SLOs (run it: servesim run config.yaml)\n"
            + yaml.safe_dump(fleet_cfg, sort_keys=False))
    table["chosen"] = [i == 0 and chosen is not None for i in range(len(table))]
    return chosen


def _jsonable(d):
    if d is None:
        return None
    return {k: (None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in d.items()}


def _fmt(v, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


PLAN_HEADER = ["rank", "candidate", "status", "capacity/replica (min / mean / max req/s)", "replicas", "GPUs", "$/GPU-h",
               "$/hour", "$/M out tok", "headroom", "p99 TTFT (ms)", "p99 TPOT (ms)", "load (worst run)", "cost model",
               "note"]


def plan_rows(table: pd.DataFrame) -> list[list[str]]:
    """The plan table's cells as text, columns ``PLAN_HEADER``: the one rendering of plan.md, the
    command line and the report (dollars to the cent, headroom in percent, latencies in ms)."""
    pct = lambda v: "-" if v is None or pd.isna(v) else f"{100 * v:.0f}%"  # noqa: E731
    ms = lambda v: "-" if v is None or pd.isna(v) else f"{1e3 * v:,.0f}"  # noqa: E731
    rows = []
    for r in table.to_dict("records"):
        cap = "-" if pd.isna(r.get("capacity_rps_min", float("nan"))) else \
            f"{r['capacity_rps_min']:.4g} / {r['capacity_rps_mean']:.4g} / {r['capacity_rps_max']:.4g}"
        rows.append([str(r["rank"]), r["candidate"], r["status"], cap, _fmt(r.get("replicas"), ".0f"),
                     _fmt(r.get("gpus"), ".0f"), _fmt(r.get("usd_per_gpu_hour")), _fmt(r.get("usd_per_hour"), ",.2f"),
                     _fmt(r.get("usd_per_million_output_tokens"), ",.2f"), pct(r.get("headroom")),
                     ms(r.get("ttft_p99_s")), ms(r.get("tpot_p99_s")),
                     r.get("verdict") if isinstance(r.get("verdict"), str) else "-",
                     r.get("cost_model") if isinstance(r.get("cost_model"), str) else "-", r.get("note") or ""])
    return rows


def plan_markdown(table: pd.DataFrame, meta: dict) -> str:
    slo = meta["slo"]
    lines = [f"# Fleet plan: {meta['model']} at {meta['rate']:g} req/s",
             "", f"SLOs: p99 TTFT <= {slo['ttft_p99_s']:g} s, p99 TPOT <= {slo['tpot_p99_s'] * 1e3:g} ms, every request completed.",
             "", "Prices ($/GPU-hour, source and date):", ""]
    for g, p in meta["prices"].items():
        lines.append(f"- {g}: {_fmt(p['usd_per_gpu_hour'])} ({p['source']})")
    ch = meta.get("chosen")
    lines += ["", (chosen_line(ch) if ch else "**No fleet meets the SLOs at a known price.**"), "",
              "| " + " | ".join(PLAN_HEADER) + " |", "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in plan_rows(table)]
    d = meta.get("disaggregated")
    if d:
        lines += ["", f"Disaggregated layouts: {d['layouts']} (prefill, decode) pairs of {len(d['bounds'])} (GPU, TP) units, "
                  f"{d['in_range']} within the xPyD range; the {d['verified']} cheapest by their static bound verified by "
                  f"simulation (all pairs with their bounds: layouts.parquet). Mean prompt {d['prompt_mean']:.0f}, mean "
                  f"output {d['output_mean']:.0f} tokens."]
    lines += ["", f"{meta['candidates']} candidates, {meta['skipped']} skipped; runs: {meta['runs']['reused']} reused, "
              f"{meta['runs']['run']} run, {meta['runs']['failed']} failed; {meta['wall_s']:.1f} s.", ""]
    return "\n".join(lines)


def pareto_front(cost, latency) -> list[int]:
    """Indices of the points no other point beats on both cost and latency (lower is better)."""
    pts = sorted(range(len(cost)), key=lambda i: (cost[i], latency[i]))
    front, best = [], math.inf
    for i in pts:
        if latency[i] < best:
            front.append(i)
            best = latency[i]
    return front


def plot_pareto(table: pd.DataFrame, out: Path, title: str = "") -> list[str]:
    """Cost per million output tokens (or $/hour when a fleet's token count is unknown) against
    p99 TTFT and p99 TPOT of every verified, priced fleet, aggregated and disaggregated fleets
    marked apart; the front joined."""
    from sim.metrics.plots import _plt, save

    plt = _plt()
    ok = table[(table["status"] == "ok")] if "status" in table else table.iloc[0:0]
    per_m = "usd_per_million_output_tokens"
    xcol = per_m if per_m in ok and len(ok) and ok[per_m].notna().all() else "usd_per_hour"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, col, name in ((axes[0], "ttft_p99_s", "p99 TTFT (ms)"), (axes[1], "tpot_p99_s", "p99 TPOT (ms)")):
        if len(ok) and col in ok:
            x = ok[xcol].to_numpy(float)
            y = ok[col].to_numpy(float) * 1e3
            lay = ok["layout"] if "layout" in ok else pd.Series(["agg"] * len(ok), index=ok.index)
            for (kind, hw), g in ok.groupby([lay, ok["hardware"]]):
                ax.scatter(g[xcol], g[col] * 1e3, s=30, alpha=0.8, marker="o" if kind == "agg" else "^",
                           label=f"{'aggregated' if kind == 'agg' else 'disaggregated'}: {hw}")
            front = pareto_front(list(x), list(y))
            ax.plot(x[front], y[front], color="black", lw=1, ls="--", label="Pareto front")
            for i in front:
                r = ok.iloc[i]
                tag = r["candidate"] if lay.iloc[i] != "agg" else \
                    f"{int(r['replicas'])}x {r['hardware']} tp{int(r['tp'])} {r['scheduler']}"
                ax.annotate(tag, (x[i], y[i]), fontsize=7, xytext=(4, 4), textcoords="offset points")
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no verified fleet with a known price", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("$ per million output tokens" if xcol == per_m else "fleet cost ($/hour)")
        ax.set_ylabel(name)
    unknown = int((table["status"] == "cost unknown").sum()) if "status" in table else 0
    note = f" ({unknown} fleets with unknown price not shown)" if unknown else ""
    fig.suptitle(f"Cost against latency: {title}{note}; circles aggregated, triangles disaggregated (xPyD)",
                 fontsize=10)
    files = save(fig, out, "pareto")
    plt.close(fig)
    return files


def chosen_line(ch: dict) -> str:
    """plan.md's line naming the chosen fleet."""
    if ch.get("layout") == "disagg":
        return f"**Cheapest fleet**: {ch['candidate']} = {int(ch['gpus'])} GPUs, ${ch['usd_per_hour']:.2f}/hour (disaggregated)"
    return (f"**Cheapest fleet**: {int(ch['replicas'])} x {ch['candidate']} = {int(ch['gpus'])} GPUs, "
            f"${ch['usd_per_hour']:.2f}/hour, headroom {100 * ch['headroom']:.0f}%")


# ------------------------------------------------------------------------- disaggregated fleets


def disagg_units(base: dict, gpus: list[str], tps: list[int], schedulers) -> list:
    """The (GPU, TP) units the model fits, for prefill and decode pools (``sim/sweep/fleets.py``)."""
    from sim.sweep.fleets import Unit

    name, knobs = schedulers[0]
    units = []
    for g in gpus:
        for tp in tps:
            c = Candidate(g, tp, name, knobs)
            try:
                why = fits(c.apply(base))
            except ServesimError as e:
                why = str(e)
            if not why:
                units.append(Unit(g, tp))
    return units


def search_estimate(base: dict, live: list, units: list, rate: float, s: SearchSettings, verify_top: int,
                    workers: int, budget: float | None) -> dict:
    """How long the search will take, said before it starts: the runs it needs (capacity probes
    as ``probe_estimate`` counts them, one fleet check per seed, each disaggregated layout's
    checks counted twice for growth) times the seconds of one run timed now (one replica of the
    first candidate at the target rate, sized like a probe), over the workers. With a time budget below the
    estimate, fewer disaggregated layouts are verified (at least one)."""
    from sim.sweep.capacity import probe_estimate

    per = _time_one_run(base, live, units, rate, s)
    seeds = len(s.seeds)
    agg = probe_estimate(s, len(live) * seeds) + len(live) * seeds
    dis = lambda k: 2 * (k + 2) * seeds if units else 0  # noqa: E731  (+ the cheapest of each kind)
    secs = lambda k: (agg + dis(k)) * per / max(1, workers)  # noqa: E731
    top, note = verify_top, ""
    while budget is not None and top > 1 and secs(top) > budget:
        top -= 1
    if top < verify_top:
        note = f"; the time budget ({budget:g} s) verifies {top} disaggregated layout(s) instead of {verify_top}"
    runs = agg + dis(top)
    line = (f"plan: {len(live)} aggregated candidate(s), {len(units)} (GPU, TP) unit(s) for disaggregated pools; "
            f"about {runs} runs; one run took {per:.2f} s here, so about {secs(top):.0f} s on {max(1, workers)} "
            f"worker(s){note}")
    return {"runs": runs, "seconds_per_run": per, "seconds": secs(top), "verify_top": top, "line": line}


def _time_one_run(base: dict, live: list, units: list, rate: float, s: SearchSettings) -> float:
    from sim.api import simulate
    from sim.sweep.capacity import sized

    if live:
        cfg = live[0].apply(base)
    elif units:
        cfg = set_key(set_key(base, "hardware", units[0].hardware), "parallelism.tp", units[0].tp)
    else:
        return 0.0
    cfg = set_key(set_key(sized(cfg, rate, s), "output.plots", False), "output.progress", False)
    t = time.perf_counter()
    try:
        simulate(cfg, progress=False)
    except ServesimError:
        pass
    return time.perf_counter() - t


def plan_disagg(base: dict, units: list, rate: float, s: SearchSettings, scheduler, run: "_Runs", verify_top: int,
                max_prefill: int, max_decode: int, max_extra: int, out: Path) -> tuple[list[dict], dict]:
    """The disaggregated layouts: static bounds for every pair (``layouts.parquet``), the
    ``verify_top`` cheapest verified by simulation; their rows for the plan table."""
    from sim.sweep.fleets import fleet_config, layouts, verify_layout

    name, knobs = scheduler
    sbase = set_key(base, "scheduler", {"name": name, **dict(knobs)})
    price = lambda g: _gpu_price(sbase, g)[0]  # noqa: E731
    lrows, static = layouts(sbase, units, rate, s, name, max_prefill, max_decode, price)
    pd.DataFrame([{"layout": r["layout"].label, "prefill": r["layout"].pre.label, "decode": r["layout"].dec.label,
                   "prefill_replicas": r["layout"].x, "decode_replicas": r["layout"].y,
                   "estimate_usd_per_hour": r["estimate_usd_per_hour"], "prefill_bound_rps": r["prefill_bound_rps"],
                   "decode_bound_rps": r["decode_bound_rps"], "decode_limit": r["decode_limit"],
                   "note": r["why"] or ""} for r in lrows]).to_parquet(out / "layouts.parquet", index=False)
    ready = [r for r in lrows if r["why"] is None and r["estimate_usd_per_hour"] is not None]
    todo = ready[:verify_top]
    if verify_top:  # and the cheapest of each kind (one GPU type, mixed GPUs) when the top ones are all of one
        for mixed in (False, True):
            kind = [r for r in ready if (r["layout"].pre.hardware != r["layout"].dec.hardware) == mixed]
            if kind and not any(r is kind[0] for r in todo):
                todo.append(kind[0])
    checks = {r["layout"]: verify_layout(sbase, r["layout"], rate, s, max_extra) for r in todo}
    ver = run.driver("disaggregated fleet checks", 2 * len(checks) * len(s.seeds)).run(checks) if checks else {}
    rows = []
    for r in todo:
        lay, v = r["layout"], ver[r["layout"]]
        x, y = v["x"], v["y"]
        pa, sa = _gpu_price(sbase, lay.pre.hardware)
        pb, sb = _gpu_price(sbase, lay.dec.hardware)
        gpus = x * lay.pre.tp + y * lay.dec.tp
        label = f"{x}P {lay.pre.label} + {y}D {lay.dec.label} {name}"
        row = {"candidate": label, "layout": "disagg", "hardware": f"{lay.pre.hardware}+{lay.dec.hardware}",
               "scheduler": name, "knobs": ",".join(f"{a}={b}" for a, b in knobs), "replicas": x + y, "gpus": gpus,
               "prefill_replicas": x, "prefill_hardware": lay.pre.hardware, "prefill_tp": lay.pre.tp,
               "decode_replicas": y, "decode_hardware": lay.dec.hardware, "decode_tp": lay.dec.tp,
               "estimate_usd_per_hour": r["estimate_usd_per_hour"], "verified": v["verified"],
               "price_source": sa if lay.pre.hardware == lay.dec.hardware else f"prefill: {sa}; decode: {sb}"}
        row.update(_fleet_metrics(v))
        row["profiled"] = row.get("cost_model") in ("profiled", "kerneldb")
        if pa is not None and pb is not None:
            row["usd_per_hour"] = x * lay.pre.tp * pa + y * lay.dec.tp * pb
            row["usd_per_gpu_hour"] = row["usd_per_hour"] / gpus
            if row.get("mean_output_tokens"):
                row["usd_per_million_output_tokens"] = row["usd_per_hour"] / (rate * row["mean_output_tokens"] * 3600) * 1e6
        status, note = ("ok", "") if v["verified"] else ("fleet misses SLOs", f"{x}P{y}D: {v['why']}")
        if row.get("cost_model") and not row["profiled"]:
            note = (note + "; " if note else "") + f"unprofiled hardware ({row['cost_model']} cost model)"
        rows.append({**row, "status": status, "note": note,
                     "_fleet": fleet_config(sbase, lay, x, y, rate, s, s.seeds[0]), "_keys": [q["key"] for q in v["runs"]]})
    static = {**static, "layouts": len(lrows), "verified": len(todo),
              "in_range": sum(r["why"] is None for r in lrows)}
    return rows, static
