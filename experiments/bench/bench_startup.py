"""Start-up time of a run priced by the kernel database (issue 9: under 2 s warm). Prints its
figures; asserts nothing.

    python experiments/bench/bench_startup.py

- ``derive``: reading the aiconfigurator-core Parquet tables and deriving the grids (what a first
  run does once per package version, system, framework and version), in this process.
- ``cold`` / ``warm``: wall time of ``servesim run --model llama-3.1-70b --hardware h200-sxm --tp 4
  --dtype fp8 --num-requests 1`` in a fresh process with an empty cache folder, then again with
  the cache filled (interpreter start, imports, config, cost model, a one-request simulation).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CMD = [sys.executable, "-m", "sim.cli", "run", "--model", "llama-3.1-70b", "--hardware", "h200-sxm", "--tp", "4",
       "--dtype", "fp8", "--num-requests", "1", "--no-plots", "--quiet"]


def timed_run(env: dict, out: str, extra: tuple = ()) -> tuple[float, float]:
    """(wall s, CPU s of the child): on a shared machine the CPU time is the steadier figure."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(CMD + ["--out", out, *extra], env=env, cwd=REPO, check=True, capture_output=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    sys.path.insert(0, str(REPO))
    from sim.cost import kerneldb_data as kd

    if kd.package_root() is None:
        print("skipped: aiconfigurator-core (a dependency) is not installed")
        return
    system, version = kd.resolve("h200-sxm", "vllm", None)
    t = time.perf_counter()
    kd.derive(system, "vllm", version)
    print(f"derive   {system} vllm {version}: {time.perf_counter() - t:6.2f} s (Parquet -> grids, once per version)")
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(REPO)}
        cold = timed_run(env, out)
        warm = sorted(timed_run(env, out) for _ in range(3))
        roof = sorted(timed_run(env, out, ("--cost-model", "roofline")) for _ in range(3))
        print(f"cold run (empty cache):  wall {cold[0]:6.2f} s, CPU {cold[1]:5.2f} s")
        print(f"warm run (cache filled): wall {warm[0][0]:6.2f} s, CPU {min(c for _, c in warm):5.2f} s (best of 3; target < 2 s)")
        print(f"same run on the roofline: wall {roof[0][0]:6.2f} s, CPU {min(c for _, c in roof):5.2f} s (best of 3)")
        print("figures include interpreter start and imports; a loaded machine inflates them")


if __name__ == "__main__":
    main()
