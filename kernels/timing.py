"""Timing of one operator: warm-up, repeats, CUDA events on GPUs, perf_counter on the CPU.

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


@dataclass(frozen=True)
class Stats:
    time_us: float
    time_us_p10: float
    time_us_p90: float
    repeats: int

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


GPU_TIMING = TimingConfig(warmup=3, repeats=20, min_repeats=5, max_seconds=0.15, flush_l2=True)
CPU_TIMING = TimingConfig(warmup=2, repeats=9, min_repeats=3, max_seconds=0.05, flush_l2=False)


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
            before: Callable[[], object] | None = None) -> Stats:
    """Time ``fn``: warm up, size the repeats to ``cfg.max_seconds``, return median/p10/p90 in us.

    ``before`` runs ahead of every repeat, outside the timed region (an L2 flush, a barrier).
    """
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *a: None)
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
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            if before:
                before()
            start.record()
            fn()
            end.record()
        sync()
        times = [s.elapsed_time(e) * 1e3 for s, e in events]
    else:
        times = []
        for _ in range(n):
            if before:
                before()
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
    return summarize(times)
