"""``lookahead``: future-aware admission on projected peak KV use (LightLLM's router).

Source: LightLLM (ModelTC/lightllm, v2-v3, ``router`` with "token attention"): before admitting
a request the router projects, with each request's expected remaining output, how many KV tokens
running + new requests will hold at every future point where one of them finishes, and admits
only if the peak fits the pool, so admitted requests are (almost) never preempted. With the
requests sorted by remaining output o_1 <= ... <= o_n and current sizes c_j, the use just
before request k finishes is sum_{j>=k} (c_j + o_k); the peak is the largest of these.

Departures: LightLLM estimates with the client's ``max_new_tokens`` (``predictor: max_output``);
we default to ``oracle`` and offer the predictors of ``sim.scheduler.predictors``; the projection
is in blocks (one extra block per live request for rounding); steps are otherwise ``vllm_v1``
steps, and an underestimate falls back to vLLM preemption.
"""
from __future__ import annotations

import numpy as np

from sim.scheduler.base import register
from sim.scheduler.predictors import Predicted, PredictorKnobs
from sim.scheduler.vllm_v1 import V1Knobs, VLLMV1Scheduler


class LookaheadKnobs(PredictorKnobs, V1Knobs):
    pass


def projected_peak_blocks(sizes, remaining, block_size: int) -> float:
    """Peak KV blocks of requests holding ``sizes`` tokens now, each growing one token per step
    for its ``remaining`` steps and then freeing everything."""
    order = np.argsort(remaining, kind="stable")
    o = np.asarray(remaining, float)[order]
    c = np.asarray(sizes, float)[order]
    alive = np.arange(len(o), 0, -1)  # requests still holding KV just before request k finishes
    suffix = np.cumsum(c[::-1])[::-1]
    return float(np.max((suffix + o * alive) / block_size + alive)) if len(o) else 0.0


@register("lookahead")
class LookaheadScheduler(Predicted, VLLMV1Scheduler):
    Knobs = LookaheadKnobs
    queue_static = False  # aged keys / an admission test reading running requests

    def admissible(self, r, now):
        if not super().admissible(r, now):
            return False
        reqs = [*self.running, r]
        peak = projected_peak_blocks([q.num_tokens for q in reqs], [self.predicted_remaining(q) for q in reqs],
                                     self.kv.block_size)
        return peak <= self.kv.num_blocks - self.kv.watermark_blocks or not self.running
