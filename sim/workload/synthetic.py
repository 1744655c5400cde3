"""Synthetic workloads drawn from one seeded numpy Generator (same seed -> same requests).

Arrival processes (``arrival``, in ``sim.workload.arrivals``): ``poisson``, ``constant``, ``gamma``,
``diurnal``, ``burst``. On top of them:
``tenants`` (independent streams merged in time order, each with its own lengths, SLO class and
priority), ``sessions`` (multi-turn, history in the prompt, hash-chained prefix blocks) and
``system_prompts`` (shared prefixes). The merged stream is shifted so that the first request
arrives at t = 0, numbered 0, 1, 2, ... in arrival order (ties: tenant order, then draw order)
and stopped after ``num_requests`` requests or ``duration_s`` seconds, whichever comes first.
Values are drawn in chunks (``Draws``), so a stream costs O(1) memory however long it is.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from itertools import repeat

import numpy as np

from sim.types import RequestSpec, default_output_limit
from sim.workload.arrivals import CHUNK, Draws, arrival_times, in_time_order, interarrivals
from sim.workload.config import MAX_TOKENS, LengthDist, WorkloadConfig
from sim.workload.prefix import HASH_BLOCK_TOKENS, HashChain, own_key, shared_key
from sim.workload.traces import trace_lengths


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator, pool: np.ndarray | None = None) -> np.ndarray:
    """``n`` integer token lengths (>= 1) from ``dist``; ``pool`` holds a trace's lengths."""
    return sample_lengths_clipped(dist, n, rng, pool)[0]


