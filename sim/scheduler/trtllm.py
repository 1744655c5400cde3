"""``trtllm``: TensorRT-LLM's in-flight batching (PyTorch backend, ``trtllm-serve`` 1.0-1.2).

Source: TensorRT-LLM ``PyExecutor`` (``_schedule`` with the micro-batch scheduler and the
batch-waiting step) and ``LlmArgs`` (``max_num_tokens``, ``enable_chunked_prefill``,
``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``). A step is generation requests
first, then context requests in arrival order, under one ``max_num_tokens`` budget. Without
chunked prefill (the default) a prompt is scheduled whole or not at all.

Batch waiting (off by default; ``batch_wait_timeout_iters`` > 0 turns it on): while requests
are generating, waiting context requests are held back until their prompt tokens plus the
step's generation tokens reach ``batch_wait_max_tokens_ratio`` x ``max_num_tokens``, or until
they have been held for ``batch_wait_timeout_iters`` steps; then all that fit go at once. It
trades TTFT (up to that many decode steps) for fuller context batches.

Capacity: ``GUARANTEED_NO_EVICT`` (the default) admits a request only with KV blocks for its
whole sequence, prompt plus its output limit (``max_tokens``; at most ``max_seq_len``; with
the ``max_tokens_oracle`` knob, its actual output length, as for a benchmark that sends
``max_tokens`` = the output length with ``ignore_eos``), held from admission; ``MAX_UTILIZATION`` takes blocks as tokens come and preempts when they run out.

Overlap scheduler (``overlap_scheduler``; TRT-LLM's ``disable_overlap_scheduler: false``, its
PyTorch backend's default): the executor forms the batch of step k+1 while step k runs (its loop
fetches new requests, schedules and launches the next batch, and only then waits for the
previous step's tokens), so a request that arrives while a step runs joins the step after the
next one: it may join the step being planned only if it arrived before the step now ending was
formed. An idle engine (nothing running) takes a request at once. Off here by default, so that
plans match the other policies step for step; the silicon replay turns it on.

Departures: a preempted request (``MAX_UTILIZATION``) is recomputed, not paused;
``enable_chunked_prefill: true`` chunks like ``vllm_v1``.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.scheduler.base import BudgetScheduler, Knobs, register
from sim.types import StepPlan


class TRTLLMKnobs(Knobs):
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    max_seq_len: int | None = Field(default=None, ge=1, description="longest sequence (None: the model's context)")
    max_tokens_oracle: bool = Field(default=False, description=(
        "explicit oracle: each request's max_tokens is its actual output length (benchmarks that send "
        "max_tokens = the output length with ignore_eos); else the client's limit"))
    enable_chunked_prefill: bool = Field(default=False, description="chunk prompts to the budget left (else whole prompts only)")
    batch_wait_timeout_iters: int = Field(default=0, ge=0, description="most steps context requests are held back (0: off)")
    batch_wait_max_tokens_ratio: float = Field(default=0.0, ge=0, le=1, description=(
        "hold context requests until the step's tokens reach this fraction of max_num_batched_tokens"))
    overlap_scheduler: bool = Field(default=False, description=(
        "form step k+1's batch while step k runs: a request arriving during a step joins the one after next"))


@register("trtllm")
class TRTLLMScheduler(BudgetScheduler):
    Knobs = TRTLLMKnobs
    queue_static = False  # the batch-waiting counter moves with every step
    chunk_keeps_single_tokens = True  # a generation token is never split or refused

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held_steps = 0  # consecutive steps the waiting context requests were held back

    def overlapped(self) -> bool:
        return self.knobs.overlap_scheduler

    @classmethod
    def reads_output_limit(cls, knobs) -> bool:
        return knobs.capacity_scheduler_policy != "MAX_UTILIZATION" and not knobs.max_tokens_oracle

    def reserve(self, r, total_tokens):
        if self.knobs.capacity_scheduler_policy == "MAX_UTILIZATION":
            return total_tokens
        full = r.spec.prompt_tokens + r.spec.output_tokens if self.knobs.max_tokens_oracle else r.max_total_tokens
        cap = self.knobs.max_seq_len or self.max_context
        return max(total_tokens, full if cap is None else min(full, cap))

    def reject_reason(self, req):
        k, kv = self.knobs, self.kv
        if not k.enable_chunked_prefill and req.spec.prompt_tokens > k.max_num_batched_tokens:
            # TRT-LLM refuses such a request (the prompt must fit max_num_tokens without chunking)
            return (f"exceeds_token_budget: prompt of {req.spec.prompt_tokens} tokens exceeds max_num_tokens "
                    f"{k.max_num_batched_tokens} (whole-prompt prefill; set enable_chunked_prefill)")
        reserve = kv.blocks_for(self.reserve(req, req.spec.prompt_tokens + 1))
        if reserve > kv.num_blocks - kv.watermark_blocks:
            return (f"exceeds_kv_capacity: {k.capacity_scheduler_policy} reserves {reserve} KV blocks for the whole "
                    f"sequence; admission keeps {kv.watermark_blocks} of the replica's {kv.num_blocks} free")
        return super().reject_reason(req)

    def chunk(self, r, want, budget):
        if self.knobs.enable_chunked_prefill or r.num_computed >= r.spec.prompt_tokens:
            return min(want, budget)
        return want if want <= budget else 0

    def release(self, plan: StepPlan) -> bool:
        """Batch waiting: context requests are held back while the step's tokens stay under the
        ratio, for at most ``batch_wait_timeout_iters`` steps in a row."""
        k = self.knobs
        if not (k.batch_wait_timeout_iters == 0 or not self.waiting or not plan.num_new_tokens):
            tokens = sum(plan.num_new_tokens.values()) + sum(r.remaining for r in self.waiting if self.admissible(r, None))
            if self.held_steps < k.batch_wait_timeout_iters and tokens < k.batch_wait_max_tokens_ratio * k.max_num_batched_tokens:
                self.held_steps += 1
                return False
        self.held_steps = 0
        return True

    def decode_batch(self):
        reqs = super().decode_batch()
        if reqs is not None:
            self.held_steps = 0  # as ``schedule`` does when nothing waits
        return reqs

    def steady(self) -> bool:
        # while requests wait, each step moves the batch-waiting counter: plan step by step
        return not self.waiting
