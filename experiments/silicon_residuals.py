"""What the residuals of ``servesim validate-silicon`` are (docs/kernel_database.md, "What the
residuals are"). Reads the ``predictions.parquet`` of a validate-silicon run; runs no simulation.

    python experiments/silicon_residuals.py results/vs_base/predictions.parquet

Prints:
1. the groups (system, backend, client family) ranked by their rows above 35% TTFT APE, with the
   median predicted / measured TTFT and TPOT;
2. the requests waiting for a slot that the H100 TRT-LLM gap-analysis rows imply from their own
   TTFT and E2E (``implied_waiting``: three output lengths per system, TP, prompt and concurrency);
3. the prompt processing rate the gap-analysis rows on H200 imply (prompt tokens per second per
   GPU, and the FLOP rate that takes as a fraction of the H200's dense fp8 peak);
4. the B200 vLLM all-reduce priced in eager mode against CUDA-graph mode (both measured in the
   kernel database): what running prompt steps without CUDA graphs adds to a Llama-3.1-70B step.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from sim.compare.silicon import implied_waiting

H200_FP8_DENSE_TFLOPS = 1979.0  # NVIDIA H200 datasheet, FP8 tensor core, dense
LLAMA_8B = {"params": 8.03e9, "layers": 32, "hidden": 4096}


def groups(d: pd.DataFrame) -> pd.DataFrame:
    d = d.assign(r_ttft=d.kerneldb_ttft_ms / d.silicon_ttft_ms, r_tpot=d.kerneldb_tpot_ms / d.silicon_tpot_ms)
    d = d.assign(over=(d.r_ttft - 1).abs() > 0.35)
    g = d.groupby(["system", "backend", "client"]).agg(
        rows=("over", "size"), over_35=("over", "sum"), ttft_ratio=("r_ttft", "median"), tpot_ratio=("r_tpot", "median"))
    return g.sort_values("over_35", ascending=False)


def waiting(d: pd.DataFrame) -> pd.DataFrame:
    h = d[(d.system == "h100_sxm") & (d.backend == "trtllm")]
    e2e = h.silicon_ttft_ms + (h.osl - 1) * h.silicon_tpot_ms
    h = h.assign(e2e=e2e)
    out = []
    for (tp, isl, c), g in h.groupby(["tp", "isl", "concurrency"]):
        if g.e2e.nunique() < 2:
            continue
        a, k = implied_waiting(g.silicon_ttft_ms, g.e2e, int(c))
        out.append({"tp": tp, "isl": isl, "clients": c, "intercept_ms": round(a), "waiting": round(k, 2)})
    return pd.DataFrame(out).pivot_table(index=["tp", "isl"], columns="clients", values="waiting")


def prompt_rate(d: pd.DataFrame) -> pd.DataFrame:
    g = d[(d.client == "fixed") & (d.system == "h200_sxm")]
    e2e_s = (g.silicon_ttft_ms + (g.osl - 1) * g.silicon_tpot_ms) / 1e3
    tok = g.concurrency * g.isl / e2e_s / g.tp
    m = LLAMA_8B
    flop_per_token = 2 * m["params"] + 4 * m["layers"] * m["hidden"] * g.isl / 2  # GEMMs + causal attention
    g = g.assign(prompt_tok_s_per_gpu=tok.round(0), frac_of_fp8_peak=(tok * flop_per_token / 1e12 / H200_FP8_DENSE_TFLOPS).round(2))
    return g[["backend", "tp", "isl", "osl", "concurrency", "silicon_tpot_ms", "prompt_tok_s_per_gpu", "frac_of_fp8_peak"]]


def eager_allreduce(system: str = "b200_sxm", framework: str = "vllm", gpus: int = 8) -> pd.DataFrame:
    from sim.cost import kerneldb_data as kd

    root = kd.package_root()
    if root is None:
        raise SystemExit("the kernel database is not installed")
    files = sorted((root / "systems" / "data" / system / "comm" / framework).glob("*/custom_allreduce_perf.parquet"),
                   key=lambda p: kd._vkey(p.parent.name))
    t = pd.read_parquet(files[-1])
    t = t[t.num_gpus == gpus].pivot_table(index="message_size", columns="kernel_source", values="latency") * 1e3
    t.columns = ["eager_us" if "eager" in c else "graph_us" for c in t.columns]
    return t.assign(extra_us=t.eager_us - t.graph_us).round(1)


def main(path: str) -> None:
    d = pd.read_parquet(path)
    pd.set_option("display.width", 200)
    print("1. groups by rows above 35% TTFT APE (kerneldb)")
    print(groups(d).round(2).to_string())
    print("\n2. requests waiting for a slot implied by the H100 TRT-LLM gap-analysis rows (rows: tp, isl; columns: clients)")
    print(waiting(d).round(2).to_string())
    print("\n3. prompt processing the H200 gap-analysis rows imply")
    print(prompt_rate(d).sort_values("frac_of_fp8_peak", ascending=False).head(12).to_string(index=False))
    print("\n4. B200 vLLM custom all-reduce, eager against CUDA graph (8 GPUs, us; message size in elements)")
    t = eager_allreduce()
    print(t[t.index.isin([128, 65536, 1048576, 8388608, 67108864])].to_string())
    print(f"a Llama-3.1-70B step has 160 all-reduces: {160 * float(np.interp(8192 * 1024, t.index, t.extra_us)) / 1e3:.1f} ms "
          "more in eager mode for a 1024-token prompt step")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/validate_silicon/predictions.parquet")
