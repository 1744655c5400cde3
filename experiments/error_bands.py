"""The measured error of the kernel-database cost model per group of measured serving runs, from
a ``servesim validate-silicon`` run; writes ``sim/metrics/error_bands.json`` (committed: every
kernel-database run's summary carries its group's band, ``sim/metrics/error_band.py``).

Only rows no fit touched count (``fitted_by`` empty: ``sim/compare/silicon_fits.json``). Per
group (framework x GPU x weight dtype x concurrency band) with at least ``MIN_ROWS`` such rows:
the 10th and 90th percentiles (linear interpolation) of predicted / measured - 1 of the mean
TTFT and of the mean TPOT. Run from the repository root:

    servesim validate-silicon --models llama-3.1-8b,llama-3.1-70b --cost-model kerneldb --sample 300 \\
        --workers 2 --no-plots --out results/vs300
    python experiments/error_bands.py results/vs300/predictions.parquet
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
MIN_ROWS = 3
"""Fewer rows than this give no band (the group then counts as not validated)."""


def main(path: str) -> int:
    d = pd.read_parquet(path)
    d = d[(d["fitted_by"] == "") & d["kerneldb_ttft_ms"].notna() & d["kerneldb_tpot_ms"].notna()]
    d = d.assign(ttft_err=d["kerneldb_ttft_ms"] / d["silicon_ttft_ms"] - 1,
                 tpot_err=d["kerneldb_tpot_ms"] / d["silicon_tpot_ms"] - 1)
    groups = []
    for (fw, hw, dt, band), g in d.groupby(["backend", "hardware", "dtype", "bucket"], sort=True):
        if len(g) < MIN_ROWS:
            continue
        groups.append({"framework": fw, "hardware": hw, "dtype": dt, "concurrency": band, "rows": int(len(g)),
                       "ttft_error": [round(float(g["ttft_err"].quantile(q)), 4) for q in (0.1, 0.9)],
                       "tpot_error": [round(float(g["tpot_err"].quantile(q)), 4) for q in (0.1, 0.9)]})
    summary = json.loads((Path(path).parent / "summary.json").read_text())
    out = {"source": (f"servesim validate-silicon on {summary['csv']}: {len(d)} rows no fit touched, "
                      f"10th-90th percentile of predicted / measured - 1 per group of at least {MIN_ROWS} rows"),
           "written_by": "experiments/error_bands.py", "groups": groups}
    dest = ROOT / "sim" / "metrics" / "error_bands.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(groups)} groups from {len(d)} held-out rows -> sim/metrics/error_bands.json")
    for g in groups:
        print(f"  {g['framework']:<7} {g['hardware']:<10} {g['dtype']:<6} {g['concurrency']:>7} {g['rows']:>4} rows: "
              f"TTFT {100 * g['ttft_error'][0]:+.0f}%..{100 * g['ttft_error'][1]:+.0f}%, "
              f"TPOT {100 * g['tpot_error'][0]:+.0f}%..{100 * g['tpot_error'][1]:+.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
