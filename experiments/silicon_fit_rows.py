"""Which measured rows of aiconfigurator-core's ``silicon_sample.csv`` a fit of servesim has
used; writes ``sim/compare/silicon_fits.json`` (committed: ``validate-silicon`` reports the rows
no fit touched apart from the others, and headlines the former). Run from the repository root:

    python experiments/silicon_fit_rows.py

The fits (docs/kernel_database.md):

- ``engine_overhead``: the per-step host overhead of ``sim/cost/engine_overhead.json``, fitted
  by ``experiments/fit_engine_overhead.py`` on the aggregated dense Llama rows at concurrency
  1-8 of each framework it lists (the systems and models it records).
- ``frontend``: the 20 ms front-end round trip (``validate-silicon --frontend-ms``), chosen on
  79 rows drawn from the 385 Llama-3.1-8B/70B rows outside the seeded 300-row sample
  (``validate-silicon --models llama-3.1-8b,llama-3.1-70b --sample 300``). Which 79 was not
  recorded, so all 385 count as used.

Rows are named by the csv's ``id`` column, so the lists stay right if the row selection changes
later. The replay settings (benchmark clients, rounds, server settings) were chosen looking at
the scored rows themselves: no row is held out from them, which the report states.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.compare import silicon  # noqa: E402
from sim.cost import kerneldb_data as kd  # noqa: E402

SAMPLE_MODELS = ["llama-3.1-8b", "llama-3.1-70b"]
SAMPLE_ROWS, SAMPLE_SEED = 300, 0  # validate-silicon --sample 300 (rows.sample(300, random_state=0))
OVERHEAD_MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b"]  # fit_engine_overhead.DENSE


def main() -> int:
    df = pd.read_csv(silicon.csv_path())
    overhead = json.loads((ROOT / "sim" / "cost" / "engine_overhead.json").read_text())
    rows, _ = silicon.select(df, models=OVERHEAD_MODELS)
    used = []
    for fw, f in overhead["frameworks"].items():
        g = rows[(rows["backend"] == fw) & (rows["concurrency"] <= 8) & rows["system"].isin(f["systems"])
                 & rows["model"].isin(f["models"])]
        if len(g) != f["rows"]:
            print(f"warning: {fw}: {len(g)} rows here, {f['rows']} in engine_overhead.json")
        used += g["id"].tolist()
    llama, _ = silicon.select(df, models=SAMPLE_MODELS)
    sample = set(llama.sample(SAMPLE_ROWS, random_state=SAMPLE_SEED)["id"])
    outside = [i for i in llama["id"] if i not in sample]
    out = {"csv": f"aiconfigurator-core {kd.package_version()} systems/silicon_sample.csv",
           "written_by": "experiments/silicon_fit_rows.py",
           "replay_settings": ("benchmark clients, rounds and server settings were chosen looking at the scored rows: "
                               "no row is held out from them"),
           "fits": {"engine_overhead": {"what": "per-step host overhead (sim/cost/engine_overhead.json): dense Llama rows "
                                                "at concurrency 1-8", "ids": sorted(str(i) for i in used)},
                    "frontend": {"what": "20 ms front-end round trip: chosen on 79 rows drawn from the Llama-3.1-8B/70B "
                                         "rows outside the seeded 300-row sample (all of them counted)",
                                 "ids": sorted(str(i) for i in outside)}}}
    dest = ROOT / "sim" / "compare" / "silicon_fits.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}: engine_overhead {len(used)} rows, frontend {len(outside)} rows, "
          f"both {len(set(used) & set(outside))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
