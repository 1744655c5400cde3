"""Synthetic workloads drawn from one seeded numpy Generator (same seed -> same requests).

Arrival processes (``arrival``): ``poisson``; ``gamma`` (inter-arrival cv ``cv``); ``diurnal``
(sinusoidal rate, by thinning); ``burst`` (2-state Markov-modulated Poisson). On top of them:
``tenants`` (independent streams merged in time order, each with its own lengths, SLO class and
priority), ``sessions`` (multi-turn, history in the prompt, hash-chained prefix blocks) and
``system_prompts`` (shared prefixes). The merged stream is shifted so that the first request
arrives at t = 0, numbered 0, 1, 2, ... in arrival order (ties: tenant order, then draw order)
and stopped after ``num_requests`` requests or ``duration_s`` seconds, whichever comes first.
Values are drawn in chunks (``_Draws``), so a stream costs O(1) memory however long it is.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

import numpy as np

from sim.types import RequestSpec
from sim.workload.config import MAX_TOKENS, DiurnalConfig, LengthDist, WorkloadConfig
from sim.workload.prefix import HASH_BLOCK_TOKENS, HashChain, own_key, shared_key


def interarrivals(kind: str, rate: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps (s) with mean 1/rate.

    Poisson: exponential gaps (cv = 1). Gamma: shape k = 1/cv^2, scale = 1/(rate k), so the
    mean stays 1/rate and the coefficient of variation is ``cv`` (cv > 1 is burstier).
    """
    if kind == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator, pool: np.ndarray | None = None) -> np.ndarray:
    """``n`` integer token lengths (>= 1) from ``dist``; ``pool`` holds a trace's lengths."""
    if dist.kind == "fixed":
        out = np.full(n, dist.value, dtype=np.int64)
    elif dist.kind == "uniform":
        out = rng.integers(dist.min, dist.max, size=n, endpoint=True)
    elif dist.kind == "lognormal":
        # clip in floating point first: a wide lognormal can draw beyond int64 (overflow)
        top = float(dist.max if dist.max is not None else MAX_TOKENS)
        out = np.rint(np.minimum(rng.lognormal(np.log(dist.median), dist.sigma, size=n), top)).astype(np.int64)
    else:
        if pool is None or len(pool) == 0:
            raise ValueError("a trace length distribution needs the trace's lengths")
        out = rng.choice(pool, size=n, replace=True).astype(np.int64)
    hi = dist.max if dist.max is not None else MAX_TOKENS
    return np.clip(out, dist.min, hi)


class _Draws:
    """Values drawn ``chunk`` at a time by ``draw(chunk)``; ``next()`` hands them out one by one."""

    __slots__ = ("_draw", "_buf", "_i")

    def __init__(self, draw: Callable[[int], np.ndarray], chunk: int = 1024):
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
    if src.arrival in ("poisson", "gamma"):
        gaps = _Draws(lambda n: interarrivals(src.arrival, src.rate, src.cv, n, rng))
        while True:
            t += gaps.next()
            yield t
    elif src.arrival == "diurnal":
        d = src.diurnal or DiurnalConfig()
        top = src.rate * (1.0 + d.amplitude)
        w = 2.0 * math.pi / d.period_s
        gaps, u = _Draws(lambda n: rng.exponential(1.0 / top, n)), _Draws(rng.random)
        while True:
            t += gaps.next()
            if u.next() * top <= src.rate * (1.0 + d.amplitude * math.sin(w * (t + d.phase_s))):
                yield t
    else:
        rates, means = (src.rate, src.burst.rate), (src.burst.mean_base_s, src.burst.mean_burst_s)
        e = _Draws(lambda n: rng.exponential(1.0, n))
        state, end = 0, e.next() * means[0]
        while True:
            nxt = t + e.next() / rates[state]
            if nxt > end:  # the state changes first; exponential gaps are memoryless, so redraw
                t, state = end, 1 - state
                end = t + e.next() * means[state]
                continue
            t = nxt
            yield t


