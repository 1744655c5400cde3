"""Workloads: synthetic arrivals and lengths, and readers for public trace formats.

``build_workload`` is the one entry point the simulator uses. It returns a ``Workload``: an
iterable of ``RequestSpec`` in arrival order with ids 0, 1, 2, ... plus ``info``, a dict of
counts (clipped, skipped bad rows, source) filled while it is iterated.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from sim.types import RequestSpec
from sim.workload.config import LengthDist, TraceConfig, WorkloadConfig
from sim.workload.synthetic import interarrivals, sample_lengths

__all__ = ["Workload", "WorkloadConfig", "LengthDist", "TraceConfig", "build_workload"]


@dataclass
class Workload:
    """Requests in arrival order (a one-shot or re-iterable stream) plus counts about them."""

    _make: object
    info: dict = field(default_factory=dict)

    def __iter__(self) -> Iterator[RequestSpec]:
        return self._make()


def _synthetic(cfg: WorkloadConfig, rng: np.random.Generator, info: dict) -> Iterator[RequestSpec]:
    n = cfg.num_requests
    gaps = interarrivals(cfg.arrival, cfg.rate, cfg.cv, n, rng)
    arrivals = np.cumsum(gaps) - gaps[0]  # first request at t = 0
    prompts = sample_lengths(cfg.prompt, n, rng)
    outputs = sample_lengths(cfg.output, n, rng)
    info["source"] = f"synthetic {cfg.arrival} at {cfg.rate} req/s"
    for i in range(n):
        yield RequestSpec(id=i, arrival_s=float(arrivals[i]), prompt_tokens=int(prompts[i]), output_tokens=int(outputs[i]))


def build_workload(cfg: WorkloadConfig, *, max_context: int, rng: np.random.Generator) -> Workload:
    """The request stream ``cfg`` describes. Requests longer than ``max_context`` are passed
    through (the engine rejects and counts them) unless ``cfg.clip_to_context`` is set."""
    info: dict = {"clipped": 0, "skipped_bad_rows": 0}
    if cfg.trace is not None:
        from sim.workload.traces import read_trace_requests

        def make():
            return _clip(read_trace_requests(cfg, info), cfg, max_context, info)
    else:
        def make():
            return _clip(_synthetic(cfg, rng, info), cfg, max_context, info)

    return Workload(make, info)


def _clip(reqs: Iterator[RequestSpec], cfg: WorkloadConfig, max_context: int, info: dict) -> Iterator[RequestSpec]:
    if not cfg.clip_to_context:
        yield from reqs
        return
    from dataclasses import replace

    for r in reqs:
        if r.prompt_tokens + r.output_tokens > max_context:
            info["clipped"] += 1
            p = min(r.prompt_tokens, max_context - 1)
            r = replace(r, prompt_tokens=p, output_tokens=max(1, min(r.output_tokens, max_context - p)))
        yield r
