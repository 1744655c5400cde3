"""Paired A/B comparison: the same workload (same seed) under configs A and B.

For each seed both variants run on identical request streams, so per-seed differences cancel the
workload's noise. Per metric: the effect, the mean of (B - A) over seeds (also relative to A's
mean), and its 95% confidence interval from the paired t distribution (``scipy.stats.t``,
n - 1 degrees of freedom), with the two-sided p-value of the paired t-test. A verdict is stated
only when the interval excludes zero; otherwise "no significant difference".

A test needs independent runs, and only seeds that change the workload give them:

- a synthetic workload draws its arrivals and lengths from the seed: each seed is one run;
- a trace replays the same requests at the same times whatever the seed (unless it is sampled,
  ``trace.sample_fraction`` < 1, or a ShareGPT file whose arrivals are drawn): A/B then runs the
  first seed only and says it cannot test. ``trace.arrivals: poisson`` (``ab --resample
  arrivals``) re-draws the arrival times per seed as a Poisson process at the trace's mean rate,
  each request keeping its lengths, order and prefix: the seeds then test how the difference
  holds over arrival noise (not over other request mixes);
- one run, or seeds that all gave identical runs, "cannot test" either.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sim.config import apply_overrides, load_config
from sim.errors import ConfigError
from sim.sweep.runner import Driver, one_run
from sim.sweep.store import RunStore

# (summary path, label, unit scale, unit, lower is better)
METRICS = [
    (("ttft_s", "p50"), "p50 TTFT", 1e3, "ms", True),
    (("ttft_s", "p99"), "p99 TTFT", 1e3, "ms", True),
    (("tpot_s", "p50"), "p50 TPOT", 1e3, "ms", True),
    (("tpot_s", "p99"), "p99 TPOT", 1e3, "ms", True),
    (("e2e_s", "p50"), "p50 E2E", 1.0, "s", True),
    (("e2e_s", "p99"), "p99 E2E", 1.0, "s", True),
    (("throughput", "output_tokens_per_s"), "output throughput", 1.0, "tok/s", False),
    (("goodput", "requests_per_s"), "goodput", 1.0, "req/s", False),
    (("goodput", "slo_attainment"), "SLO attainment", 100.0, "pp", False),
    (("cost", "usd_per_million_output_tokens"), "cost per million output tokens", 1.0, "$", True),
]


def _get(summary: dict, path) -> float | None:
    v = summary
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    return None if v is None else float(v)


def paired_ci(a, b, level: float = 0.95) -> dict:
    """Mean of b - a with its paired-t confidence interval (None bounds with one pair)."""
    from scipy import stats

    d = np.asarray(b, float) - np.asarray(a, float)
    n = d.size
    mean = float(d.mean())
    if n < 2:
        return {"n": n, "mean_diff": mean, "lo": None, "hi": None, "p_value": None}
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    if sd > 0:
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    else:
        p = 0.0 if mean != 0 else 1.0
    return {"n": n, "mean_diff": mean, "lo": mean - half, "hi": mean + half, "p_value": p}


def _num(x: float) -> str:
    """3 significant digits without exponents for everyday magnitudes."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def verdict(label: str, ci: dict, scale: float, unit: str, lower_better: bool) -> str:
    lo, hi, m = ci["lo"], ci["hi"], ci["mean_diff"]
    if lo is None or (lo <= 0 <= hi):
        return "no significant difference"
    word = "lower" if m < 0 else "higher"
    better = (m < 0) == lower_better
    mag = abs(m) * scale
    a, b = sorted((abs(lo) * scale, abs(hi) * scale))
    return f"B {word} {label} by {_num(mag)} {unit} [{_num(a)}, {_num(b)}] ({'better' if better else 'worse'})"


