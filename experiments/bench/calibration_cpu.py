"""The CPU calibration figures of docs/calibration.md: profile llama-tiny (small grid, 1 thread),
fit, validate (held-out kernels + real replay of a simulated plan), print the errors.

    python experiments/bench/calibration_cpu.py [--out DIR]

Prints kernel / step / TTFT / TPOT median and p90 absolute percentage errors. On a shared machine
run it when the machine is quiet; the CI test (tests/test_calibration_e2e.py) asserts a looser bound.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    a = p.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="servesim-cal-"))
    py = sys.executable
    tiny = str(ROOT / "calibration/cards/llama-tiny.yaml")
    subprocess.run([py, "-m", "kernels.profile", "--device", "cpu", "--model", tiny, "--tp", "1", "--grid", "small",
                    "--out", str(out / "profiles"), "--no-progress"], check=True, cwd=ROOT)
    subprocess.run([py, "-m", "calibration.fit", str(out / "profiles/cpu/llama-tiny"), "--out", str(out / "fitted")],
                   check=True, cwd=ROOT)
    from calibration.validate import add_arguments, run

    vp = argparse.ArgumentParser()
    add_arguments(vp)
    res = run(vp.parse_args(["--fitted", str(out / "fitted/cpu/llama-tiny"), "--device", "cpu", "--model", tiny,
                             "--out", str(out / "validation")]))
    print("\nmetric     median_ape   p90_ape")
    for k in ("kernel", "step", "ttft", "tpot"):
        print(f"{k:8s} {res[k]['median_ape']:10.1%} {res[k]['p90_ape']:9.1%}")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
