"""Timing of one operator: warm-up, repeats, CUDA events on GPUs, process time on the CPU.

The clock is one that other load on the machine does not inflate where the device allows: CUDA
events on a GPU (device time), the process's CPU time on a CPU timed with one torch thread (time
spent descheduled while other jobs run does not count). With several CPU threads the process
time would add the threads up, so the wall clock (``perf_counter``) is used and recorded.

A point is repeated until its spread, (p90 - p10) / median, is at most ``target_spread`` or the
repeats reach ``max_repeats`` (or four times the point's time budget): a point that stays noisy
keeps its spread in the CSV (``time_us_p10``, ``time_us_p90``) and is counted in ``meta.json``.

On a GPU each repeat is bracketed by CUDA events and preceded (outside the timed region) by a
write of a buffer twice the L2 size, so weights and KV blocks are read from HBM as they are in a
real forward pass, where the other layers evict them. All repeats are queued before one
synchronize, so launch latency overlaps the previous kernel instead of being measured.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from kernels.load import LOAD_PER_CPU_LIMIT, host_load, load_warning  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Stats:
    time_us: float
    time_us_p10: float
    time_us_p90: float
    repeats: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of the repeats."""
        return (self.time_us_p90 - self.time_us_p10) / self.time_us if self.time_us > 0 else 0.0

    def row(self) -> dict:
        return {"time_us": round(self.time_us, 3), "time_us_p10": round(self.time_us_p10, 3),
                "time_us_p90": round(self.time_us_p90, 3), "repeats": self.repeats}


@dataclass(frozen=True)
class TimingConfig:
    warmup: int
    repeats: int
    min_repeats: int
    max_seconds: float  # per grid point, the repeats are cut to fit (never below min_repeats)
    flush_l2: bool
    target_spread: float = 0.10  # repeat while (p90 - p10) / median is above this ...
    max_repeats: int = 0  # ... up to this many repeats (0: no extra repeats)


GPU_TIMING = TimingConfig(warmup=3, repeats=20, min_repeats=5, max_seconds=0.15, flush_l2=True,
                          target_spread=0.10, max_repeats=60)
CPU_TIMING = TimingConfig(warmup=2, repeats=9, min_repeats=3, max_seconds=0.05, flush_l2=False,
                          target_spread=0.10, max_repeats=45)
EXTEND_BUDGET = 4.0
"""A noisy point may take this many times its ``max_seconds`` budget in extra repeats."""


def cpu_clock(threads: int):
    """The CPU clock for timing with ``threads`` torch threads: process time with one thread
    (load on the machine does not inflate it), else the wall clock. Returns (name, function)."""
    if threads <= 1:
        return "process_time", time.process_time
    return "perf_counter", time.perf_counter


def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(times_us: list[float]) -> Stats:
    return Stats(statistics.median(times_us), quantile(times_us, 0.1), quantile(times_us, 0.9), len(times_us))


class L2Flusher:
    """Overwrites a buffer twice the GPU's L2 cache; call before each timed repeat."""

    def __init__(self, device: torch.device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20
        self.nbytes = 2 * l2
        self.buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


def measure(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
            before: Callable[[], object] | None = None, clock: Callable[[], float] | None = None) -> Stats:
    """Time ``fn``: warm up, size the repeats to ``cfg.max_seconds``, repeat more while the
    spread is above ``cfg.target_spread`` (see the module doc), return median/p10/p90 in us.

    ``before`` runs ahead of every repeat, outside the timed region (an L2 flush, a barrier).
    ``clock`` is the CPU clock (default ``cpu_clock(torch.get_num_threads())``); unused on CUDA.
    """
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *a: None)
    tick = clock or cpu_clock(torch.get_num_threads())[1]
    one = 0.0
    for _ in range(max(1, cfg.warmup)):  # the last warm-up sizes the repeats (the first pays one-off costs)
        if before:
            before()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        one = time.perf_counter() - t0
    n = max(cfg.min_repeats, min(cfg.repeats, int(cfg.max_seconds / max(one, 1e-9))))
    times = _batch(fn, n, cuda, before, sync, tick)
    stats = summarize(times)
    t_end = time.perf_counter() + EXTEND_BUDGET * cfg.max_seconds
    while stats.spread > cfg.target_spread and len(times) < cfg.max_repeats and time.perf_counter() < t_end:
        times += _batch(fn, min(n, cfg.max_repeats - len(times)), cuda, before, sync, tick)
        stats = summarize(times)
    return stats


def _batch(fn, n: int, cuda: bool, before, sync, tick) -> list[float]:
    """``n`` timed repeats of ``fn`` in microseconds (CUDA events, or ``tick`` on the CPU)."""
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            if before:
                before()
            start.record()
            fn()
            end.record()
        sync()
        return [s.elapsed_time(e) * 1e3 for s, e in events]
    times = []
    for _ in range(n):
        if before:
            before()
        t = tick()
        fn()
        times.append((tick() - t) * 1e6)
    return times
