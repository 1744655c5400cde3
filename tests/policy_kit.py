"""Helpers for the policy and KV tests: hand-made requests, schedulers over a tiny KV manager,
and a step function that applies a plan with the engine's lifecycle rules (``sim.lifecycle``)."""
from __future__ import annotations

import numpy as np

from sim import lifecycle
from sim.kv import KVManager, PrefixKVManager
from sim.request import Request, Status
from sim.scheduler import REGISTRY
from sim.types import RequestSpec


def req(i: int, prompt: int, output: int, *, arrival: float = 0.0, priority: int = 0, hashes=None,
        hash_block_tokens: int = 8, max_out: int | None = None) -> Request:
    return Request(RequestSpec(id=i, arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                               max_output_tokens=max_out, block_hashes=hashes, hash_block_tokens=hash_block_tokens,
                               priority=priority))


def make(name: str, blocks: int, bs: int = 4, *, swap_blocks: int = 0, prefix: bool = False, eviction: str = "lru",
         seed: int = 0, max_context: int | None = None, **knobs):
    kv = (PrefixKVManager(blocks, bs, 0.0, swap_blocks=swap_blocks, eviction=eviction) if prefix
          else KVManager(blocks, bs, 0.0, swap_blocks=swap_blocks))
    cls = REGISTRY[name]
    return cls(cls.Knobs(**knobs), kv, rng=np.random.default_rng(seed), max_context=max_context)


def step(s, now: float = 0.0):
    """One engine step on scheduler ``s``: schedule, commit, complete (with the engine's own
    ``sim.lifecycle`` rules; the step takes no time). Returns the plan."""
    plan = s.schedule(now)
    by_id = {r.id: r for r in [*s.running, *s.waiting]}
    lifecycle.commit(plan, by_id, now)
    for r in lifecycle.complete_step(plan, by_id, now, now, None)[2]:
        if r.status is Status.FINISHED:
            s.finish(r)
    return plan


def drain(s, reqs, max_steps: int = 10_000) -> list:
    """Add ``reqs`` and step until all finish; the plans, in order."""
    for r in reqs:
        s.add(r)
    plans = []
    while s.has_work():
        plans.append(step(s, float(len(plans))))
        assert len(plans) < max_steps, "no progress"
    return plans
