"""TTFT under the workloads users bring: how much the arrival process and the serving front end
move TTFT near saturation (docs/published.md, "TTFT under Poisson arrivals").

    PYTHONPATH=. python experiments/ttft_server.py                  # both tables, default cost model
    PYTHONPATH=. python experiments/ttft_server.py --part arrivals --rates 20,24,26
    PYTHONPATH=. python experiments/ttft_server.py --part frontend --api-ms 20

Part ``arrivals``: the same model, GPU and lengths at several request rates, with Poisson arrivals
(``--seeds`` seeds, the median of their percentiles) and evenly spaced ones (``workload.arrival:
constant``); TTFT p50 / p90 and the ratio Poisson / constant.

Part ``frontend``: at the same rates, the run without front end, then with the serving front end
(``frontend.api_overhead_s`` = ``--api-ms``, default 20 ms: the front-end round trip
``validate-silicon`` fitted on measured runs, docs/kernel_database.md; no per-token terms, which
no public source gives), then also with vLLM's async scheduling (``scheduler.async_scheduling``);
mean and p90 TTFT, mean E2E and mean ITL, and each one's change against the run without.

Every figure is printed; nothing is fitted here.
"""
from __future__ import annotations

import argparse
import statistics
import warnings

from sim import simulate

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "output": {"plots": False, "progress": False}}


def run(rate: float, n: int, seed: int = 0, **sections) -> dict:
    cfg = {**BASE, "seed": seed, "workload": {"rate": rate, "num_requests": n}}
    for k, v in sections.items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(cfg, progress=False).summary


def arrivals(rates: list[float], n: int, seeds: int) -> None:
    print(f"TTFT (ms), llama-3.1-8b on one h100-sxm, default cost model and workload lengths, {n} requests per run; "
          f"Poisson: median over {seeds} seeds")
    print(f"{'rate/s':>7} {'verdict':>11} {'Pois p50':>9} {'Pois p90':>9} {'const p50':>10} {'const p90':>10} {'p90 ratio':>10}")
    for r in rates:
        pois = [run(r, n, seed=s) for s in range(seeds)]
        const = run(r, n, workload={"arrival": "constant", "rate": r, "num_requests": n})
        p50 = statistics.median(s["ttft_s"]["p50"] for s in pois) * 1e3
        p90 = statistics.median(s["ttft_s"]["p90"] for s in pois) * 1e3
        c50, c90 = const["ttft_s"]["p50"] * 1e3, const["ttft_s"]["p90"] * 1e3
        verdict = statistics.mode(s["verdict"]["state"] for s in pois)
        print(f"{r:7.1f} {verdict:>11} {p50:9.1f} {p90:9.1f} {c50:10.1f} {c90:10.1f} {p90 / c90:10.2f}", flush=True)


def frontend(rates: list[float], n: int, api_ms: float) -> None:
    variants = {"none": {}, f"front end {api_ms:g} ms": {"frontend": {"api_overhead_s": api_ms / 1e3}},
                "front end + async": {"frontend": {"api_overhead_s": api_ms / 1e3},
                                      "scheduler": {"name": "vllm_v1", "async_scheduling": True}}}
    print(f"llama-3.1-8b on one h100-sxm, Poisson arrivals, {n} requests per run (ms; change against none)")
    print(f"{'rate/s':>7} {'variant':>22} {'TTFT mean':>16} {'TTFT p90':>16} {'E2E mean':>16} {'ITL mean':>14}")
    for r in rates:
        ref = None
        for name, extra in variants.items():
            s = run(r, n, **extra)
            vals = (s["ttft_s"]["mean"], s["ttft_s"]["p90"], s["e2e_s"]["mean"], s["itl_s"]["mean"])
            ref = ref or vals
            cells = [f"{v * 1e3:8.1f} ({(v / b - 1) * 100:+4.0f}%)" for v, b in zip(vals, ref)]
            print(f"{r:7.1f} {name:>22} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {cells[3]:>14}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("arrivals", "frontend", "both"), default="both")
    ap.add_argument("--rates", default="10,18,22,24", help="request rates (req/s), comma-separated")
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--api-ms", type=float, default=20.0)
    a = ap.parse_args(argv)
    rates = [float(x) for x in a.rates.split(",")]
    if a.part in ("arrivals", "both"):
        arrivals(rates, a.requests, a.seeds)
    if a.part in ("frontend", "both"):
        frontend(rates, a.requests, a.api_ms)


if __name__ == "__main__":
    main()
