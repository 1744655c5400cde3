"""``sjf``: shortest job first on predicted output length, with aging.

Source: the length-aware scheduling line of work: FastServe (Wu et al., 2023, section 4) and
"Efficient LLM Scheduling by Learning to Rank" (Fu et al., NeurIPS'24, section 3), which order
the queue by a predicted output length and show lower mean latency than FCFS under load
(head-of-line blocking by long requests). Steps are ``vllm_v1`` steps (one token budget,
chunked prefill); only the waiting queue's order differs.

Aging: a request's key is its predicted length halved every ``aging_s`` seconds it has waited
since arrival, so after ``aging_s * log2(predicted)`` seconds it outranks every fresh request
and nothing starves (the order is static: it sorts by ``log2(predicted) + arrival / aging_s``).
``aging_s: null`` turns aging off (pure SJF, which can starve long requests).

Departures: non-preemptive (memory preemption as vLLM: the last running request); predictions
come from ``predictor`` (``sim.scheduler.predictors``), made once on arrival.
"""
from __future__ import annotations

import math

from pydantic import Field

from sim.scheduler.base import register
from sim.scheduler.predictors import Predicted, PredictorKnobs
from sim.scheduler.vllm_v1 import V1Knobs, VLLMV1Scheduler


class SJFKnobs(PredictorKnobs, V1Knobs):
    aging_s: float | None = Field(default=30.0, gt=0, description="waiting seconds that halve a request's key")


@register("sjf")
class SJFScheduler(Predicted, VLLMV1Scheduler):
    Knobs = SJFKnobs
    queue_static = False  # aged keys / an admission test reading running requests

    def length(self, r) -> float:
        """The predicted length the queue is ordered by."""
        return self.predict(r)

    def queue_key(self, r):
        aged = r.spec.arrival_s / self.knobs.aging_s if self.knobs.aging_s is not None else 0.0
        return (math.log2(self.length(r)) + aged, r.spec.arrival_s, r.id)
