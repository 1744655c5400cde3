"""The engine's decode fast-forward, without the event loop (docs/design-decisions.md).

When a step gives every running request exactly its next decode token, nothing else happens in
it, and the policy vouches it would plan the same again (``Scheduler.steady``), the steps that
follow are identical up to the first of: a request finishes, a request arrives at this replica,
a block the pool cannot give. ``decode_run`` prices that run exactly as single steps would be
priced, allocating blocks in the order the scheduler would; the engine waits once for the run's
end and applies it with ``lifecycle.complete_run``. Results are identical to stepping one step at
a time (tests/test_fast_forward.py).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from sim.kv.blocks import KVManager
from sim.request import Request
from sim.types import COMPONENTS


@dataclass
class DecodeRun:
    """A run of identical decode steps, as columns."""

    reqs: list
    times: list  # steps + 1 entries: each step's start, then the last step's end
    columns: dict  # "total" and each component: one value per step
    used: list  # KV blocks in use after each step's allocations
    source: str
    steps: int


VECTOR_RUN = 48
"""Decode runs expected to last at least this many steps are priced with numpy arrays."""


def steady_decode(sched, plan, by_id: dict) -> bool:
    """True when ``plan`` gives every running request exactly its next decode token, nothing
    else happens in it, and the policy vouches that it would plan the same again."""
    if (plan.preempted or plan.aborted or plan.swapped_in or plan.blocks_swapped_out or plan.cached_tokens
            or len(plan.num_new_tokens) != len(sched.running) or not sched.steady()):
        return False
    for rid, n in plan.num_new_tokens.items():
        r = by_id[rid]
        if n != 1 or not r.num_generated or r.num_generated >= r.output_tokens:
            return False
    return True


def decode_run(reqs: list[Request], kv: KVManager, cost, start: float, arrival: float) -> DecodeRun:
    """The steps of a steady decode batch ``reqs`` starting at ``start``, up to the first of (a
    request finishes, ``arrival``: the earliest time a request can reach this replica, a block
    the pool cannot give), with per-request work only at the ends. Blocks are allocated as the
    steps need them; request state is left to ``lifecycle.complete_run``."""
    n = len(reqs)
    horizon = min(r.output_tokens - r.num_generated for r in reqs)
    kv_tokens = sum(r.num_computed for r in reqs) + n
    longest = max(r.num_computed for r in reqs) + 1
    grower = BlockGrower(kv, reqs)
    st = cost.decode_step(n, kv_tokens, longest)
    # long runs: vectorised prices (when the cost model has them); short ones: step by step
    expect = horizon if arrival == float("inf") else min(horizon, int((arrival - start) / st.total) + 2)
    series = cost.decode_series(n, kv_tokens, longest, horizon) if expect >= VECTOR_RUN else None
    if series is not None:  # cut at the arrival, then at a block shortage
        times = np.cumsum(np.concatenate(([start], series["total"])))  # sequential, like simpy's clock
        late = np.flatnonzero(times[1:horizon] >= arrival)
        k_end = grower.grow_until(int(late[0]) + 1 if late.size else horizon)
        cols = {c: series[c][:k_end].tolist() for c in ("total", *COMPONENTS)}
        return DecodeRun(reqs, times[: k_end + 1].tolist(), cols, grower.used(k_end), series["source"], k_end)
    sts, times, t = [st], [start], start + st.total  # step by step (table lookups count each query)
    heap, price = grower.heap, cost.decode_step
    for k in range(1, horizon):
        if t >= arrival or (heap[0][0] == k and grower.grow_until(k + 1) == k):
            break
        times.append(t)
        st = price(n, kv_tokens + k * n, longest + k)
        sts.append(st)
        t += st.total
    times.append(t)
    k_end = len(sts)
    rows = [(x.total, x.gemm, x.attn_prefill, x.attn_decode, x.comm, x.other_gpu, x.cpu, x.swap) for x in sts]
    cols = dict(zip(("total", *COMPONENTS), map(list, zip(*rows))))
    return DecodeRun(reqs, times, cols, grower.used(k_end), sts[0].source, k_end)


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
