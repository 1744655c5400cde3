"""Helpers for the policy and KV tests: hand-made requests, schedulers over a tiny KV manager,
and a step function that applies a plan the way the engine's commit_plan / complete_step do."""
from __future__ import annotations

import numpy as np

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
    """One engine step on scheduler ``s``: schedule, commit, complete. Returns the plan."""
    by_id = {r.id: r for r in [*s.running, *s.waiting]}  # before: an aborted request leaves the queues
    plan = s.schedule(now)
    for rid in plan.preempted:
        r = by_id[rid]
        r.preemptions += 1
        if rid in plan.swapped_out:
            r.status = Status.SWAPPED
        else:
            r.num_computed, r.status = 0, Status.WAITING
    for rid, reason in plan.aborted.items():
        by_id[rid].status, by_id[rid].reject_reason = Status.REJECTED, reason
    for rid, c in plan.cached_tokens.items():
        by_id[rid].num_computed = c
        if by_id[rid].first_scheduled_s is None:
            by_id[rid].cached_tokens = c
    for rid, n in plan.num_new_tokens.items():
        r = by_id[rid]
        r.first_scheduled_s = now if r.first_scheduled_s is None else r.first_scheduled_s
        r.status = Status.RUNNING
        r.num_computed += n
        if r.num_computed == r.num_tokens:
            r.num_generated += 1
            if r.num_generated >= r.spec.output_tokens:
                r.status = Status.FINISHED
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
