"""Compare every scheduling policy on the Azure conversation trace at several loads.

    python experiments/policy_comparison.py --out results/policy_comparison

Writes ``results.csv`` / ``results.json`` (one row per scheduler and load) and figures of p99
TTFT, p99 TPOT and goodput against load (``figures/*.png`` and ``.svg``).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from policy_common import line_figures, main, set_rate
from sim import simulate

METRICS = [("ttft_p99_s", "p99 TTFT (ms, log scale)", True, 1e3), ("tpot_p99_s", "p99 TPOT (ms, log scale)", True, 1e3),
           ("goodput_rps", "goodput (req/s within SLO)", False)]


def run_all(cfg: dict, exp: dict) -> pd.DataFrame:
    rows = []
    for rate in exp["rates"]:
        for name in exp["schedulers"]:
            sched = {"name": name, **exp.get("knobs", {}).get(name, {})}
            s = simulate({**set_rate(cfg, rate), "scheduler": sched}, progress=False).summary
            rows.append({"scheduler": name, "rate": rate, "completed": s["requests"]["completed"],
                         "rejected": s["requests"]["rejected"], "preemptions": s["requests"]["preemptions"],
                         "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p99_s": s["tpot_s"]["p99"],
                         "goodput_rps": s["goodput"]["requests_per_s"], "slo_attainment": s["goodput"]["slo_attainment"]})
            print(f"rate {rate:>5} {name:>10}: p99 TTFT {rows[-1]['ttft_p99_s']:.3f} s, p99 TPOT "
                  f"{rows[-1]['tpot_p99_s']:.4f} s, goodput {rows[-1]['goodput_rps']:.2f} req/s", flush=True)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, out: Path, cfg: dict) -> None:
    line_figures(df, out, x="rate", xlabel="load (requests/s)", series="scheduler", metrics=METRICS,
                 title=f"{cfg['model']} on {cfg['hardware']}: schedulers against load")


if __name__ == "__main__":
    main(__doc__, "policy_comparison.yaml", run_all, plot)
