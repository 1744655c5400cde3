"""The decode fast-forward's parts against plain step-by-step references: the block grower
(crossings encoded as integers, repeated crossings, the bulk and the one-block-at-a-time paths)
and the clock (list and array goes, the first go sized by a price hint)."""
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.fastforward import BlockGrower, run_clock
from sim.kv.blocks import KVManager


class _OneAtATime(KVManager):
    bulk_growth = False  # the grower's slow path: one grow_one per block, the pool asked at each step


def _reference_growth(due: list[int], bs: int, free: int, ends: list[int]):
    """Blocks step by step in running order for the steps before each of ``ends`` in turn:
    (the step each call stopped at, the blocks each request got in order (as indices into the
    pool's hand-out order), the next crossing of each request, (step, blocks taken so far) after
    each step that took some)."""
    due, got, changes, taken, stops = list(due), [[] for _ in due], [], 0, []
    k = min(due) if due else 0
    for k_end in ends:
        stop = k_end
        while k < k_end:
            need = [i for i, d in enumerate(due) if d == k]
            if need:
                if taken + len(need) > free:
                    stop = k
                    break
                for i in need:
                    got[i].append(taken)
                    taken += 1
                    due[i] = k + bs
                changes.append((k, taken))
            k += 1
        stops.append(stop)
        if stop < k_end:
            break
    return stops, got, due, changes


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 12), st.sampled_from([1, 2, 4, 16]), st.data())
def test_block_grower_matches_step_by_step(n, bs, data):
    due = data.draw(st.lists(st.integers(-bs, 3 * bs), min_size=n, max_size=n))
    ends = sorted(data.draw(st.lists(st.integers(0, 5 * bs), min_size=1, max_size=4)))
    free = data.draw(st.integers(0, 40))
    bulk = data.draw(st.booleans())
    held = 3  # blocks in use before the run, outside the batch
    kv = (KVManager if bulk else _OneAtATime)(held + free, bs)
    assert kv.allocate(-1, held * bs)  # another request's blocks
    reqs = [SimpleNamespace(id=100 + 7 * i, num_computed=5 * i) for i in range(n)]
    for r in reqs:
        kv.held[r.id] = 0
    grower = BlockGrower(kv, reqs, list(due))
    stops = []
    for k_end in ends:
        stops.append(grower.grow_until(k_end))
        if stops[-1] < k_end:
            break
    want_stops, got, want_due, want_changes = _reference_growth(due, bs, free, ends)
    assert stops == want_stops
    assert [kv.held[r.id] for r in reqs] == list(map(len, got))
    assert grower.due == want_due
    assert kv.num_used == held + sum(map(len, got)) and grower.blocks == sum(map(len, got))
    steps = max(stops[-1], 0)  # the blocks in use after each step's allocations, as the run reports them
    want_used = [held + max((u for k, u in want_changes if k <= j), default=0) for j in range(steps)]
    assert grower.run([0.0] * (steps + 1), None, "test", steps).used == want_used


class _Prices:
    """A cost model whose step price depends on the KV tokens and the longest context only, as
    lists for short goes and arrays for long ones (``vector`` steps or more)."""

    source = "test"

    def __init__(self, vector: int, base: float, slope: float):
        self.vector, self.base, self.slope = vector, base, slope
        self.asked = []

    def price(self, kv_tokens: int, longest: int) -> float:
        return self.base + self.slope * kv_tokens + 1e-9 * (longest % 7)

    def decode_totals(self, n, kv_tokens, longest, steps):
        self.asked.append(steps)
        out = [self.price(kv_tokens + k * n, longest + k) for k in range(steps)]
        return out if steps < self.vector else np.array(out)


def _reference_clock(cost, n, kv_tokens, longest, horizon, start, arrival):
    times, t = [start], start
    for k in range(horizon):
        if k and t >= arrival:  # a later step that would start at or after the arrival ends the run
            break
        if k:
            times.append(t)
        t += cost.price(kv_tokens + k * n, longest + k)
    times.append(t)
    return times


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 16), kv_tokens=st.integers(0, 10**6), longest=st.integers(1, 10**5),
       horizon=st.integers(1, 400), start=st.floats(0.0, 1e4), gap=st.one_of(st.just(float("inf")), st.floats(0.0, 5.0)),
       hint=st.one_of(st.none(), st.floats(1e-4, 0.1)), vector=st.sampled_from([2, 8, 48]),
       base=st.floats(1e-3, 0.05), slope=st.floats(0.0, 1e-8))
def test_clock_matches_sequential_sums(n, kv_tokens, longest, horizon, start, gap, hint, vector, base, slope):
    cost = _Prices(vector, base, slope)
    arrival = start + gap
    got = run_clock(cost, n, kv_tokens, longest, horizon, start, arrival, hint)
    assert got == _reference_clock(cost, n, kv_tokens, longest, horizon, start, arrival)
    assert sum(cost.asked) <= horizon
