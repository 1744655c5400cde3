"""Fit the engine's host overhead per framework from measured serving runs; writes
``sim/cost/engine_overhead.json`` (committed, read by the kernel-database cost model).

Method (docs/kernel_database.md): the aggregated dense-model rows of aiconfigurator-core's
``silicon_sample.csv`` at concurrency 1-8 (where queueing does not hide host time) are replayed
as closed-loop benchmarks with the kernel-database cost model and NO host overhead. The gap
between the measured and the predicted mean TPOT is then, per framework, a least-squares fit of

    gap = step_s[tp]        (>= 0; per_seq_s = 0)

since every decode step of a request adds one step overhead. A per-sequence term is not fitted:
the csv's rows at concurrency 1-8 hold only 4 and 8 clients, on different systems per
concurrency, so a term in the concurrency would absorb system differences. Only the Llama rows
(the family validate-silicon scores) are used: Qwen3's per-head q/k RMSNorm is not in the
operator composition, so its gap is not engine overhead. TTFT is not used. Held-out check: the
rows at concurrency 9+ (``servesim validate-silicon``). Run from the repository root:

    python experiments/fit_engine_overhead.py [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.compare import silicon  # noqa: E402
from sim.cost import kerneldb_data as kd  # noqa: E402

DENSE = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b"]
NO_OVERHEAD = ("cost.roofline.cpu_step_s=0", "cost.roofline.cpu_per_seq_s=0")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "sim" / "cost" / "engine_overhead.json"))
    args = ap.parse_args()
    df = pd.read_csv(silicon.csv_path())
    rows, skipped = silicon.select(df, models=DENSE)
    rows = rows[rows["concurrency"] <= 8].reset_index(drop=True)
    tasks = [(r.to_dict(), "kerneldb", 3, NO_OVERHEAD) for _, r in rows.iterrows()]
    from sim.commands.validate_silicon import _map

    res = _map(silicon.replay, tasks, args.workers, True)
    rows = rows.assign(pred_ms=[r.get("tpot_ms") for r in res]).dropna(subset=["pred_ms"])
    rows = rows.assign(gap_s=(rows["silicon_tpot_ms"] - rows["pred_ms"]) / 1e3)
    out = {"provenance": (f"fitted by experiments/fit_engine_overhead.py on aiconfigurator-core "
                          f"{kd.package_version()} silicon_sample.csv: aggregated dense-model rows at concurrency "
                          f"1-8 (Llama), gap between measured TPOT and the kernel-only kernel-database prediction, "
                          f"non-negative per-step term by TP"),
           "model": "cpu_step_s = step_s_by_tp[tp] (linear in tp between fitted values); "
                    "cpu_per_seq_s = per_seq_s (0: not identifiable from these rows)", "frameworks": {}}
    for fw, g in rows.groupby("backend"):
        tps = sorted(g["tp"].unique())
        A = np.column_stack([(g["tp"] == t).to_numpy(float) for t in tps] + [np.zeros(len(g))])
        coef, _ = nnls(A, g["gap_s"].to_numpy())
        fitted = A @ coef
        before = (g["pred_ms"] / g["silicon_tpot_ms"] - 1).abs().median()
        after = ((g["pred_ms"] + fitted * 1e3) / g["silicon_tpot_ms"] - 1).abs().median()
        out["frameworks"][fw] = {
            "step_s_by_tp": {str(int(t)): round(float(c), 7) for t, c in zip(tps, coef[:-1])},
            "per_seq_s": round(float(coef[-1]), 8), "rows": int(len(g)),
            "systems": sorted(g["system"].unique().tolist()), "models": sorted(g["model"].unique().tolist()),
            "tpot_median_ape_kernel_only": round(float(before), 4), "tpot_median_ape_with_overhead": round(float(after), 4)}
        print(fw, json.dumps(out["frameworks"][fw]))
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
