"""The measured error of the kernel-database cost model around a run's TTFT and TPOT percentiles.

``error_bands.json`` (beside this module; written by ``experiments/error_bands.py`` from a
``servesim validate-silicon`` run) holds, per group of measured serving runs (framework x GPU x
weight dtype x concurrency band), the 10th and 90th percentiles of the signed error of the
predicted mean TTFT and TPOT (predicted / measured - 1), over the rows no fit touched (held out:
``sim/compare/silicon_fits.json``).

A run priced by the kernel database is matched to the nearest validated group: its framework,
GPU and dtype at its concurrency band (the mean number of requests in flight per replica: the sum
of the completed requests' E2E over the makespan, as the benchmarks' concurrency counts clients),
else the nearest band of that framework, GPU and dtype, else of that framework and GPU (the match
is named). A percentile v with errors [e_lo, e_hi] gives the measured values the group's
residuals allow, v / (1 + e_hi) to v / (1 + e_lo), widened to include v itself (a group whose
errors all lie on one side still brackets the point estimate). A run with no such group, or not
priced by the kernel database, says so.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

BANDS_FILE = Path(__file__).with_name("error_bands.json")
BUCKETS = ((1, 8, "1-8"), (9, 32, "9-32"), (33, 127, "33-127"), (128, 10**9, "128+"))
"""Concurrency bands, as validate-silicon groups its rows (``sim.compare.silicon.BUCKETS``)."""
ORDER = [b[2] for b in BUCKETS]


@lru_cache(maxsize=1)
def _table() -> dict:
    if not BANDS_FILE.is_file():
        return {"groups": [], "source": "no error_bands.json"}
    return json.loads(BANDS_FILE.read_text())


def band_of(concurrency: float) -> str:
    c = max(1, round(concurrency))
    return next(name for lo, hi, name in BUCKETS if lo <= c <= hi)


def nearest_group(framework: str, hardware: str, dtype: str, concurrency: float, table: dict | None = None):
    """(group, how it matched) or (None, why not)."""
    groups = (table or _table())["groups"]
    want = band_of(concurrency)

    def dist(g):
        return abs(ORDER.index(g["concurrency"]) - ORDER.index(want))

    for keys, how in ((("framework", "hardware", "dtype"), "this framework, GPU and dtype"),
                      (("framework", "hardware"), "this framework and GPU, another dtype")):
        mine = {"framework": framework, "hardware": hardware, "dtype": dtype}
        cands = [g for g in groups if all(g[k] == mine[k] for k in keys)]
        if cands:
            g = min(cands, key=lambda g: (dist(g), -g["rows"], g["dtype"], g["concurrency"]))
            if dist(g) == 0 and len(keys) == 3:
                return g, "exact group"
            return g, f"nearest validated group ({how}, concurrency {g['concurrency']} for {want})"
    return None, f"no validation for this group ({framework} on {hardware}, {dtype}, concurrency {want})"


CAVEAT = ("measured on closed-loop benchmarks' mean TTFT and TPOT; applied here to percentiles and to this run's "
          "arrivals, which no measured run validates")


def widen(v: float | None, err: list[float]) -> list[float] | None:
    """The measured values a prediction ``v`` allows under errors [lo, hi] (pred / meas - 1),
    widened to contain ``v``."""
    if v is None:
        return None
    lo_e, hi_e = err
    a, b = v / (1.0 + hi_e), v / (1.0 + lo_e)
    return [min(v, a, b), max(v, a, b)]


def error_band(cost_info: dict | None, cost_source: str, hardware: str, dtype: str, concurrency: float,
               ttft: dict, tpot: dict, table: dict | None = None) -> dict:
    """The ``error_band`` block of summary.json."""
    if cost_source != "kerneldb" or not cost_info or not cost_info.get("framework"):
        return {"note": f"no measured error band: bands are measured for the kernel database only (this run: "
                        f"{cost_source})"}
    t = table or _table()
    fw = cost_info["framework"]
    g, how = nearest_group(fw, hardware, dtype, concurrency, t)
    run = {"framework": fw, "hardware": hardware, "dtype": dtype, "concurrency": round(concurrency, 2),
           "concurrency_band": band_of(concurrency)}
    if g is None:
        return {"note": how, "run": run}
    return {"group": {k: g[k] for k in ("framework", "hardware", "dtype", "concurrency")}, "match": how, "run": run,
            "rows": g["rows"], "source": t.get("source"), "caveat": CAVEAT,
            "ttft_error": g["ttft_error"], "tpot_error": g["tpot_error"],
            "ttft_s": {p: widen(ttft.get(p), g["ttft_error"]) for p in ("p50", "p90", "p99")},
            "tpot_s": {p: widen(tpot.get(p), g["tpot_error"]) for p in ("p50", "p90", "p99")}}


def band_lines(b: dict | None, s: dict, fmt=None) -> list[str]:
    """Lines for the run table: each percentile with the group's measured error (durations
    written by ``fmt``, seconds -> text)."""
    fmt = fmt or _ms
    if not b:
        return []
    if "group" not in b:
        return [f"error band: {b['note']}"]
    g = b["group"]
    head = (f"error band: the cost model's error measured on {b['rows']} held-out benchmark runs ({g['framework']}, "
            f"{g['hardware']}, {g['dtype']}, concurrency {g['concurrency']}: {b['match']}; errors of the runs' means, "
            "applied to these percentiles)")
    out = [head]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        lo, hi = b[key.replace("_s", "_error")]
        vals = ", ".join(f"{p} {fmt(s[key][p])} [{fmt(b[key][p][0])} - {fmt(b[key][p][1])}]"
                         for p in ("p50", "p90", "p99") if b[key].get(p))
        out.append(f"  {name}: error {100 * lo:+.0f}% to {100 * hi:+.0f}%: {vals}")
    return out


def _ms(v: float) -> str:
    return f"{v * 1e3:,.1f} ms" if v < 10 else f"{v:,.2f} s"
