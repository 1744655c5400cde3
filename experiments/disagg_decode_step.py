"""The decode step of the disaggregated rows' decode pools, operator by operator (issue 26 item 5;
docs/kernel_database.md, "Disaggregated rows", the decode-step comparison).

    python experiments/disagg_decode_step.py                 # step / measured TPOT by group
    python experiments/disagg_decode_step.py --ops deepseek-r1 b200 nvfp4 8 8 2 1536
    python experiments/disagg_decode_step.py --dp             # SGLang attention-DP decode workers

The first form prices, for every TRT-LLM disaggregated row without attention-DP decode workers on
B200, GB200 and GB300, one decode step of its decode pool (the pool's own cost model, as
``validate-silicon --modes disagg`` builds it) at the batch each decode worker holds (the clients
over the decode workers, at most the recipe's ``max_batch_size``) and the mean context (prompt +
half the output), and prints the median of that step over the measured TPOT by system, precision
and expert parallelism: a proxy of the replay's TPOT that needs no simulation (a decode worker
without speculation emits one token per step). The second prints one decode step of a config
(model, GPU, dtype, tp, ep, batch, context; TRT-LLM tables, fp8 KV cache) by operator, as the
kernel database prices it. ``--dp`` prices, for every SGLang disaggregated row with attention-DP
decode workers, one synchronised step of its decode pool's expert group (``dp_step``'s composition:
a rank's own part at the batch each rank holds, the clients over decode workers x ranks, plus the
routed experts and the exchange for the group's tokens) and prints it by operator group.
"""
from __future__ import annotations

import argparse
import math

import pandas as pd


def breakdown(model: str, hw: str, dtype: str, tp: int, ep: int, n: int, ctx: int) -> None:
    from sim.catalog import get_hardware, get_model
    from sim.config import load_config
    from sim.cost import make_cost_model

    cfg = load_config({"model": model, "hardware": hw, "dtype": dtype,
                       "parallelism": {"tp": tp, **({"ep": ep} if ep > 1 else {})}, "kv": {"dtype": "fp8"},
                       "cost": {"model": "kerneldb", "framework": "trtllm"}, "workload": {"num_requests": 1}})
    cm = make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))
    s, L = cm.shapes, cm.model.num_layers
    rows = [(op, L, cm.gemm(op, n)) for op in s.attn_gemms]
    rows += [(op, s.dense_layers, cm.gemm(op, n)) for op in ("gate_up", "down") if s.dense_layers]
    rows += [(op, s.moe_layers, cm.gemm(op, n)) for op in ("router", "shared_gate_up", "shared_down") if op in s.gemms]
    rows += [("routed experts", s.moe_layers, cm.moe(n)), ("lm_head", 1, cm.gemm("lm_head", n))]
    for op, times, t in rows:
        print(f"  {op:<16} x{times:<3} {1e6 * t:8.2f} us  {1e3 * times * t:7.3f} ms")
    st = cm.decode_step(n, n * ctx, ctx)
    print("  step: " + ", ".join(f"{k} {1e3 * getattr(st, k):.3f} ms"
                                 for k in ("total", "gemm", "attn_decode", "comm", "other_gpu", "cpu")))
    print("  " + "; ".join(cm.notes))


def proxy() -> pd.DataFrame:
    from sim.catalog import get_model
    from sim.cluster.pools import fleet, pool_parts
    from sim.compare import silicon as s
    from sim.config import load_config

    sel, _ = s.select_disagg(pd.read_csv(s.csv_path()))
    sel = sel[(sel.backend == "trtllm") & (sel.d_dp == 1) & sel.system.isin(["b200_sxm", "gb200", "gb300"])
              & (sel.speculative != "mtp")]
    out, models = [], {}
    for _, r in sel.iterrows():
        cfg = load_config(s.row_config(r, "kerneldb", s.client_for(r, "auto")))
        dec = next(p for p in fleet(cfg) if p.role == "decode")
        if dec.key not in models:
            models[dec.key] = pool_parts([dec], get_model(cfg.model), True)[dec.key][2]
        b = math.ceil(r.concurrency / r.d_workers)
        b = min(b, s.disagg_limits(r)[1].get("max_num_seqs") or b)
        ctx = int(r.isl) + int(r.osl) // 2
        step = models[dec.key].decode_step(b, b * ctx, ctx).total * 1e3
        out.append({"model": r.model, "system": r.system, "precision": r.precision, "decode": f"tp{r.d_tp} ep{r.d_ep}",
                    "ratio": step / r.silicon_tpot_ms})
    return pd.DataFrame(out)


