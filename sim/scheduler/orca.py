"""``orca``: iteration-level scheduling with per-request reservation (Yu et al., OSDI'22).

Source: "Orca: A Distributed Serving System for Transformer-Based Generative Models", sections
4.2 and 5 (Algorithm 1). The scheduler works per iteration: new requests join the running ones
between iterations and run their whole prompt in one iteration (selective batching mixes them
with decodes). Orca has no paging: admitting a request reserves KV for its maximum length
(prompt + ``max_tokens``) up front, so a running request never runs out of memory and is never
preempted, but far fewer requests fit than with paged blocks (the motivation of vLLM's
PagedAttention, Kwon et al., SOSP'23, section 2.3).

``reserve`` picks the maximum length: ``max_output_tokens`` (the client's limit: a synthetic
workload sets it to its output distribution's bound, within the context; a trace to its
``max_output_tokens`` column, else to its longest output, within the context) or ``context`` (the model's whole context). ``servesim run`` prints what was reserved.

Departures: the reservation is a set of paged blocks taken all at once (equal in size to a
contiguous slab, without fragmentation); the step also keeps ``max_num_batched_tokens``; FCFS
admission stops at the first request that does not fit.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.scheduler.base import BudgetScheduler, Knobs, register


class OrcaKnobs(Knobs):
    reserve: Literal["max_output_tokens", "context"] = Field(
        default="max_output_tokens", description="maximum length reserved on admission")


@register("orca")
class OrcaScheduler(BudgetScheduler):
    Knobs = OrcaKnobs

    queue_static = True  # FCFS, a fixed budget, reservations fixed at admission
    chunk_keeps_single_tokens = True  # a decode's one token always fits a budget of at least 1

    @classmethod
    def reads_output_limit(cls, knobs) -> bool:
        return knobs.reserve == "max_output_tokens"

    def reserve(self, r, total_tokens):
        if self.knobs.reserve == "context" and self.max_context is not None:
            return max(total_tokens, self.max_context)
        return max(total_tokens, r.max_total_tokens)

    def chunk(self, r, want, budget):
        """Whole prompts only: a request runs all it has to compute, or waits."""
        return want if want <= budget else 0

    def reject_reason(self, req):
        if req.prompt_tokens > self.knobs.max_num_batched_tokens:
            return (f"exceeds_token_budget: prompt of {req.prompt_tokens} tokens exceeds max_num_batched_tokens "
                    f"{self.knobs.max_num_batched_tokens} (Orca runs whole prompts)")
        need = self.kv.blocks_for(self.reserve(req, req.prompt_tokens))
        if need > self.kv.num_blocks - self.kv.watermark_blocks:
            return (f"exceeds_kv_capacity: reserving {need} KV blocks for its maximum length; "
                    f"the replica has {self.kv.num_blocks}")
        return super().reject_reason(req)
