"""The cost-model contract: a step's BatchShape in, its StepTime out."""
from __future__ import annotations

from typing import Protocol

from sim.types import BatchShape, StepTime


class CostModel(Protocol):
    """Prices one engine step. Sees only the batch shape, never requests or policies."""

    source: str

    def step_time(self, shape: BatchShape) -> StepTime: ...

    def decode_step(self, num_seqs: int, kv_tokens: int, longest: int) -> StepTime:
        """A decode-only step from its aggregates (the engine's fast-forward): exactly
        ``step_time`` of ``num_seqs`` single-token sequences whose cached contexts plus one sum
        to ``kv_tokens``, the longest being ``longest``."""
        ...

    def decode_totals(self, num_seqs: int, kv_tokens: int, longest: int, steps: int):
        """The ``total`` of ``decode_step`` for consecutive steps (kv_tokens grows by num_seqs,
        longest by 1 each step), bit-identical and without side effects (a list or a numpy
        array); None when not available: the fast-forward then prices step by step."""
        ...

    def decode_series(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> dict | None:
        """``decode_step`` for consecutive steps as columns, lists or numpy arrays (keys ``total``
        and each component, plus ``source``), bit-identical and without side effects; None when
        not available."""
        ...

    # Optional: ``count_decode_run(num_seqs, kv_tokens, longest, steps) -> None``. A model whose
    # ``decode_totals`` / ``decode_series`` count out-of-range queries only here (the kernel
    # database) is told how many steps of a priced run were kept, since the fast-forward may
    # price steps past an arrival that it then drops; it counts exactly what ``decode_step``
    # would have counted for those steps.

    def out_of_range_total(self) -> int:
        """Operator queries outside the calibrated range so far (0 for a pure roofline)."""
        ...
