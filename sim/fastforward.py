"""Pieces of the engine's decode fast-forward that need no event loop (see ``Engine.decode_run``
and docs/design-decisions.md): a run of identical decode steps as columns, and the block growth
such a run needs, done in the order the scheduler would do it."""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from sim.kv.blocks import KVManager
from sim.request import Request

@dataclass
class DecodeRun:
    """A run of identical decode steps (see ``Engine.decode_run``), as columns."""

    reqs: list
    times: list  # steps + 1 entries: each step's start, then the last step's end
    columns: dict  # "total" and each component: one value per step
    used: list  # KV blocks in use after each step's allocations
    source: str
    steps: int


VECTOR_RUN = 48
"""Decode runs expected to last at least this many steps are priced with numpy arrays."""


class BlockGrower:
    """Allocates the blocks a steady decode batch needs, step by step in running order (as the
    scheduler would), and remembers how many blocks were in use after each step's allocations."""

    def __init__(self, kv: KVManager, reqs: list[Request]):
        self.kv, self.reqs = kv, reqs
        bs, tables = kv.block_size, kv.tables
        # (step at which request i needs its next block, i): the step whose token overflows its table
        self.heap = [(len(tables[r.id]) * bs - r.num_computed, i) for i, r in enumerate(reqs)]
        heapq.heapify(self.heap)
        self.start_used = kv.num_used
        self.changes: list[tuple[int, int]] = []

    def grow_until(self, k_end: int) -> int:
        """Allocate for the steps before ``k_end``; returns the first step the pool cannot give
        (``k_end`` if it can give them all)."""
        kv, heap, bs, tables = self.kv, self.heap, self.kv.block_size, self.kv.tables
        while heap and heap[0][0] < k_end:
            k = heap[0][0]
            need = []
            while heap and heap[0][0] == k:
                need.append(heapq.heappop(heap)[1])
            if not kv.can_allocate(len(need)):  # each needs exactly one block
                for i in need:
                    heapq.heappush(heap, (k, i))
                return k
            for i in sorted(need):
                r = self.reqs[i]
                if not kv.allocate(r.id, r.num_computed + 1 + k):
                    raise RuntimeError(f"KV manager refused a block it said it had (request {r.id})")
                heapq.heappush(heap, (len(tables[r.id]) * bs - r.num_computed, i))
            self.changes.append((k, kv.num_used))
        return k_end

    def used(self, steps: int) -> list[int]:
        out = [self.start_used] * steps
        for k, u in self.changes:
            out[k:] = [u] * (steps - k)
        return out


def run_prefix(run: DecodeRun, k: int) -> DecodeRun:
    """The first ``k`` steps of ``run`` (the steps a crash let finish)."""
    return DecodeRun(run.reqs, run.times[: k + 1], {c: v[:k] for c, v in run.columns.items()}, run.used[:k],
                     run.source, k)
