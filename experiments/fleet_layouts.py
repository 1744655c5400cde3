"""Aggregated, disaggregated and mixed-GPU fleets for a design review: for a dense model
(Llama-3.1-70B) and an MoE model (Mixtral-8x7B) at a target rate and SLO, the cheapest verified
fleet of each kind, with $/hour and $ per million output tokens, as the prompt/output ratio
changes (short chat, 8k-prompt RAG, long reasoning outputs).

    python experiments/fleet_layouts.py --out results/fleet_layouts [--quick] [--replot]

Each (model, workload) is one ``servesim plan`` over GPUs x TPs with ``--layouts agg,disagg``
(``sim/sweep/plan.py``, ``sim/sweep/fleets.py``): the aggregated candidates' capacities are
searched and their fleets verified; every xPyD pair is bounded statically and the cheapest
``--verify-top`` pairs verified by simulation. From the ranked table: the best aggregated fleet,
the best disaggregated fleet with one GPU type, and the best disaggregated fleet whose prefill and
decode pools use different GPUs (mixed). Writes ``results.csv`` and
``figures/fleet_layouts.{png,svg}``; each plan's folder is kept under ``plans/`` (a rerun reuses
its runs). First-pass search settings (1 seed, 600 requests per probe, 5% tolerance): read the
figures as a first pass, not as sized fleets.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pandas as pd

from sim.sweep.capacity import SearchSettings
from sim.sweep.plan import plan

WORKLOADS = {
    # the default conversation lengths (Azure LLM inference trace 2023, conversation: docs/workloads.md)
    "chat": {},
    "rag 8k prompt": {"prompt": {"kind": "lognormal", "median": 8000, "sigma": 0.2, "min": 1000, "max": 16000},
                      "output": {"kind": "lognormal", "median": 200, "sigma": 0.5, "min": 1, "max": 1024}},
    "reasoning": {"prompt": {"kind": "lognormal", "median": 1000, "sigma": 0.5, "min": 1, "max": 4096},
                  "output": {"kind": "lognormal", "median": 1500, "sigma": 0.5, "min": 1, "max": 4096}},
}
MODELS = {"llama-3.1-70b": {"rate": 4.0, "tps": [2, 4, 8]}, "mixtral-8x7b": {"rate": 8.0, "tps": [1, 2, 4]}}
GPUS = ["h100-sxm", "a100-80gb", "h200-sxm"]
KINDS = ("aggregated", "disaggregated, one GPU type", "disaggregated, mixed GPUs")


def best(table: pd.DataFrame) -> dict:
    """The cheapest verified, priced fleet of each kind in a plan table (None where none)."""
    ok = table[table["status"] == "ok"].sort_values("usd_per_hour", kind="stable")
    agg = ok[ok["layout"] == "agg"]
    dis = ok[ok["layout"] == "disagg"] if "layout" in ok else ok.iloc[0:0]
    same = dis[dis["prefill_hardware"] == dis["decode_hardware"]] if len(dis) else dis
    mixed = dis[dis["prefill_hardware"] != dis["decode_hardware"]] if len(dis) else dis
    return {k: (None if not len(f) else f.iloc[0].to_dict()) for k, f in zip(KINDS, (agg, same, mixed))}


def run_all(out: Path, quick: bool, workers: int) -> pd.DataFrame:
    s = SearchSettings(seeds=(0,), rel_tol=0.05 if not quick else 0.2, min_requests=600 if not quick else 150)
    rows = []
    models = MODELS if not quick else {"llama-3.1-70b": {"rate": 2.0, "tps": [4, 8]}}
    for model, m in models.items():
        for wname, wl in WORKLOADS.items():
            base = {"workload": {**wl, "num_requests": s.min_requests}}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = plan(model, m["rate"], gpus=GPUS if not quick else ["h100-sxm", "h200-sxm"], tps=m["tps"],
                           schedulers=[("vllm_v1", ())], settings=s, out=out / "plans" / f"{model}-{wname.split()[0]}",
                           base=base, workers=workers, progress=False, layouts=("agg", "disagg"),
                           verify_top=4 if not quick else 2)
            for kind, r in best(res.table).items():
                rows.append({"model": model, "workload": wname, "rate": m["rate"], "kind": kind,
                             "fleet": None if r is None else (r["candidate"] if r["layout"] == "disagg"
                                                              else f"{int(r['replicas'])} x {r['candidate']}"),
                             "gpus": None if r is None else r["gpus"],
                             "usd_per_hour": None if r is None else r["usd_per_hour"],
                             "usd_per_million_output_tokens": None if r is None else r.get("usd_per_million_output_tokens"),
                             "ttft_p99_s": None if r is None else r["ttft_p99_s"],
                             "tpot_p99_s": None if r is None else r["tpot_p99_s"]})
                x = rows[-1]
                print(f"{model:14s} {wname:14s} {kind:14s} "
                      + ("none verified" if r is None else f"{x['fleet']}: ${x['usd_per_hour']:.2f}/h, "
                         f"${x['usd_per_million_output_tokens']:.2f}/M tok"), flush=True)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, out: Path) -> list[str]:
    from sim.metrics.plots import _plt, save

    plt = _plt()
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        d = df[df["model"] == model]
        works = list(dict.fromkeys(d["workload"]))
        ax.set_yscale("log")  # (RAG's short outputs cost an order of magnitude more per output token)
        low = 0.5 * d["usd_per_million_output_tokens"].min()
        ax.set_ylim(low, 3 * d["usd_per_million_output_tokens"].max())
        w = 0.8 / len(KINDS)
        for k, kind in enumerate(KINDS):
            vals = [d[(d["workload"] == wl) & (d["kind"] == kind)]["usd_per_million_output_tokens"] for wl in works]
            ys = [float(v.iloc[0]) if len(v) and pd.notna(v.iloc[0]) else float("nan") for v in vals]
            bars = ax.bar([i + (k - 1) * w for i in range(len(works))], [0 if pd.isna(y) else y for y in ys], w,
                          label=kind)
            for b, y in zip(bars, ys):
                ax.annotate("none\nverified" if pd.isna(y) else f"{y:.2f}", (b.get_x() + b.get_width() / 2,
                            low if pd.isna(y) else y), ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(works)), works)
        ax.set_ylabel("$ per million output tokens (log)")
        ax.set_title(f"{model} at {d['rate'].iloc[0]:g} req/s", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("Cheapest verified fleet of each kind (p99 TTFT <= 2 s, p99 TPOT <= 100 ms; first-pass search)",
                 fontsize=10)
    files = save(fig, out / "figures", "fleet_layouts")
    plt.close(fig)
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/fleet_layouts"))
    ap.add_argument("--quick", action="store_true", help="one model, two GPUs, coarse search (a smoke test)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--replot", action="store_true", help="draw the figure again from OUT/results.csv")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.replot:
        df = pd.read_csv(a.out / "results.csv")
    else:
        df = run_all(a.out, a.quick, a.workers)
        df.to_csv(a.out / "results.csv", index=False)
    for f in plot(df, a.out):
        print("wrote", f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
