"""Interrupted sweeps (issue 10, item 5): the workers die with the driver, "interrupted" is
printed, and a corrupt or incomplete stored run is redone, never accepted. Real processes,
bounded waits."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.sweep.spec import load_spec
from sim.sweep.store import RunStore
from sim.sweep.sweep import run_sweep

REPO = Path(__file__).resolve().parents[1]
linux = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds worker processes through /proc (Linux)")

SLOW_SPEC = """
base:
  workload: {rate: 40, num_requests: 400000}
  output: {plots: false, progress: false, step_records: false}
grid:
  workload.rate: [40, 41, 42, 43]
"""


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _workers(pid: int) -> set[int]:
    """The pool workers among the driver's children (spawned: their command line names spawn_main)."""
    found = set()
    for c in _children(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes():
                found.add(c)
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def _start_sweep(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SLOW_SPEC)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "sweep", str(spec), "--workers", "2", "--quiet",
                             "--out", str(tmp_path / "sw")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    if not _wait(lambda: len(_workers(proc.pid)) == 2, 90):
        proc.kill()
        proc.communicate(timeout=30)
        pytest.fail("the pool never started two workers")
    return proc, _workers(proc.pid)


@linux
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_kills_workers_and_says_interrupted(tmp_path, sig):
    proc, workers = _start_sweep(tmp_path)
    time.sleep(3.0)  # let the workers start simulating
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "interrupted" in err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130)
    assert _wait(lambda: not any(_alive(w) for w in workers), 20), "workers outlived the driver"


@linux
def test_sigkill_of_the_driver_kills_workers(tmp_path):
    proc, workers = _start_sweep(tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    assert _wait(lambda: not any(_alive(w) for w in workers), 20), "workers outlived a SIGKILLed driver"
    proc.stdout.close()
    proc.stderr.close()


SMALL_SPEC = """
base:
  workload: {rate: 4, num_requests: 20, prompt: {kind: fixed, value: 64}, output: {kind: fixed, value: 8}}
grid:
  workload.rate: [3, 4, 5]
"""


@pytest.mark.parametrize("content", ["{}", "", "{\"requests\": {\"arrived\": 3}", "[1, 2]", "\x00\x01"])
def test_corrupt_summary_is_redone(tmp_path, content):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SMALL_SPEC)
    spec = load_spec(spec_path)
    out = tmp_path / "sw"
    t1, c1 = run_sweep(spec, out)
    assert c1["run"] == 3
    bad = t1["key"][1]
    good = json.loads((out / "runs" / bad / "summary.json").read_text())
    (out / "runs" / bad / "summary.json").write_text(content)
    assert RunStore(out).get(bad) is None
    t2, c2 = run_sweep(spec, out)
    assert (c2["reused"], c2["run"], c2["failed"]) == (2, 1, 0)
    redone = json.loads((out / "runs" / bad / "summary.json").read_text())
    good["sim"].pop("wall_s"), redone["sim"].pop("wall_s")
    assert redone == good  # deterministic: the redone run is the same run
    assert not list((out / "runs" / bad).glob(".*tmp*"))  # written through temporary files, renamed
