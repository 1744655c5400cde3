"""Long work shows progress (a bar on a terminal, a line every 30 s off it); Ctrl-C on a run
over worker processes prints one line; warnings of sweep workers come through the CLI's
one-line channel, once per kind (issue 24, items 4-5)."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.progress import LOG_EVERY_S, Progress, auto_mode

REPO = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_log_lines_off_a_terminal():
    clock, out = Clock(), io.StringIO()
    p = Progress(40, "probes", "run", "log", clock=clock, out=out)
    for _ in range(9):
        clock.t += 1.0
        p.update()
    assert out.getvalue() == ""  # nothing before LOG_EVERY_S
    clock.t = LOG_EVERY_S + 1.0
    p.update()  # 10 runs in 31 s: 30 left at 3.1 s each
    assert out.getvalue().splitlines() == ["servesim: probes: 10 of about 40 runs, 31 s elapsed, about 1.6 min left"]
    for _ in range(35):  # the estimate grows when the runs outnumber it
        p.update()
    assert p.total == 45
    clock.t = 600.0
    p.close()
    assert out.getvalue().splitlines()[-1] == "servesim: probes: 45 of 45 runs, 10.0 min elapsed, about 0 s left"


def test_modes(monkeypatch):
    assert auto_mode(False) is None and auto_mode(True) == "bar"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert auto_mode(None) == "log"


def test_bar_has_width_on_a_sizeless_terminal(monkeypatch):
    from sim.progress import bar_columns

    monkeypatch.setattr(os, "get_terminal_size", lambda fd=None: os.terminal_size((0, 0)))
    assert bar_columns() == 80
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=None: os.terminal_size((120, 40)))
    assert bar_columns() is None  # tqdm follows the terminal


def test_capacity_workers_warn_once_in_one_line(tmp_path):
    """A capacity search over 2 worker processes: its probes' clipping warnings arrive as one
    ``servesim: warning:`` line, without a source path."""
    r = subprocess.run([sys.executable, "-m", "sim.cli", "capacity", "--seeds", "1", "--num-requests", "100",
                        "--rel-tol", "0.5", "--workers", "2", "--quiet", "--out", str(tmp_path / "c")],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("servesim: warning: ") for ln in lines), r.stderr
    assert len(lines) == len({ln.split(" of ")[1] for ln in lines})  # one line per kind
    assert ".py:" not in r.stderr and "ServesimWarning" not in r.stderr


def test_ctrl_c_on_a_run_over_workers_is_one_line(tmp_path):
    cmd = [sys.executable, "-m", "sim.cli", "run", "--replicas", "4", "--rate", "40", "--num-requests", "3000000",
           "--set", "output.step_records=false", "--workers", "2", "--out", str(tmp_path / "o"), "--no-plots"]
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(6)  # the workers are simulating by now
    if p.poll() is not None:
        pytest.skip("the run ended before the interrupt")
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group, workers included
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130
    assert [ln for ln in err.splitlines() if ln.strip()] == ["servesim: interrupted"], err
