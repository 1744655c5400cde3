"""The cost-model contract: a step's BatchShape in, its StepTime out."""
from __future__ import annotations

from typing import Protocol

from sim.types import BatchShape, StepTime


class CostModel(Protocol):
    """Prices one engine step. Sees only the batch shape, never requests or policies."""

    source: str

    def step_time(self, shape: BatchShape) -> StepTime: ...

    def out_of_range_total(self) -> int:
        """Operator queries outside the calibrated range so far (0 for a pure roofline)."""
        ...