def length_draws(dist: LengthDist, rng: np.random.Generator, pools: dict, column: int) -> _Draws:
    """Chunked draws from ``dist``; a ``trace`` dist reads its file's lengths once into ``pools``."""
    pool = None
    if dist.kind == "trace":
        if dist.path not in pools:
            from sim.workload.stats import trace_lengths

            pools[dist.path] = trace_lengths(dist.path)
        pool = pools[dist.path][column]
    return _Draws(lambda n: sample_lengths(dist, n, rng, pool))


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
        for t, fields in items:
            heapq.heappush(heap, (t, tag, seq, fields))
            seq += 1
    while heap:
        yield heapq.heappop(heap)


def _plans(cfg: WorkloadConfig, src, k: int, n_src: int, rng: np.random.Generator, pools: dict) -> Iterator[list]:
    """Request plans of one source (the workload itself or one tenant), in start order.
    Fields: (prompt, output, block_hashes, session_id, priority, slo_class, tenant)."""
    prompt = length_draws(src.prompt or cfg.prompt, rng, pools, 0)
    output = length_draws(src.output or cfg.output, rng, pools, 1)
    tenant = getattr(src, "name", None)
    slo, prio = getattr(src, "slo_class", None), getattr(src, "priority", 0)
    sp, ses = cfg.system_prompts, cfg.sessions
    if sp is not None:
        if sp.popularity == "uniform":
            pick = _Draws(lambda n: rng.integers(0, sp.count, n))
        else:
            w = 1.0 / np.arange(1, sp.count + 1) ** sp.zipf_s
            pick = _Draws(lambda n: rng.choice(sp.count, size=n, p=w / w.sum()))
    if ses is not None:
        turns = length_draws(ses.turns, rng, pools, 0)
        think = _Draws(lambda n: rng.exponential(ses.think_time_s, n))
    for n, t in enumerate(arrival_times(src, rng)):
        uid = n * n_src + k
        sys_tokens, chain = 0, None
        if sp is not None:
            sys_tokens = sp.tokens
            chain = HashChain(own_key(uid), shared_key(pick.next()), sys_tokens)
        if ses is None:
            p = sys_tokens + prompt.next()
            yield [(t, (p, output.next(), chain.hashes(p) if chain else None, None, prio, slo, tenant))]
            continue
        chain = chain or HashChain(own_key(uid))
        sid = f"{tenant or 's'}-{n}"
        items, hist = [], sys_tokens
        for j in range(turns.next()):
            if j:
                t += think.next()
            p, o = hist + prompt.next(), output.next()
            items.append((t, (p, o, chain.hashes(p), sid, prio, slo, tenant)))
            hist = p + o
        yield items


def synthetic_requests(cfg: WorkloadConfig, rng: np.random.Generator, info: dict) -> Iterator[RequestSpec]:
    """The synthetic request stream ``cfg`` describes (see the module docstring)."""
    sources = cfg.tenants or [cfg]
    rngs = [rng] if len(sources) == 1 else [np.random.default_rng(s) for s in rng.integers(0, 2**63, len(sources))]
    pools: dict = {}
    streams = [in_time_order(_plans(cfg, s, k, len(sources), r, pools), k) for k, (s, r) in enumerate(zip(sources, rngs))]
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
    desc = ", ".join(f"{s.name} {s.arrival} at {s.rate}/s" for s in cfg.tenants) if cfg.tenants else f"{cfg.arrival} at {cfg.rate}/s"
    info["source"] = f"synthetic {desc}" + (" sessions" if cfg.sessions else "")
    hb = HASH_BLOCK_TOKENS
    t0, n = None, 0
    for t, _, _, (p, o, hashes, sid, prio, slo, tenant) in merged:
        if t0 is None:
            t0 = t
        if cfg.duration_s is not None and t - t0 > cfg.duration_s:
            break
        yield RequestSpec(id=n, arrival_s=t - t0, prompt_tokens=p, output_tokens=o, block_hashes=hashes,
                          hash_block_tokens=hb, session_id=sid, priority=prio, slo_class=slo, tenant=tenant)
        n += 1
        if cfg.num_requests is not None and n >= cfg.num_requests:
            break
