"""What every scheduling policy provides, and the one-line registry.

A policy is one small file: a ``Knobs`` model (its config keys, validated with their path) and a
class with ``schedule(now) -> StepPlan``. It owns its queues, may call the KV manager, and never
changes request state: the engine applies the plan (DESIGN.md sections 2-3). Register with
``@register("name")``.
"""
from __future__ import annotations

from collections import deque
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from sim.kv.blocks import KVManager
from sim.request import Request
from sim.types import StepPlan

REGISTRY: dict[str, type["Scheduler"]] = {}


def register(name: str):
    """Class decorator: make a policy selectable as ``scheduler.name: <name>``."""

    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


class Knobs(BaseModel):
    """Knobs every batching policy has (vLLM names and defaults where they exist)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_num_seqs: int = Field(default=256, ge=1, description="most sequences in one step")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="most new tokens in one step")


class Scheduler:
    """Base class: FCFS queues and the shared bookkeeping; subclasses implement ``schedule``."""

    name: ClassVar[str] = "base"
    Knobs: ClassVar[type[Knobs]] = Knobs

    def __init__(self, knobs: Knobs, kv: KVManager):
        self.knobs = knobs
        self.kv = kv
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # ---- the engine calls these ----------------------------------------------------------
    def reject_reason(self, req: Request) -> str | None:
        """Why this policy can never serve ``req`` (None if it can)."""
        need = self.kv.blocks_for(req.spec.prompt_tokens + req.spec.output_tokens)
        if need > self.kv.num_blocks:
            return (f"exceeds_kv_capacity: needs {need} KV blocks for {req.spec.prompt_tokens}+{req.spec.output_tokens} tokens; "
                    f"the replica has {self.kv.num_blocks}")
        return None

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def finish(self, req: Request) -> None:
        """``req`` produced its last token: drop it and free its blocks."""
        self.running.remove(req)
        self.kv.free(req.id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, now: float) -> StepPlan:
        raise NotImplementedError

    # ---- helpers for policies -------------------------------------------------------------
    def preempt(self, victim: Request, plan: StepPlan) -> None:
        """Preemption by recompute: free the victim's blocks and requeue it at the front.
        (The engine resets its progress when it commits the plan.)"""
        self.running.remove(victim)
        self.kv.free(victim.id)
        self.waiting.appendleft(victim)
        plan.preempted.append(victim.id)
        plan.num_new_tokens.pop(victim.id, None)

    def schedule_decodes(self, plan: StepPlan) -> None:
        """Give every running request its next token(s), preempting by recompute when blocks
        run out. The victim is the last request in ``running`` (the most recently admitted
        under FCFS), as in vLLM; a request that is itself the last one preempts itself."""
        kv, out, running = self.kv, plan.num_new_tokens, self.running
        tables, bs = kv.tables, kv.block_size
        i = 0
        while i < len(running):
            r = running[i]
            total = r.prompt_tokens + r.num_generated
            if total > len(tables[r.id]) * bs:  # needs a new block (the common case skips this)
                while not kv.allocate(r.id, total):
                    victim = running[-1]
                    self.preempt(victim, plan)
                    if victim is r:
                        break
                else:
                    out[r.id] = total - r.num_computed
                    i += 1
                continue
            out[r.id] = total - r.num_computed
            i += 1