def dp_proxy() -> pd.DataFrame:
    from sim.catalog import get_model
    from sim.cluster.pools import fleet, pool_parts
    from sim.compare import silicon as s
    from sim.config import load_config
    from sim.cost.expert_parallel import rank_part
    from sim.errors import ServesimError
    from sim.types import BatchShape

    sel, _ = s.select_disagg(pd.read_csv(s.csv_path()))
    sel = sel[(sel.backend == "sglang") & (sel.d_dp > 1)]
    out, models = [], {}
    for _, r in sel.iterrows():
        try:
            cfg = load_config(s.row_config(r, "kerneldb", s.client_for(r, "auto")))
        except ServesimError:  # (a pool that does not fit its GPU)
            continue
        dec = next(p for p in fleet(cfg) if p.role == "decode")
        if dec.key not in models:
            models[dec.key] = pool_parts([dec], get_model(cfg.model), True)[dec.key][2]
        cm, dp = models[dec.key], int(r.d_dp)
        b = math.ceil(r.concurrency / (r.d_workers * dp))
        ctx = int(r.isl) + int(r.osl) // 2
        own = rank_part(cm, BatchShape((1,) * b, (ctx,) * b, tp=int(r.d_tp)))
        moe, ex = cm.shapes.moe_layers * cm.moe(b * dp), cm.shapes.moe_layers * cm.dp_exchange(b * dp)
        step = (own + moe + ex) * 1e3
        out.append({"system": r.system, "precision": r.precision, "decode": f"dp{dp} ep{r.d_ep}",
                    "exchange": dec.cfg.cost.moe_dispatch, "clients": int(r.concurrency), "batch": b,
                    "measured": r.silicon_tpot_ms, "step": step, "rank": own * 1e3, "experts": moe * 1e3,
                    "exch": ex * 1e3, "ratio": step / r.silicon_tpot_ms})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs=7, metavar=("MODEL", "GPU", "DTYPE", "TP", "EP", "BATCH", "CONTEXT"))
    ap.add_argument("--dp", action="store_true", help="SGLang attention-DP decode workers")
    a = ap.parse_args()
    if a.dp:
        d = dp_proxy()
        pd.set_option("display.width", 200)
        print(d.sort_values(["system", "precision", "decode", "clients"]).round(2).to_string(index=False))
        g = d.groupby(["system", "precision", "decode", "exchange"]).ratio.agg(["count", "median"])
        print(g.rename(columns={"median": "step / measured TPOT (median)"}).round(2).to_string())
        print(f"all {len(d)} rows: median {d.ratio.median():.2f}, APE median {(d.ratio - 1).abs().median():.1%}")
        return
    if a.ops:
        m, hw, dt, tp, ep, n, ctx = a.ops
        breakdown(m, hw, dt, int(tp), int(ep), int(n), int(ctx))
        return
    d = proxy()
    g = d.groupby(["model", "system", "precision", "decode"]).ratio.agg(["count", "median"])
    print(g.rename(columns={"median": "step / measured TPOT (median)"}).round(2).to_string())
    print(f"all {len(d)} rows: median {d.ratio.median():.2f}, APE median {(d.ratio - 1).abs().median():.1%}")


if __name__ == "__main__":
    main()
