"""Quickstart: the same workload on two GPUs, compared. Its printed output is kept beside it
(quickstart.expected.txt) and checked by the tests, so the example never goes stale. It pins
the roofline cost model so that its output is the same with or without the kernels-db extra
(drop the ``cost`` entry to price the steps from the kernel database when it is installed).

    python experiments/quickstart.py
"""
from sim import simulate

WORKLOAD = {"rate": 6.0, "num_requests": 400, "prompt": {"kind": "lognormal", "median": 1020, "sigma": 0.5, "max": 8192},
            "output": {"kind": "lognormal", "median": 129, "sigma": 0.99, "max": 2048}}

print(f"{'hardware':<10} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'TPOT p50 ms':>12} {'out tok/s':>10} {'$/M tok':>8}")
for hw in ("a100-80gb", "h100-sxm"):
    s = simulate({"model": "llama-3.1-8b", "hardware": hw, "workload": WORKLOAD, "seed": 1,
                  "cost": {"model": "roofline"}}, progress=False).summary
    usd = s["cost"]["usd_per_million_output_tokens"]
    print(f"{hw:<10} {s['ttft_s']['p50'] * 1e3:>12.1f} {s['ttft_s']['p99'] * 1e3:>12.1f} "
          f"{s['tpot_s']['p50'] * 1e3:>12.2f} {s['throughput']['output_tokens_per_s']:>10.0f} {usd:>8.2f}")
