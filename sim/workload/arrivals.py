"""Arrival processes and chunked draws: the time base that synthetic workloads and trace
readers (ShareGPT session starts) share. Depends on nothing else in ``sim.workload`` but its
config, so the workload modules import one way: arrivals <- traces <- synthetic <- package.

Arrival processes (``arrival``): ``poisson``; ``constant`` (evenly spaced); ``gamma`` (inter-arrival cv ``cv``); ``diurnal``
(sinusoidal rate, by thinning); ``burst`` (2-state Markov-modulated Poisson). Values are drawn in
chunks (``Draws``), so a stream costs O(1) memory however long it is.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

import numpy as np

from sim.workload.config import DiurnalConfig


def interarrivals(kind: str, rate: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps (s) with mean 1/rate.

    Poisson: exponential gaps (cv = 1). Constant: every gap 1/rate (cv = 0, evenly spaced; draws
    nothing). Gamma: shape k = 1/cv^2, scale = 1/(rate k), so the mean stays 1/rate and the
    coefficient of variation is ``cv`` (cv > 1 is burstier).
    """
    if kind == "constant":
        return np.full(n, 1.0 / rate)
    if kind == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


CHUNK = 1024
"""Values a ``Draws`` draws at a time (every chunked stream of a workload: their draws interleave in
the generator by chunks of this size, so a change of it changes the requests)."""


class Draws:
    """Values drawn ``chunk`` at a time by ``draw(chunk)``; ``next()`` hands them out one by one."""

    __slots__ = ("_draw", "_buf", "_i")

    def __init__(self, draw: Callable[[int], np.ndarray], chunk: int = CHUNK):
        self._draw = lambda: draw(chunk).tolist()
        self._buf: list = []
        self._i = 0

    def next(self):
        if self._i == len(self._buf):
            self._buf, self._i = self._draw(), 0
        self._i += 1
        return self._buf[self._i - 1]


def arrival_times(src, rng: np.random.Generator) -> Iterator[float]:
    """The endless, increasing event times (s) of ``src``'s arrival process, started at 0.

    ``src`` is a WorkloadConfig or TenantConfig (fields ``arrival``, ``rate``, ``cv``,
    ``diurnal``, ``burst``). ``burst``: ``rate`` in the base state, ``burst.rate`` in bursts.
    """
    t = 0.0
    if src.arrival in ("poisson", "constant", "gamma"):
        gaps = Draws(lambda n: interarrivals(src.arrival, src.rate, src.cv, n, rng))
        while True:
            t += gaps.next()
            yield t
    elif src.arrival == "diurnal":
        d = src.diurnal or DiurnalConfig()
        top = src.rate * (1.0 + d.amplitude)
        w = 2.0 * math.pi / d.period_s
        gaps, u = Draws(lambda n: rng.exponential(1.0 / top, n)), Draws(rng.random)
        while True:
            t += gaps.next()
            if u.next() * top <= src.rate * (1.0 + d.amplitude * math.sin(w * (t + d.phase_s))):
                yield t
    else:
        rates, means = (src.rate, src.burst.rate), (src.burst.mean_base_s, src.burst.mean_burst_s)
        e = Draws(lambda n: rng.exponential(1.0, n))
        state, end = 0, e.next() * means[0]
        while True:
            nxt = t + e.next() / rates[state]
            if nxt > end:  # the state changes first; exponential gaps are memoryless, so redraw
                t, state = end, 1 - state
                end = t + e.next() * means[state]
                continue
            t = nxt
            yield t


def in_time_order(plans: Iterator[list[tuple[float, tuple]]], tag: int = 0) -> Iterator[tuple]:
    """Merge plans (each a list of (time, fields) turns whose first time is the plan's start;
    starts non-decreasing) into (time, tag, seq, fields) in time order. Turns wait in a heap
    until no earlier plan can start, so memory is the number of sessions in flight."""
    heap: list = []
    seq = 0
    for items in plans:
        t0 = items[0][0]
        while heap and heap[0][0] <= t0:
            yield heapq.heappop(heap)
        if not heap and len(items) == 1:  # nothing pending, one turn: it is next (no heap needed)
            yield (t0, tag, seq, items[0][1])
            seq += 1
            continue
        for t, fields in items:
            heapq.heappush(heap, (t, tag, seq, fields))
            seq += 1
    while heap:
        yield heapq.heappop(heap)
