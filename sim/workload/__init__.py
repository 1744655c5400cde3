"""Workloads: synthetic arrivals and lengths, and readers for public trace formats.

``build_workload`` is the one entry point the simulator uses. It returns a ``Workload``: an
iterable of ``RequestSpec`` in arrival order with ids 0, 1, 2, ... plus ``info``, a dict of
counts (clipped, skipped bad rows, filtered rows, source, ...) filled while it is iterated.
``info["clipped"]`` counts the requests whose prompt / output length was clipped to the bounds
[``min``, ``max``] of its length distribution; ``info["clipped_to_context"]`` (with
``clip_to_context``) those then shortened to fit the model's context.
Iterating again gives the same requests: each pass starts from a copy of the workload's own
random generator (drawn once from the caller's ``rng``) and resets ``info``.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from sim.types import RequestSpec
from sim.workload.config import LengthDist, TraceConfig, WorkloadConfig
from sim.workload.prefix import HASH_BLOCK_TOKENS
from sim.workload.synthetic import synthetic_requests
from sim.workload.traces import PREFIX_FORMATS, detect_format, read_trace_requests

__all__ = ["Workload", "WorkloadConfig", "LengthDist", "TraceConfig", "build_workload"]


@dataclass
class Workload:
    """Requests in arrival order (re-iterable, same requests each time) plus counts about them."""

    _make: object
    info: dict = field(default_factory=dict)

    def __iter__(self) -> Iterator[RequestSpec]:
        return self._make()


def build_workload(cfg: WorkloadConfig, *, max_context: int, rng: np.random.Generator,
                   trace_output_bound: bool = False, block_tokens: int = HASH_BLOCK_TOKENS) -> Workload:
    """The request stream ``cfg`` describes. Requests longer than ``max_context`` are passed
    through (the engine rejects and counts them) unless ``cfg.clip_to_context`` is set.
    Draws one seed from ``rng``; the stream's own randomness comes from it. A synthetic request
    carries its output limit (``max_output_tokens`` = ``max_context`` minus its prompt, at least 1:
    what the engine gives a request without one), except with ``clip_to_context``, whose clipping
    may shorten the prompt (the engine then sets it); a trace's requests keep the trace's.

    ``trace_output_bound`` (for a policy that reserves by the output limit): a trace request
    without a ``max_output_tokens`` column gets the trace's longest output as its limit (within
    the context), as a synthetic one gets its distribution's bound; the trace is read once more,
    up front, to find it (``info["output_bound"]``).

    ``block_tokens``: the tokens per prefix hash of synthetic system prompts and sessions (the
    engine passes ``kv.block_size``, so they share prefixes at the KV cache's granularity)."""
    info: dict = {}
    seed = np.random.default_rng(int(rng.integers(0, 2**63)))
    bound: list = []  # the trace's longest output, once read

    def make():
        info.clear()
        info.update(clipped={"prompt": 0, "output": 0}, skipped_bad_rows=0)
        if cfg.clip_to_context:
            info["clipped_to_context"] = {"prompt": 0, "output": 0}
        own = copy.deepcopy(seed)
        if cfg.trace is not None:
            reqs = read_trace_requests(cfg, info, own)
            if trace_output_bound:
                if not bound:
                    bound.append(max((r.output_tokens for r in read_trace_requests(cfg, {}, copy.deepcopy(seed))),
                                     default=1))
                info["output_bound"] = bound[0]
                reqs = _with_limit(reqs, bound[0], max_context)
        else:
            reqs = synthetic_requests(cfg, own, info, None if cfg.clip_to_context else max_context,
                                      block_tokens=block_tokens)
        return _clip(reqs, max_context, info) if cfg.clip_to_context else reqs

    return Workload(make, info)


def _with_limit(reqs: Iterator[RequestSpec], bound: int, max_context: int) -> Iterator[RequestSpec]:
    """Trace requests without their own limit get ``bound`` (within the context, at least 1)."""
    for r in reqs:
        if r.max_output_tokens is None:
            r = r.with_output_limit(max(1, min(bound, max_context - r.prompt_tokens)))
        yield r


def carries_prefix_hashes(cfg: WorkloadConfig) -> bool:
    """Whether ``cfg``'s requests carry prefix hashes, the only thing a prefix cache can hit:
    synthetic system prompts or sessions, or a trace format with hash ids (``PREFIX_FORMATS``)."""
    if cfg.trace is not None:
        fmt = detect_format(cfg.trace.path) if cfg.trace.format == "auto" else cfg.trace.format
        return fmt in PREFIX_FORMATS
    return cfg.closed_loop is None and (cfg.system_prompts is not None or cfg.sessions is not None)


def no_shared_prefix_warnings(cfg) -> list[str]:
    """The line that says why a run with prefix caching on has a hit rate of 0 because its
    workload shares no prefixes (``cfg``: a whole Config); else none."""
    if not cfg.kv.prefix_caching or carries_prefix_hashes(cfg.workload):
        return []
    what = "the trace has no hash ids" if cfg.workload.trace is not None else "no synthetic prompt shares a prefix"
    return [f"kv.prefix_caching is on but the workload has no shared prefixes ({what}), so the prefix-cache hit "
            "rate is 0: add workload.system_prompts or workload.sessions, or replay a trace with hash ids "
            f"(formats {', '.join(PREFIX_FORMATS)})"]


def _clip(reqs: Iterator[RequestSpec], max_context: int, info: dict) -> Iterator[RequestSpec]:
    """``reqs`` shortened to fit ``max_context`` (``clip_to_context``), counted in ``info``: the
    output is kept and the prompt shortened (a client truncates its prompt to leave room for the
    answer); only an output of the whole context or more is itself cut, to leave one prompt token."""
    clipped = info["clipped_to_context"]
    for r in reqs:
        if r.prompt_tokens + r.output_tokens > max_context:
            o = min(r.output_tokens, max_context - 1)
            p = max(1, min(r.prompt_tokens, max_context - o))
            hashes = r.block_hashes
            if hashes is not None:  # keep only the blocks the clipped prompt still covers
                hashes = hashes[: -(-p // r.hash_block_tokens)]
            clipped["prompt"] += p != r.prompt_tokens
            clipped["output"] += o != r.output_tokens
            r = replace(r, prompt_tokens=p, output_tokens=o, block_hashes=hashes)
        yield r
