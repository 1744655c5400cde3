"""``sarathi``: Sarathi-Serve stall-free batching (Agrawal et al., OSDI'24, sections 4.1-4.3).

Source: "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve". Every step has
a fixed token budget (``chunk_size``, the paper's token budget tau, chosen from the TPOT SLO:
512 for strict, 2048 for relaxed). Decodes are scheduled first, then the ongoing prefill chunks,
then new prefills, each prefill chunked to what is left of the budget, so a long prompt never
stalls the running decodes (section 4.2, Algorithm 1).

Departures: preemption follows vLLM (last running request, recompute or swap) rather than the
paper's vLLM-v0-based implementation details; the KV watermark is kept at admission;
``max_num_batched_tokens`` is not used (the budget is ``chunk_size``).
"""
from __future__ import annotations

from pydantic import Field

from sim.scheduler.base import BudgetScheduler, Knobs, register


class SarathiKnobs(Knobs):
    chunk_size: int = Field(default=512, ge=1, description="token budget per step (the paper's tau)")


@register("sarathi")
class SarathiScheduler(BudgetScheduler):
    Knobs = SarathiKnobs

    def budget(self) -> int:
        return self.knobs.chunk_size

    def running_order(self):
        """Decodes (prompt done) first, then unfinished prefill chunks, each in admission order."""
        return sorted(self.running, key=lambda r: r.num_computed < r.prompt_tokens)
