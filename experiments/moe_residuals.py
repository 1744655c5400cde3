"""Residuals of ``servesim validate-silicon`` on the MoE and Qwen3 rows, grouped (issue 20; docs/kernel_database.md,
"Accuracy on the MoE and Qwen3 rows"). Reads the ``predictions.parquet`` of a validate-silicon run (kerneldb);
``--mtp-ab`` also replays the rows measured with MTP without it (the before of that fix).

    python experiments/moe_residuals.py results/vs_moe/predictions.parquet
    python experiments/moe_residuals.py results/vs_moe/predictions.parquet --mtp-ab

Prints the held-out rows' APE of TPOT and TTFT (median / p90) and the median predicted / measured
TPOT, by model, by (backend, system, dtype, parallelism) and by concurrency bucket, the groups with
the most rows off by more than 30% in TPOT first; the InferenceMAX DeepSeek-R1 TRT-LLM rows by what
the launch configuration says (mtp, none, unknown).
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

TARGETS = "targets: TPOT median <= 12%, p90 <= 30%; TTFT median <= 20%"


def with_errors(d: pd.DataFrame, cm: str = "kerneldb") -> pd.DataFrame:
    d = d[d[f"{cm}_tpot_ms"].notna()]
    dp = d["dp"].fillna(1).astype(int) if "dp" in d else 1
    par = ("tp" + d["tp"].astype(int).astype(str) + np.where(d["ep"].astype(int) > 1, " ep" + d["ep"].astype(int).astype(str), "")
           + np.where(dp > 1, " dp" + pd.Series(dp, index=d.index).astype(str), ""))
    r_tpot, r_ttft = d[f"{cm}_tpot_ms"] / d["silicon_tpot_ms"], d[f"{cm}_ttft_ms"] / d["silicon_ttft_ms"]
    return d.assign(parallelism=par, r_tpot=r_tpot, r_ttft=r_ttft, tpot_ape=(r_tpot - 1).abs(), ttft_ape=(r_ttft - 1).abs())


def table(d: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    g = d.groupby(by, dropna=False)
    t = pd.DataFrame({"rows": g.size(),
                      "tpot_med": g["tpot_ape"].median(), "tpot_p90": g["tpot_ape"].quantile(0.9),
                      "ttft_med": g["ttft_ape"].median(), "ttft_p90": g["ttft_ape"].quantile(0.9),
                      "tpot_ratio": g["r_tpot"].median(), "ttft_ratio": g["r_ttft"].median(),
                      "tpot_off_30": g["tpot_ape"].apply(lambda s: int((s > 0.3).sum()))})
    return t.sort_values(["tpot_off_30", "rows"], ascending=False)


def overall(d: pd.DataFrame, name: str) -> str:
    return (f"{name:<44}{len(d):>6}  TPOT {100 * d.tpot_ape.median():5.1f}% / {100 * d.tpot_ape.quantile(0.9):5.1f}%"
            f"  TTFT {100 * d.ttft_ape.median():5.1f}% / {100 * d.ttft_ape.quantile(0.9):5.1f}%"
            f"  TPOT pred/meas {d.r_tpot.median():.2f}")


def mtp_ab(d: pd.DataFrame, rounds: int = 4, frontend_s: float = 0.02) -> pd.DataFrame:
    """The MTP rows replayed without MTP (the replay before the fix), beside their predictions with it."""
    from sim.compare import silicon

    rows, _ = silicon.select(pd.read_csv(silicon.csv_path()), models=sorted(set(d["model"])))
    rows = rows[rows["id"].isin(d.loc[d["speculative"] == "mtp", "id"])]
    out = []
    for _, r in rows.iterrows():
        res = silicon.replay((r.to_dict() | {"speculative": "none"}, "kerneldb", rounds, (), "none", "auto", frontend_s))
        out.append({"id": r["id"], "plain_tpot_ms": res.get("tpot_ms"), "plain_ttft_ms": res.get("ttft_ms")})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", nargs="?", default="results/vs_moe/predictions.parquet")
    ap.add_argument("--mtp-ab", action="store_true", help="replay the MTP rows without MTP too")
    a = ap.parse_args()
    pd.set_option("display.width", 220), pd.set_option("display.max_rows", 200)
    d = with_errors(pd.read_parquet(a.predictions))
    held = d[d["fitted_by"] == ""]
    print(f"{len(held)} held-out rows of {len(d)} ({TARGETS})")
    moe = held[held["model"] != "qwen3-32b"]
    for name, part in (("MoE and Qwen3 rows (all held out)", held), ("MoE models (all but Qwen3-32B)", moe),
                       ("attention-DP rows", held[held["dp"].fillna(1) > 1]),
                       ("expert-parallel rows (ep > 1, no DP)", held[(held["ep"] > 1) & (held["dp"].fillna(1) == 1)])):
        if len(part):
            print(overall(part, name))
    for kind in ("mtp", "none", "unknown"):
        part = held[held["speculative"] == kind]
        if len(part):
            print(overall(part, f"DeepSeek-R1 TRT-LLM, launch config: {kind}"))
    f = lambda t: t.assign(**{c: (100 * t[c]).round(1) for c in ("tpot_med", "tpot_p90", "ttft_med", "ttft_p90")}).round(2)  # noqa: E731
    print("\nby model\n" + f(table(held, ["model"])).to_string())
    print("\nby backend, system, dtype, parallelism (groups of 3+ rows)")
    t = table(held, ["backend", "system", "dtype", "parallelism"])
    print(f(t[t["rows"] >= 3]).to_string())
    print("\nby backend and concurrency bucket\n" + f(table(held, ["backend", "bucket"])).to_string())
    if a.mtp_ab:
        ab = mtp_ab(held)
        m = held[held["speculative"] == "mtp"].merge(ab, on="id")
        r_tpot, r_ttft = m["plain_tpot_ms"] / m["silicon_tpot_ms"], m["plain_ttft_ms"] / m["silicon_ttft_ms"]
        before = m.assign(r_tpot=r_tpot, r_ttft=r_ttft, tpot_ape=(r_tpot - 1).abs(), ttft_ape=(r_ttft - 1).abs())
        print("\nthe rows measured with MTP, replayed without it (before) and with it (after):")
        print(overall(before, "before: no speculation"))
        print(overall(m, "after: MTP, 85% acceptance"))


if __name__ == "__main__":
    main()
