"""Prefix-cache hit rate and TTFT against cache size on the Mooncake conversation trace.

    python experiments/prefix_caching.py --out results/prefix_caching

For each KV cache size (``kv.num_gpu_blocks``) it runs without prefix caching and with each
eviction policy; writes ``results.csv`` / ``results.json`` and figures of hit rate and mean /
p99 TTFT against cache size (``figures/*.png`` and ``.svg``).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from policy_common import line_figures, main, set_rate
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


METRICS = [("hit_rate", "prefix-cache hit rate (cached / prompt tokens)", False),
           ("ttft_mean_s", "mean TTFT (ms, log scale)", True, 1e3), ("ttft_p99_s", "p99 TTFT (ms, log scale)", True, 1e3)]


def plot(df: pd.DataFrame, out: Path, cfg: dict) -> None:
    line_figures(df, out, x="num_gpu_blocks", xlabel="KV cache size (blocks of 16 tokens)", series="policy",
                 metrics=METRICS, title=f"prefix caching, {cfg['model']} on {cfg['hardware']}", log_x=True)


if __name__ == "__main__":
    main(__doc__, "prefix_caching.yaml", run_all, plot)
