"""Prefix-cache hit rate and TTFT against cache size on the Mooncake conversation trace.

    python experiments/prefix_caching.py --out results/prefix_caching

For each KV cache size (``kv.num_gpu_blocks``) it runs without prefix caching and with each
eviction policy; writes ``results.csv`` / ``results.json`` and figures of hit rate and mean /
p99 TTFT against cache size (``figures/*.png`` and ``.svg``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from policy_common import figure, load, parse_args, save, set_rate, set_requests
from sim import simulate


def run_all(cfg: dict, exp: dict) -> pd.DataFrame:
    cfg = set_rate(cfg, exp["rate"])
    rows = []
    for blocks in exp["num_gpu_blocks"]:
        for eviction in [None, *exp["evictions"]]:
            kv = {"num_gpu_blocks": blocks, "prefix_caching": eviction is not None, "eviction": eviction or "lru"}
            s = simulate({**cfg, "kv": kv}, progress=False).summary
            pc = s["prefix_cache"]
            rows.append({"num_gpu_blocks": blocks, "policy": eviction or "no caching", "hit_rate": pc["hit_rate"],
                         "saved_prefill_tokens": pc["saved_prefill_tokens"], "ttft_mean_s": s["ttft_s"]["mean"],
                         "ttft_p99_s": s["ttft_s"]["p99"], "completed": s["requests"]["completed"],
                         "rejected": s["requests"]["rejected"], "preemptions": s["requests"]["preemptions"]})
            print(f"{blocks:>6} blocks {rows[-1]['policy']:>10}: hit rate {pc['hit_rate']:.3f}, "
                  f"mean TTFT {s['ttft_s']['mean']:.2f} s", flush=True)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, out: Path, title: str) -> None:
    plt = figure()
    for col, label in (("hit_rate", "prefix-cache hit rate (cached / prompt tokens)"),
                       ("ttft_mean_s", "mean TTFT (s)"), ("ttft_p99_s", "p99 TTFT (s)")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name, g in df.groupby("policy", sort=False):
            ax.plot(g["num_gpu_blocks"], g[col], marker="o", label=name, ls="--" if name == "no caching" else "-")
        ax.set(xlabel="KV cache size (blocks of 16 tokens)", ylabel=label, title=title)
        if col != "hit_rate":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        save(fig, out / "figures", col)
        plt.close(fig)


def main() -> None:
    args = parse_args(__doc__, "prefix_caching.yaml")
    cfg, exp = load(args.config)
    set_requests(cfg, args.num_requests)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = run_all(cfg, exp)
    df.to_csv(out / "results.csv", index=False)
    (out / "results.json").write_text(json.dumps(df.to_dict(orient="records"), indent=1) + "\n")
    plot(df, out, f"prefix caching, {cfg['model']} on {cfg['hardware']}")
    print(f"wrote {out}/results.csv and figures/")


if __name__ == "__main__":
    main()
