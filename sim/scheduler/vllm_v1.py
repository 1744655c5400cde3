"""``vllm_v1``: the vLLM V1 engine's scheduler (vLLM 0.8-0.10, ``vllm/v1/core/sched/scheduler.py``).

Source: vLLM V1 ``Scheduler.schedule`` with the FCFS policy. There is no prefill or decode
phase: a step is ``{request_id: num_new_tokens}`` under one token budget
(``max_num_batched_tokens``). Running requests come first, in order (decodes and unfinished
prefill chunks alike), then waiting ones; prefills are chunked to what is left of the budget;
``long_prefill_token_threshold`` caps the tokens any one request computes in a step. When blocks
run out the last running request is preempted (recompute, or swap with ``kv.preemption: swap``)
and no waiting request is admitted in that step. A waiting request that does not fit stops
admission (head-of-line). Prefix-cache hits skip whole cached blocks, never the last token.

Async scheduling (``async_scheduling``; ``--async-scheduling``, opt-in from vLLM 0.10 and the
default from 0.14): the engine core schedules step k+1 while step k runs, so a request that
arrives during a step joins the step after the next one (``BudgetScheduler.overlapped``). Off by
default here, as in the vLLM versions this policy follows.

Departures: the KV watermark (``kv.watermark``) is kept at admission (V1 has none; set 0 to
match); no speculative decoding, no encoder budget, no ``max_num_partial_prefills``; when nothing
is running and the head's chunk does not fit the free blocks, the chunk shrinks to fit (V1 waits).
"""
from __future__ import annotations

from pydantic import Field

from sim.scheduler.base import BudgetScheduler, Knobs, register


class V1Knobs(Knobs):
    long_prefill_token_threshold: int | None = Field(
        default=None, ge=1, description="most tokens one request computes in a step (None: no cap)")
    async_scheduling: bool = Field(default=False, description=(
        "--async-scheduling (vLLM 0.10+, the default from 0.14): the next step is scheduled while this one "
        "runs, so a request arriving during a step joins the one after next"))


@register("vllm_v1")
class VLLMV1Scheduler(BudgetScheduler):
    Knobs = V1Knobs

    def overlapped(self) -> bool:
        return self.knobs.async_scheduling

    queue_static = True  # FCFS, a fixed budget: nothing moves while the batch only decodes (async scheduling is ``overlapped``)
    chunk_keeps_single_tokens = True  # the threshold is at least 1

    def chunk(self, r, want, budget):
        cap = self.knobs.long_prefill_token_threshold
        return min(want, budget, cap if cap is not None else want)