def seed_blind(cfg: dict) -> str | None:
    """Why the seeds of ``cfg`` cannot vary its workload, or None when they do."""
    w = cfg.get("workload") or {}
    tr = w.get("trace")
    if not tr:
        return None
    if tr.get("arrivals", "recorded") == "poisson" or tr.get("sample_fraction") not in (None, 1, 1.0):
        return None
    fmt = tr.get("format", "auto")
    if fmt == "auto":
        from sim.workload.traces import detect_format

        fmt = detect_format(tr["path"])
    if fmt == "sharegpt":  # its arrivals are drawn from the seed
        return None
    return (f"the {fmt} trace {Path(tr['path']).name} replays the same requests at the same times whatever the seed, "
            "so more seeds would repeat one run")


def resampling(cfg: dict) -> str:
    """What each seed changes, in words."""
    tr = (cfg.get("workload") or {}).get("trace")
    if not tr:
        return "each seed draws its own arrivals and lengths from the synthetic workload"
    if tr.get("arrivals") == "poisson":
        return ("each seed re-draws the trace's arrival times (Poisson at its mean rate); every request keeps its "
                "lengths, order and prefix")
    if tr.get("sample_fraction") not in (None, 1, 1.0):
        return f"each seed samples a different {tr['sample_fraction']:g} of the trace's requests"
    return "each seed draws the trace's ShareGPT arrivals anew"


