"""``srpt``: shortest remaining processing time first on predicted remaining output, with aging.

Source: SRPT as applied to LLM serving by FastServe (Wu et al., 2023, sections 3-4: skip-join
MLFQ approximating shortest-remaining-first with preemption at token granularity) and Fu et al.
(NeurIPS'24). The waiting queue is ordered by the predicted remaining output (predicted length -
tokens already generated, so a preempted request that has made progress moves up); when memory
runs out the running request with the most predicted remaining work is the victim. Aging as in
``sjf`` (``aging_s``).

Departures: a shorter arrival does not preempt a running request while memory suffices
(preemption only on memory pressure); no multi-level queues; predictions made once on arrival.
"""
from __future__ import annotations

from sim.scheduler.base import register
from sim.scheduler.sjf import SJFScheduler


@register("srpt")
class SRPTScheduler(SJFScheduler):
    queue_static = False  # aged keys (as sjf)

    def length(self, r) -> float:
        return self.predicted_remaining(r)

    def victim(self):
        return max(self.running, key=lambda r: (self.predicted_remaining(r), r.spec.arrival_s))
