"""Speed and memory of the simulator (docs/architecture.md section 8). Prints its figures; asserts nothing.

    python experiments/bench/bench_engine.py            # all cases
    python experiments/bench/bench_engine.py --case azure

Cases:
- ``azure``: the Azure LLM inference 2023 conversation trace (19,366 requests, read from
  ../shared/traces) through Llama-3.1-8B on one H100-SXM: simulated requests and engine steps
  per second of wall time (one process, one core).
- ``llama70b``: 3,000 requests of Llama-2-70B on two A100-80GB (tp=2) at 1 request/s with
  conversation-like lengths, figures off: total wall time of ``servesim run`` in a fresh process,
  start-up included (the design target (docs/architecture.md section 8) is under 2 s).
- ``scale``: N synthetic requests (default 200,000; ``--scale-requests``) on 8 replicas: wall time
  and peak resident memory, to extrapolate to a million (``--no-step-records``: without the
  per-step rows, as ``output.step_records: false``).
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the checkout this script is in, whatever is installed
AZURE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def case_azure() -> None:
    from sim import simulate

    if not AZURE.exists():
        print("azure: skipped (../shared/traces/AzureLLMInferenceTrace_conv.csv not found)")
        return
    t = time.perf_counter()
    res = simulate({"workload": {"trace": {"path": str(AZURE)}}}, plots=False, progress=False)
    wall = time.perf_counter() - t
    s = res.summary
    n = s["requests"]["arrived"]
    print(f"azure conv: {n:,} requests ({s['requests']['completed']:,} completed, {s['requests']['rejected']} rejected), "
          f"{s['sim']['steps']:,} steps, {s['sim']['simulated_s']:,.0f} simulated s in {wall:.2f} s wall: "
          f"{n / wall:,.0f} requests/s, {s['sim']['steps'] / wall:,.0f} steps/s")


def case_llama70b() -> None:
    cmd = [sys.executable, "-m", "sim.cli", "run", "--model", "llama-2-70b", "--hardware", "a100-80gb", "--tp", "2",
           "--rate", "1", "--num-requests", "3000", "--no-plots", "--quiet", "--out", "/dev/null/x"]
    # --out under /dev/null would fail: use a temp folder
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cmd[-1] = d
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=REPO)
            best = min(best, time.perf_counter() - t)
        import json

        s = json.loads((Path(d) / "summary.json").read_text())
    print(f"llama-2-70b on 2x a100-80gb, 3,000 requests at 1 req/s: total wall {best:.2f} s (best of 3, start-up included; "
          f"engine {s['sim']['wall_s']:.2f} s for {s['sim']['steps']:,} steps)")


def case_scale(n: int, step_records: bool = True) -> None:
    from sim import simulate

    t = time.perf_counter()
    res = simulate({"cluster": {"replicas": 8}, "workload": {"rate": 40.0, "num_requests": n},
                    "output": {"step_records": step_records}}, plots=False, progress=False)
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    s = res.summary
    print(f"scale{'' if step_records else ' (no step records)'}: {n:,} requests on 8 replicas, {s['sim']['steps']:,} steps in {wall:.1f} s wall "
          f"({n / wall:,.0f} requests/s, {s['sim']['steps'] / wall:,.0f} steps/s), peak RSS {rss:,.0f} MiB; "
          f"a million requests would take about {wall * 1e6 / n:,.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["azure", "llama70b", "scale", "all"], default="all")
    ap.add_argument("--scale-requests", type=int, default=200_000)
    ap.add_argument("--no-step-records", action="store_true", help="scale case with output.step_records off")
    a = ap.parse_args()
    if a.case in ("llama70b", "all"):
        case_llama70b()
    if a.case in ("azure", "all"):
        case_azure()
    if a.case in ("scale", "all"):
        case_scale(a.scale_requests, step_records=not a.no_step_records)


if __name__ == "__main__":
    main()
