"""``static``: request-level (static) batching as in FasterTransformer.

Source: NVIDIA FasterTransformer's batch inference and the Orca paper's description of it (Yu et
al., OSDI'22, section 2.2): a batch is formed from the waiting requests, its prompts run together,
and it decodes until every member has finished; only then is the next batch formed, so finished
requests leave idle slots behind.

Departures: paged KV blocks are allocated as tokens grow (FasterTransformer reserves the maximum
length); if blocks run out a member is preempted by recompute and rejoins a later batch.
"""
from __future__ import annotations

from sim.scheduler.base import Scheduler, register
from sim.types import StepPlan


@register("static")
class StaticScheduler(Scheduler):
    def reject_reason(self, req):
        if req.spec.prompt_tokens > self.knobs.max_num_batched_tokens:
            return f"exceeds_token_budget: prompt of {req.spec.prompt_tokens} tokens exceeds max_num_batched_tokens {self.knobs.max_num_batched_tokens}"
        return super().reject_reason(req)

    def steady(self) -> bool:
        return True  # a running batch only decodes; nobody is admitted until it empties

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        if not self.running:  # form the next batch
            budget = self.knobs.max_num_batched_tokens
            while self.waiting and len(self.running) < self.knobs.max_num_seqs:
                r = self.waiting[0]
                if r.remaining > budget and plan.num_new_tokens:
                    break
                if not self.admit_blocks(r, plan, r.num_tokens):
                    break
                self.waiting.popleft()
                self.running.append(r)
                plan.num_new_tokens[r.id] = r.remaining
                budget -= r.remaining
            return plan
        self.schedule_decodes(plan)
        return plan