def ab_test(base: dict, a: list[str], b: list[str], seeds: list[int], out: str | Path, *, workers: int = 1,
            backend: str = "local", address: str | None = None, progress: bool | None = None) -> dict:
    """Run both variants on every seed, write ab.json and ab.md into ``out``; return the result."""
    if not seeds:
        raise ConfigError("ab needs at least one seed")
    cfg_a, cfg_b = apply_overrides(base, a), apply_overrides(base, b)
    for name, cfg in (("A", cfg_a), ("B", cfg_b)):  # both variants valid before anything runs
        try:
            load_config(cfg)
        except ConfigError as e:
            raise ConfigError(f"variant {name} ({' '.join((a, b)[name == 'B']) or 'the base'}): {e}") from None
    blind = seed_blind(cfg_a) or seed_blind(cfg_b)
    if blind:
        seeds = seeds[:1]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = {}
    for s in seeds:
        tasks[("a", s)] = one_run({**cfg_a, "seed": s})
        tasks[("b", s)] = one_run({**cfg_b, "seed": s})
    driver = Driver(RunStore(out), backend, workers, address, progress, desc="a/b", total=len(tasks))
    res = driver.run(tasks)
    failed = [f"{v} seed {s}: {res[(v, s)]['error'].splitlines()[0]}" for (v, s) in tasks if res[(v, s)]["status"] != "ok"]
    ok_seeds = [s for s in seeds if res[("a", s)]["status"] == "ok" and res[("b", s)]["status"] == "ok"]
    why = cannot_test(blind, [res[(v, s)]["summary"] for s in ok_seeds for v in "ab"], len(ok_seeds))
    metrics = []
    for path, label, scale, unit, lower in METRICS:
        pairs = [(_get(res[("a", s)]["summary"], path), _get(res[("b", s)]["summary"], path)) for s in ok_seeds]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        if not pairs:
            continue
        xa, xb = zip(*pairs)
        ci = paired_ci(xa, xb) if why is None else {"n": len(pairs), "mean_diff": float(np.mean(xb) - np.mean(xa)),
                                                   "lo": None, "hi": None, "p_value": None}
        mean_a = float(np.mean(xa))
        rel = {k: (ci[k] / abs(mean_a) if ci[k] is not None and mean_a else None) for k in ("mean_diff", "lo", "hi")}
        metrics.append({"metric": ".".join(path), "label": label, "unit": unit, "scale": scale,
                        "lower_is_better": lower, "mean_a": mean_a, "mean_b": float(np.mean(xb)), **ci,
                        "relative": {"mean_diff": rel["mean_diff"], "lo": rel["lo"], "hi": rel["hi"]},
                        "verdict": "cannot test" if why else verdict(label, ci, scale, unit, lower)})
    result = {"kind": "ab", "a": a, "b": b, "seeds": seeds, "paired_seeds": ok_seeds, "failed": failed,
              "test": {"name": TEST_NAME, "independent_runs": 0 if why else len(ok_seeds), "can_test": why is None,
                       "why_not": why, "resampling": resampling(cfg_a)},
              "runs": {"reused": driver.counts.reused, "run": driver.counts.run, "failed": driver.counts.failed},
              "keys": {f"{v}:{s}": res[(v, s)]["key"] for (v, s) in tasks}, "metrics": metrics}
    (out / "ab.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "ab.md").write_text(ab_markdown(result))
    return result


TEST_NAME = "paired t-test over seeds (two-sided; 95% confidence interval of the mean difference, n - 1 df)"


def cannot_test(blind: str | None, summaries: list[dict], runs: int) -> str | None:
    """Why no test can be made, or None: seeds that cannot vary the workload, fewer than two
    paired runs, or runs identical across seeds (``summaries``: A and B of each seed, in turn)."""
    if blind:
        return (f"cannot test: {blind}; ran seed 0 only. Re-draw the arrival times per seed with "
                "--resample arrivals (workload.trace.arrivals=poisson), or compare the one run without a test")
    if runs < 2:
        return "cannot test with one run (give --seeds 2 or more)"
    sig = [json.dumps({k: v for k, v in s.items() if k != "sim"}, sort_keys=True) for s in summaries]
    if len(set(sig[0::2])) == 1 and len(set(sig[1::2])) == 1:
        return f"cannot test: the {runs} seeds gave identical runs (nothing in this config depends on the seed)"
    return None


AB_HEADER = ["metric", "A", "B", "B - A", "95% CI", "relative [95% CI]", "p", "verdict"]


def ab_intro(r: dict) -> list[str]:
    """The paragraphs above the A/B table: what was paired and tested (or why nothing could be
    tested), and the failed runs."""
    t = r.get("test") or {}
    if t.get("can_test", True):
        out = [f"Paired on {len(r['paired_seeds'])} seeds {r['paired_seeds']} (same requests per seed; "
               f"{t.get('resampling', '')}): {t.get('independent_runs', len(r['paired_seeds']))} independent runs. "
               f"Effect = B - A (and relative to A); test: {t.get('name', TEST_NAME)}."]
    else:
        out = [f"**{t['why_not'][0].upper() + t['why_not'][1:]}.** Differences below are of "
               f"{len(r['paired_seeds'])} paired run(s), without an interval."]
    if r["failed"]:
        out.append("Failed runs: " + "; ".join(r["failed"]))
    return out


def ab_rows(r: dict) -> list[list[str]]:
    """The A/B table's rows (cells as text), one per metric, columns ``AB_HEADER``."""
    rows = []
    for m in r["metrics"]:
        sc = m["scale"]
        ci = "-" if m["lo"] is None else f"[{_num(m['lo'] * sc)}, {_num(m['hi'] * sc)}]"
        sign = "+" if m["mean_diff"] > 0 else ""
        rel = m.get("relative") or {}
        rtext = "-" if rel.get("mean_diff") is None else f"{100 * rel['mean_diff']:+.1f}%" + (
            "" if rel.get("lo") is None else f" [{100 * rel['lo']:+.1f}%, {100 * rel['hi']:+.1f}%]")
        p = "-" if m.get("p_value") is None else f"{m['p_value']:.2g}"
        rows.append([f"{m['label']} ({m['unit']})", _num(m["mean_a"] * sc), _num(m["mean_b"] * sc),
                     f"{sign}{_num(m['mean_diff'] * sc)}", ci, rtext, p, m["verdict"]])
    return rows


def ab_title(r: dict) -> str:
    return f"A/B: {' '.join(r['b'])} (B) against {' '.join(r['a'])} (A)"


def ab_markdown(r: dict) -> str:
    lines = [f"# {ab_title(r)}", ""]
    for para in ab_intro(r):
        lines += [para, ""]
    lines += ["| " + " | ".join(AB_HEADER) + " |", "|---|---:|---:|---:|---|---|---:|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in ab_rows(r)]
    return "\n".join(lines) + "\n"
