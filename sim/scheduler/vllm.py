"""``vllm``: continuous batching as in vLLM v0 (0.4-0.6, chunked prefill off).

Source: vLLM v0 ``core/scheduler.py`` (``_schedule_default``) and the PagedAttention paper
(Kwon et al., SOSP'23, section 4.5). FCFS; each step either admits waiting requests for their
whole prompt (prefills first, never mixed with decodes) within ``max_num_seqs`` and
``max_num_batched_tokens`` and the KV watermark, or, if none can be admitted, runs one decode
token for every running request. When blocks run out the most recently admitted request is
preempted by recompute (its blocks freed, requeued at the front, prompt + generated tokens
recomputed on readmission).

Departures: ``kv.preemption: swap`` swaps victims out (vLLM v0 swaps only multi-sequence
groups); prefix-cache hits are not used (blocks are still registered); vLLM v0 rejects a
prompt longer than ``max_num_batched_tokens`` at startup configuration, we reject the request
with a reason. A preempted request whose recompute exceeds the token budget is admitted alone.
"""
from __future__ import annotations

from sim.scheduler.base import Scheduler, register
from sim.types import StepPlan


@register("vllm")
class VLLMScheduler(Scheduler):
    def reject_reason(self, req):
        if req.spec.prompt_tokens > self.knobs.max_num_batched_tokens:
            return (f"exceeds_token_budget: prompt of {req.spec.prompt_tokens} tokens exceeds max_num_batched_tokens "
                    f"{self.knobs.max_num_batched_tokens} (whole-prompt prefill; use a chunked-prefill scheduler)")
        return super().reject_reason(req)

    def steady(self) -> bool:
        # A decode-only plan means no waiting request could be admitted; while the batch only
        # decodes, free blocks only shrink and the running count stays, so none can be admitted
        # later either. (With a prefix cache, admission attempts touch the cache: require an
        # empty queue there.)
        return self.kv.static_refusal or not self.waiting

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self.knobs.max_num_batched_tokens
        while self.waiting and len(self.running) < self.knobs.max_num_seqs:
            r = self.waiting[0]
            need = r.remaining
            if need > budget and (plan.num_new_tokens or need <= self.knobs.max_num_batched_tokens):
                break
            if not self.admit_blocks(r, plan, r.num_tokens):
                break
            self.waiting.popleft()
            self.running.append(r)
            plan.num_new_tokens[r.id] = need
            budget -= need
        if plan.num_new_tokens:
            return plan
        self.schedule_decodes(plan)
        return plan