def sample_lengths_clipped(dist: LengthDist, n: int, rng: np.random.Generator,
                           pool: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``sample_lengths`` plus, per length, whether the bounds [``min``, ``max``] changed it
    (a draw outside them, or a ``fixed`` value outside them), so clipping is counted."""
    if dist.kind == "fixed":
        out = np.full(n, dist.value, dtype=np.int64)
    elif dist.kind == "uniform":
        out = rng.integers(dist.min, dist.max, size=n, endpoint=True)
    elif dist.kind == "lognormal":
        # cap in floating point first (a wide lognormal can draw beyond int64), one above the bound
        # so that a draw past it is still seen, and counted, as clipped below
        top = float(dist.max if dist.max is not None else MAX_TOKENS) + 1.0
        out = np.rint(np.minimum(rng.lognormal(np.log(dist.median), dist.sigma, size=n), top)).astype(np.int64)
    else:
        if pool is None or len(pool) == 0:
            raise ValueError("a trace length distribution needs the trace's lengths")
        out = rng.choice(pool, size=n, replace=True).astype(np.int64)
    hi = dist.max if dist.max is not None else MAX_TOKENS
    clipped = np.clip(out, dist.min, hi)
    return clipped, clipped != out


class _LengthDraws:
    """Lengths drawn ``chunk`` at a time from a ``LengthDist``; ``next()`` hands them out one by
    one and ``clipped`` tells whether the last one handed out was clipped to the bounds."""

    __slots__ = ("_draw", "_buf", "_flags", "_i", "clipped")

    def __init__(self, draw: Callable[[int], tuple[np.ndarray, np.ndarray]], chunk: int = CHUNK):
        self._draw = lambda: tuple(a.tolist() for a in draw(chunk))
        self._buf: list = []
        self._flags: list = []
        self._i = 0
        self.clipped = False

    def next(self) -> int:
        if self._i == len(self._buf):
            (self._buf, self._flags), self._i = self._draw(), 0
        self._i += 1
        self.clipped = self._flags[self._i - 1]
        return self._buf[self._i - 1]


def length_draws(dist: LengthDist, rng: np.random.Generator, pools: dict, column: int) -> _LengthDraws:
    """Chunked draws from ``dist``; a ``trace`` dist reads its file's lengths once into ``pools``."""
    return _LengthDraws(length_sampler(dist, rng, pools, column))


def length_sampler(dist: LengthDist, rng: np.random.Generator, pools: dict,
                   column: int) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
    """``n -> sample_lengths_clipped(dist, n, rng, pool)``; a ``trace`` dist reads its file's
    lengths once into ``pools`` (``pool``: its ``column``)."""
    pool = None
    if dist.kind == "trace":
        if dist.path not in pools:
            pools[dist.path] = trace_lengths(dist.path)
        pool = pools[dist.path][column]
    return lambda n: sample_lengths_clipped(dist, n, rng, pool)


def output_bound(dist: LengthDist, pools: dict) -> int | None:
    """The most output tokens ``dist`` can draw (None: unbounded): what a client sends as its
    ``max_tokens`` when it knows its workload, and what reservation policies (orca, trtllm's
    GUARANTEED_NO_EVICT) reserve beside the prompt."""
    if dist.kind == "fixed":  # (a value outside [min, max] is drawn clipped to them)
        return max(dist.min, dist.value if dist.max is None else min(dist.value, dist.max))
    if dist.kind == "trace":
        if dist.path not in pools:
            pools[dist.path] = trace_lengths(dist.path)
        column = pools[dist.path][1]
        return int(max(column)) if len(column) else None
    return dist.max


def _limit(p: int, max_context: int | None, bound: int | None) -> int | None:
    """A request's output limit: the context minus its prompt, within the workload's output bound."""
    if max_context is None:
        return None
    limit = default_output_limit(p, max_context)
    return limit if bound is None else max(1, min(limit, bound))


def _plans(cfg: WorkloadConfig, src, k: int, n_src: int, rng: np.random.Generator, pools: dict,
           block_tokens: int = HASH_BLOCK_TOKENS) -> Iterator[list]:
    """Request plans of one source (the workload itself or one tenant), in start order; prefix
    hashes cover ``block_tokens`` tokens each.
    Fields: (prompt, output, block_hashes, session_id, priority, slo_class, tenant, clipped),
    ``clipped`` = (prompt clipped, output clipped) to the length distributions' bounds."""
    prompt = length_draws(src.prompt or cfg.prompt, rng, pools, 0)
    output = length_draws(src.output or cfg.output, rng, pools, 1)
    tenant = getattr(src, "name", None)
    slo, prio = getattr(src, "slo_class", None), getattr(src, "priority", 0)
    sp, ses = cfg.system_prompts, cfg.sessions
    if sp is not None:
        if sp.popularity == "uniform":
            pick = Draws(lambda n: rng.integers(0, sp.count, n))
        else:
            w = 1.0 / np.arange(1, sp.count + 1) ** sp.zipf_s
            pick = Draws(lambda n: rng.choice(sp.count, size=n, p=w / w.sum()))
    if ses is not None:
        turns = length_draws(ses.turns, rng, pools, 0)
        think = Draws(lambda n: rng.exponential(ses.think_time_s, n))
    for n, t in enumerate(arrival_times(src, rng)):
        uid = n * n_src + k
        sys_tokens, chain = 0, None
        if sp is not None:
            sys_tokens = sp.tokens
            chain = HashChain(own_key(uid), shared_key(pick.next()), sys_tokens, block_tokens)
        if ses is None:
            p, o = sys_tokens + prompt.next(), output.next()
            yield [(t, (p, o, chain.hashes(p) if chain else None, None, prio, slo, tenant,
                        (prompt.clipped, output.clipped)))]
            continue
        chain = chain or HashChain(own_key(uid), block=block_tokens)
        sid = f"{tenant or 's'}-{n}"
        items, hist = [], sys_tokens
        for j in range(turns.next()):
            if j:
                t += think.next()
            p, o = hist + prompt.next(), output.next()
            items.append((t, (p, o, chain.hashes(p), sid, prio, slo, tenant, (prompt.clipped, output.clipped))))
            hist = p + o
        yield items


def synthetic_requests(cfg: WorkloadConfig, rng: np.random.Generator, info: dict,
                       max_context: int | None = None, block_tokens: int = HASH_BLOCK_TOKENS) -> Iterator[RequestSpec]:
    """The synthetic request stream ``cfg`` describes (see the module docstring). With
    ``max_context`` each request carries its output limit, ``max_output_tokens`` = the context
    minus its prompt (at least 1): the limit the engine gives a request without one, so the
    engine need not build a second spec to set it. Shared prefixes (system prompts, session
    history) are hashed in blocks of ``block_tokens`` tokens: the engine passes its
    ``kv.block_size``, so prompts share the tokens its KV blocks share. Notes the source in ``info`` at once and
    returns the stream itself (the engine reads it directly, not through a delegating generator)."""
    sources = cfg.tenants or [cfg]
    desc = ", ".join(f"{s.name} {s.arrival} at {s.rate}/s" for s in cfg.tenants) if cfg.tenants else f"{cfg.arrival} at {cfg.rate}/s"
    info["source"] = f"synthetic {desc}" + (" sessions" if cfg.sessions else "")
    clipped = info.setdefault("clipped", {"prompt": 0, "output": 0})
    renewal = len(sources) == 1 and cfg.sessions is None and cfg.system_prompts is None and cfg.arrival in ("poisson", "constant", "gamma")
    if renewal:  # no prefix hashes
        return _renewal_requests(cfg, rng, clipped, max_context)
    return _merged_requests(cfg, rng, clipped, max_context, block_tokens)


def _merged_requests(cfg: WorkloadConfig, rng: np.random.Generator, clipped: dict,
                     max_context: int | None = None, block_tokens: int = HASH_BLOCK_TOKENS) -> Iterator[RequestSpec]:
    """Any synthetic stream: each source's plans in time order, the sources merged, numbered,
    stopped at ``num_requests`` or ``duration_s`` (``max_context``: see ``synthetic_requests``)."""
    sources = cfg.tenants or [cfg]
    rngs = [rng] if len(sources) == 1 else [np.random.default_rng(s) for s in rng.integers(0, 2**63, len(sources))]
    pools: dict = {}
    streams = [in_time_order(_plans(cfg, s, k, len(sources), r, pools, block_tokens), k)
               for k, (s, r) in enumerate(zip(sources, rngs))]
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
    bounds = [output_bound(s.output or cfg.output, pools) for s in sources]
    hb = block_tokens
    t0, n = None, 0
    for t, k, _, (p, o, hashes, sid, prio, slo, tenant, (p_clip, o_clip)) in merged:
        if t0 is None:
            t0 = t
        if cfg.duration_s is not None and t - t0 > cfg.duration_s:
            break
        clipped["prompt"] += p_clip
        clipped["output"] += o_clip
        limit = _limit(p, max_context, bounds[k])
        yield RequestSpec(id=n, arrival_s=t - t0, prompt_tokens=p, output_tokens=o, max_output_tokens=limit,
                          block_hashes=hashes, hash_block_tokens=hb, session_id=sid, priority=prio, slo_class=slo,
                          tenant=tenant)
        n += 1
        if cfg.num_requests is not None and n >= cfg.num_requests:
            break


def _renewal_requests(cfg: WorkloadConfig, rng: np.random.Generator, clipped: dict,
                      max_context: int | None = None) -> Iterator[RequestSpec]:
    """``_merged_requests`` for one source of single requests (no tenants, sessions or system
    prompts) with Poisson, constant or gamma arrivals, ``CHUNK`` requests at a time: the same draws in the
    same order (a chunk of gaps, one of prompt lengths, one of output lengths), arrival times
    summed one gap at a time from the same start (``np.cumsum`` adds in order), so the very same
    requests; numpy does per chunk what the general path does per request."""
    pools: dict = {}
    prompt = length_sampler(cfg.prompt, rng, pools, 0)
    output = length_sampler(cfg.output, rng, pools, 1)
    bound = output_bound(cfg.output, pools)
    hb, prio, slo = HASH_BLOCK_TOKENS, getattr(cfg, "priority", 0), getattr(cfg, "slo_class", None)
    tenant = getattr(cfg, "name", None)
    left = cfg.num_requests  # None: until duration_s
    t, t0, n = 0.0, None, 0
    while left is None or left > 0:
        times = np.cumsum(np.concatenate(([t], interarrivals(cfg.arrival, cfg.rate, cfg.cv, CHUNK, rng))))[1:]
        (p, p_clip), (o, o_clip) = prompt(CHUNK), output(CHUNK)
        t = float(times[-1])
        if t0 is None:
            t0 = float(times[0])
        arrival = times - t0
        k = CHUNK if left is None else min(CHUNK, left)
        if cfg.duration_s is not None:
            k = min(k, int(np.searchsorted(arrival, cfg.duration_s, side="right")))  # arrivals never decrease
        # _limit, a chunk at once
        limits = (repeat(None) if max_context is None else
                  np.clip(max_context - p[:k], 1, bound or None).tolist())
        for a, pt, ot, limit, pc, oc in zip(arrival[:k].tolist(), p[:k].tolist(), o[:k].tolist(), limits,
                                            p_clip[:k].tolist(), o_clip[:k].tolist()):
            if pc:
                clipped["prompt"] += 1
            if oc:
                clipped["output"] += 1
            yield RequestSpec(n, a, pt, ot, limit, None, hb, None, prio, slo, tenant)
            n += 1
        if k < CHUNK:
            return
        if left is not None:
            left -= k
