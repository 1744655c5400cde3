"""``sarathi``: Sarathi-Serve stall-free batching (Agrawal et al., OSDI'24, sections 4.1-4.3).

Source: "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve" and its
implementation (microsoft/sarathi-serve, ``sarathi/core/scheduler/sarathi_scheduler.py``). Every
step has a fixed token budget (``chunk_size``, the paper's token budget tau, chosen from the TPOT
SLO: 512 for strict, 2048 for relaxed). Decodes are scheduled first, then the ongoing prefill
chunks, then new prefills, each prefill chunked to what is left of the budget, so a long prompt
never stalls the running decodes (section 4.2, Algorithm 1).

KV memory follows the implementation (its block manager is vLLM v0's, as in vLLM v0 chunked
prefill): admitting a request allocates blocks for its whole prompt (with the tokens it already
generated, after a recompute preemption) at once, keeping the watermark; its later chunks need
no new blocks, so only decode growth can run out of memory and preempt. The engine's memory plan
sizes the activation peak from ``chunk_size`` (Sarathi-Serve's ``get_max_num_batched_tokens``
returns the chunk size: no step computes more tokens).

Departures: preemption follows vLLM (the last running request, recompute or swap) rather than
popping the tail of the not-yet-visited running list; ``max_num_batched_tokens`` is not used
(the budget is ``chunk_size``); no dynamic chunk-size schedule.
"""
from __future__ import annotations

from pydantic import Field

from sim.scheduler.base import BudgetScheduler, Knobs, register


class SarathiKnobs(Knobs):
    chunk_size: int = Field(default=512, ge=1, description="token budget per step (the paper's tau)")

    @property
    def max_step_tokens(self) -> int:
        return self.chunk_size


@register("sarathi")
class SarathiScheduler(BudgetScheduler):
    Knobs = SarathiKnobs

    queue_static = True  # FCFS, a fixed chunk budget; decodes first whatever their progress

    def budget(self) -> int:
        return self.knobs.chunk_size

    def reserve(self, r, total_tokens):
        """The whole prompt (and generated tokens to recompute) on admission, not one chunk."""
        return max(total_tokens, r.num_tokens)

    def running_order(self):
        """Decodes (prompt done) first, then unfinished prefill chunks, each in admission order."""
        return sorted(self.running, key=lambda r: r.num_computed < r.prompt_tokens)
