"""Output-length predictors for length-aware policies (``sjf``, ``srpt``, ``lookahead``).

A predictor is a key function in a dict: ``(spec, knobs, rng) -> predicted output tokens``. It
is called once per request, when the request arrives at its scheduler, and the answer is kept,
so a noisy prediction does not change while the request waits. These are the only places a
policy reads ``RequestSpec.output_tokens`` (the ground truth).

- ``oracle``: the true output length (an upper bound on what any predictor can do).
- ``noisy``: the true length times a lognormal factor ``exp(noise_sigma * N(0, 1))`` drawn from
  the scheduler's seeded generator (median-unbiased; sigma 0.5 puts half of the predictions
  within a factor of 1.4), in the spirit of learned length predictors (S3, Jin et al. 2023;
  Qiu et al. 2024 "Efficient interactive LLM serving with proxy model-based sequence length
  prediction").
- ``bucketed``: the upper bound of the length bucket the true length falls in (a classifier
  over buckets, as in S3), or the client's limit above the last bucket.
- ``max_output``: the client's limit ``max_output_tokens`` (what LightLLM's router assumes).
"""
from __future__ import annotations

import bisect
from typing import Literal

from pydantic import Field

from sim.scheduler.base import Knobs


class PredictorKnobs(Knobs):
    predictor: Literal["oracle", "noisy", "bucketed", "max_output"] = "oracle"
    noise_sigma: float = Field(default=0.5, ge=0, description="noisy: lognormal sigma of the multiplicative error")
    buckets: tuple[int, ...] = Field(default=(32, 64, 128, 256, 512, 1024, 2048, 4096),
                                     description="bucketed: ascending bucket upper bounds (tokens)")


def _bucket(spec, k: PredictorKnobs, rng) -> float:
    i = bisect.bisect_left(k.buckets, spec.output_tokens)
    return float(k.buckets[i]) if i < len(k.buckets) else float(_limit(spec))


def _limit(spec) -> int:
    return spec.max_output_tokens if spec.max_output_tokens is not None else spec.output_tokens


PREDICTORS = {
    "oracle": lambda spec, k, rng: float(spec.output_tokens),
    "noisy": lambda spec, k, rng: spec.output_tokens * float(rng.lognormal(0.0, k.noise_sigma)),
    "bucketed": _bucket,
    "max_output": lambda spec, k, rng: float(_limit(spec)),
}


class Predicted:
    """Mixin for a scheduler: predicts each request's output length when it arrives."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.predicted: dict[int, float] = {}

    @classmethod
    def reads_output_limit(cls, knobs) -> bool:
        return knobs.predictor == "max_output"

    def add(self, req) -> None:
        self.predict(req)  # drawn in arrival order, so a seeded run is deterministic
        super().add(req)

    def finish(self, req) -> None:
        super().finish(req)
        self.predicted.pop(req.id, None)

    def predict(self, req) -> float:
        """The kept prediction for ``req`` (at least 1 token)."""
        p = self.predicted.get(req.id)
        if p is None:
            p = self.predicted[req.id] = max(1.0, PREDICTORS[self.knobs.predictor](req.spec, self.knobs, self.rng))
        return p

    def predicted_remaining(self, req) -> float:
        """Predicted output tokens still to generate (at least 1 while it runs)."""
        return max(1.0, self.predict(req) - req.num_generated)
