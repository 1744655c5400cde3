"""The engine's decode fast-forward, without the event loop (docs/design-decisions.md).

When a step gives every running request exactly its next decode token, nothing else happens in
it, and the policy vouches it would plan the same again (``Scheduler.steady``), the steps that
follow are identical up to the first of: a request finishes, a request arrives at this replica,
a block the pool cannot give. ``decode_run`` prices that run exactly as single steps would be
priced, allocating blocks in the order the scheduler would; the engine waits once for the run's
end and applies it with ``lifecycle.complete_run``. Where nothing else can happen at a finish
(``decode_run``'s ``through_finishes``), the run goes on past finishes with the requests left
(``_through``). Results are identical to stepping one step at a time
(tests/test_fast_forward.py, tests/test_through_finishes.py).
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from sim.kv.blocks import KVManager
from sim.request import Request, Status, decodes_next
from sim.types import COMPONENTS


@dataclass(slots=True)
class DecodeRun:
    """A run of identical decode steps, as columns."""

    reqs: list
    times: list  # steps + 1 entries: each step's start, then the last step's end
    columns: dict | None  # "total" and each component, one value per step (None: not asked for)
    start_used: int  # KV blocks in use before the run's first allocation
    grown: list  # (step, blocks): a request got one block at that step and every block_size steps after, that many
    block_size: int
    source: str
    steps: int
    freed: list = field(default_factory=list)
    """(step, blocks): blocks returned at the end of that step by requests that finished in it,
    where the run went on past them (``decode_run``'s ``through_finishes``)."""
    grown_blocks: int | None = None  # the blocks in ``grown`` (None: counted when asked)
    sizes: "array | list | None" = None
    """The batch size of each step, where the run went on past finishes and step rows are kept
    (None: ``len(reqs)`` at every step)."""
    gaps: list | None = None
    """Each step's span (the next step's start less its own, as ``times`` gives it), where the
    run's maker computed them already (a flow's leg)."""

    def used_at(self, k: int) -> int:
        """KV blocks in use at the end of step ``k``, as a step row records them: after the
        step's allocations and after the requests that finished in it left (nothing but the run
        allocates or frees during it)."""
        used, bs = self.start_used, self.block_size
        for first, blocks in self.grown:
            c = blocks_before(first, k + 1, bs)
            used += c if c < blocks else blocks
        for step, blocks in self.freed:
            if step <= k:
                used -= blocks
        return used

    @property
    def used(self) -> list[int]:
        """``used_at`` each step, one value per step."""
        k, bs = self.steps, self.block_size
        if k <= 0:
            return []
        new = [0] * k  # blocks allocated at each step (those before step 0 count at step 0), less those freed
        for first, blocks in self.grown:
            for j in range(first, min(first + blocks * bs, k), bs):
                new[j if j > 0 else 0] += 1
        for step, blocks in self.freed:
            if step < k:
                new[step] -= blocks
        return list(accumulate(new, initial=self.start_used))[1:]

    def most_used(self) -> int:
        """A bound on ``used``: what was in use at the run's start and every block it allocated
        (cheap: a run's peak is computed only when it may matter)."""
        grown = self.grown_blocks
        if grown is None:
            grown = sum(blocks for _, blocks in self.grown)
        return self.start_used + grown

    def peak_used(self, used_end: int) -> int:
        """``max(used)`` with the last step's value replaced by ``used_end`` (what the pool held
        when the last step ended). Without frees blocks in use only grow during a run, so the
        peak before the last step is the value at the step before last."""
        if self.steps < 2:
            return used_end
        if self.freed:
            used = self.used
            used[-1] = used_end
            return max(used)
        before = self.used_at(self.steps - 2)
        return before if before > used_end else used_end


_INF = float("inf")


def blocks_before(due: int, end: int, block_size: int) -> int:
    """The KV blocks a decoding request takes in the steps before ``end``: one at step ``due``
    (the step whose token overflows its blocks), then one every ``block_size`` steps (the one
    rule of the fast-forward's counted growth: ``BlockGrower.grow_each``, ``DecodeRun.used_at``;
    the flows' legs inline it in their per-member loop)."""
    return (end - 1 - due) // block_size + 1 if due < end else 0

MAX_GUESS = 4096
"""When a run may end at an arrival, the first go prices as many steps as would fit before the
arrival at a recent step's price (the replica's previous run's last step; without one, the first
step is priced alone and sizes the next go), at most this many; later goes grow fourfold."""


def steady_decode(sched, plan, by_id: dict) -> list[Request] | None:
    """The requests of ``plan`` in plan order when it gives every running request exactly its
    next decode token, nothing else happens in it, every one of them is already running (so
    committing the plan changes nothing) and the policy vouches that it would plan the same
    again; else None."""
    tokens = plan.num_new_tokens
    if (plan.preempted or plan.aborted or plan.swapped_in or plan.blocks_swapped_out or plan.cached_tokens
            or len(tokens) != len(sched.running) or not tokens or tokens[next(reversed(tokens))] != 1
            or not sched.steady()):
        return None  # (a request admitted this step comes last: its prefill chunk is seen first)
    reqs = []
    running = Status.RUNNING
    for rid, n in plan.num_new_tokens.items():
        r = by_id[rid]
        if n != 1 or r.status is not running or not decodes_next(r):
            return None
        reqs.append(r)
    return reqs


def decode_run(reqs: list[Request], kv: KVManager, cost, start: float, arrival: float,
               columns: bool = True, price_hint: float | None = None, through_finishes: bool = False) -> DecodeRun:
    """The steps of a steady decode batch ``reqs`` starting at ``start``, up to the first of (a
    request finishes, a step that would start at or after ``arrival``: the earliest time a
    request can reach this replica, a block the pool cannot give), with per-request work only
    at the ends. Blocks are allocated as the steps need them; request state is left to
    ``lifecycle.complete_run``. ``columns``: also return each step's time breakdown.
    ``price_hint`` (a recent step's seconds) sizes the first go of pricing toward the arrival
    (it changes how many steps are priced at once, never a value).

    ``through_finishes`` (the caller vouches that the policy would go on decoding the rest of
    the batch when some requests finish, and that nothing else happens at a finish): with
    counted blocks (``kv.bulk_growth``), the run goes on past finishes with the requests left,
    whose blocks the finishers give back at the end of their last step (``_through``)."""
    n = len(reqs)
    # one pass over the batch: each request's steps to its last token, its computed tokens, and
    # the step at which it needs its next block (its blocks overflow)
    bs, held = kv.block_size, kv.held
    left, computed, due = [], [], []
    for r in reqs:
        c = r.num_computed
        left.append(r.output_tokens - r.num_generated)
        computed.append(c)
        due.append(held[r.id] * bs - c)
    horizon = min(left)  # the steps until the first finish
    kv_tokens = sum(computed) + n
    longest = max(computed) + 1
    grower = BlockGrower(kv, reqs, due)
    if through_finishes and kv.bulk_growth:  # (a counted free has no side effect)
        run = _through(reqs, kv, cost, grower, left, computed, start, arrival, price_hint, columns)
        if run is not None:
            return run
    times = run_clock(cost, n, kv_tokens, longest, horizon, start, arrival, price_hint)
    if times is None:  # no side-effect-free series: step by step (table lookups count each query)
        if due and min(due) <= 0 and grower.grow_until(1) == 0:  # the first step's blocks are not there
            return grower.run([start], None, cost.source, 0)
        if not columns and hasattr(cost, "decode_total"):
            return _totals_step_by_step(reqs, grower, cost, n, kv_tokens, longest, horizon, start, arrival)
        return _step_by_step(reqs, grower, cost, n, kv_tokens, longest, horizon, start, arrival)
    steps = len(times) - 1
    k_end = grower.grow_until(steps)
    if k_end < steps:
        del times[k_end + 1:]
    if hasattr(cost, "count_decode_run"):  # a model whose decode_totals counts nothing counts the steps kept
        cost.count_decode_run(n, kv_tokens, longest, k_end)
    cols = None
    if columns:
        series = cost.decode_series(n, kv_tokens, longest, k_end)
        cols = {c: column(series[c]) for c in ("total", *COMPONENTS)}
    return grower.run(times, cols, cost.source, k_end)


def _through(reqs: list[Request], kv: KVManager, cost, grower: "BlockGrower", left: list[int], computed: list[int],
             start: float, arrival: float, price_hint: float | None, columns: bool = False) -> DecodeRun | None:
    """``decode_run`` past finishes: the batch is priced finish after finish (the requests left
    as a batch of their own) up to the first step that would start at or after ``arrival`` or
    the last finish; then each request grows the blocks of its steps in the run, and the
    requests that finished before the run's last step give theirs back at the end of their last
    step (as ``Scheduler.finish`` would, which will find them gone). None, with nothing changed,
    when the pool does not hold every block the run needs (one could be refused at some step:
    the run then stops at the first finish and grows step by step) or the cost model has no
    side-effect-free series. ``columns``: also each step's time breakdown and batch size
    (``series_rows``)."""
    n = size = len(reqs)  # the batch's size now, and at the start
    times, k0, hint, priced = [start], 0, price_hint, []
    base, top, nxt = sum(computed), max(computed), min(left)  # computed tokens, the longest, the next finish
    # made at the first finish: (steps left, computed, index) in finish order, and the computed
    # tokens of the requests still in the batch, sorted; j counts the requests that finished
    finishes = contexts = None
    j = 0
    while True:
        kv_k0, longest = base + n * (k0 + 1), top + k0 + 1
        more = run_clock(cost, n, kv_k0, longest, nxt - k0, times[-1], arrival, hint)
        if more is None:
            return None
        kept = len(more) - 1
        priced.append((n, kv_k0, longest, kept))
        times += more[1:]
        if kept < nxt - k0:  # the arrival cut it
            break
        k0 = nxt
        if finishes is None:
            finishes, contexts = sorted(zip(left, computed, range(size))), sorted(computed)
        while j < size and finishes[j][0] == k0:  # the finishers leave the batch
            c = finishes[j][1]
            base -= c
            del contexts[bisect_left(contexts, c)]
            n -= 1
            j += 1
        if not n or times[-1] >= arrival:
            break
        nxt, top = finishes[j][0], contexts[-1]
        hint = times[-1] - times[-2]
    steps = len(times) - 1
    # each request's blocks for its steps in the run, unless the pool could refuse one at some step
    if not grower.grow_each([last if last < steps else steps for last in left]):
        return None
    if hasattr(cost, "count_decode_run"):
        for args in priced:
            cost.count_decode_run(*args)
    freed = grower.freed
    for k, _, i in finishes or ():
        if k >= steps:
            break
        blocks = kv.free(reqs[i].id)
        if freed and freed[-1][0] == k - 1:
            freed[-1] = (k - 1, freed[-1][1] + blocks)
        else:
            freed.append((k - 1, blocks))
    run = grower.run(times, None, cost.source, steps)
    if columns:
        run.columns, run.sizes = series_rows(cost, priced)
    return run


def column(x) -> array:
    """A column of step values as a typed array (``array("d")``, what the step log holds): a
    cost model's series come as lists, arrays (constant components: one value repeated) or
    numpy arrays."""
    if isinstance(x, array):
        return x
    if isinstance(x, list):
        out = array("d")
        out.fromlist(x)
        return out
    return array("d", np.ascontiguousarray(x, dtype=float).tobytes())


def series_rows(cost, priced: list) -> tuple[dict, array]:
    """The columns (``total`` and each component, typed arrays) and the batch size of each step
    of a run priced in parts ((batch, KV tokens, longest, steps) each, as ``run_clock`` was
    asked): what a step row records, step by step."""
    cols = {c: array("d") for c in ("total", *COMPONENTS)}
    sizes = array("i")
    for n, kv_tokens, longest, kept in priced:
        if kept:
            series = cost.decode_series(n, kv_tokens, longest, kept)
            for c, v in cols.items():
                v += column(series[c])
            sizes += array("i", (n,)) * kept
    return cols, sizes


def run_clock(cost, n: int, kv_tokens: int, longest: int, horizon: int, start: float, arrival: float,
              price: float | None = None) -> list | None:
    """Start times of the run's steps up to ``horizon`` or the first step (after the first) that
    would start at or after ``arrival``, then the end of the last: the clock simpy would keep
    (sequential sums). Prices in chunks: a short list first (the steps until the arrival at
    ``price``, else one step whose price sizes the next go), then longer arrays. The first go's
    running sums are the list returned (they begin at ``start``); later goes extend it."""
    if arrival == _INF:
        m = horizon
    elif price and arrival > start:
        m = _steps_until(arrival - start, price)
    else:
        m = 1
    times, t, done = [start], start, 0
    while done < horizon:
        if m > horizon - done:
            m = horizon - done
        tot = cost.decode_totals(n, kv_tokens + done * n, longest + done, m)
        if tot is None:
            return None
        # cum[i]: the start of step done + i (sequential sums); cut: the first step after the
        # run's first that would start at or after the arrival (m: none of these), which ends the run
        if isinstance(tot, list):
            cum = list(accumulate(tot, initial=t))
            cut = bisect_left(cum, arrival, 0 if done else 1, m)
            if cut < m:
                del cum[cut + 1:]
        else:
            cum = np.cumsum(np.concatenate(([t], tot)))  # sequential, like simpy's clock
            lo = 0 if done else 1
            late = np.flatnonzero(cum[lo:m] >= arrival)
            cut = lo + int(late[0]) if late.size else m
            cum = cum[: cut + 1].tolist()
        if done:
            times += cum[1:]
        else:
            times = cum
        if cut < m:
            return times
        t, done = cum[-1], done + m
        if done == 1 and m == 1 and t < arrival < _INF:
            # the first step's price sizes the next go: the steps until the arrival
            m = _steps_until(arrival - t, tot[0])
            continue
        m *= 4
    return times


def _steps_until(gap: float, price: float) -> int:
    """How many steps of ``price`` seconds to price at once to reach ``gap`` seconds ahead (two
    more, as later steps only get slower; at most ``MAX_GUESS``)."""
    if price > 0:
        m = int(gap / price) + 2
        if m < MAX_GUESS:
            return m
    return MAX_GUESS


def _step_by_step(reqs, grower, cost, n, kv_tokens, longest, horizon, start, arrival) -> DecodeRun:
    st = cost.decode_step(n, kv_tokens, longest)
    sts, times, t = [st], [start], start + st.total
    due, price = grower.due, cost.decode_step
    for k in range(1, horizon):
        if t >= arrival or (min(due) == k and grower.grow_until(k + 1) == k):
            break
        times.append(t)
        st = price(n, kv_tokens + k * n, longest + k)
        sts.append(st)
        t += st.total
    times.append(t)
    k_end = len(sts)
    rows = [(x.total, x.gemm, x.attn_prefill, x.attn_decode, x.comm, x.other_gpu, x.cpu, x.swap) for x in sts]
    cols = dict(zip(("total", *COMPONENTS), map(list, zip(*rows))))
    return grower.run(times, cols, sts[0].source, k_end)


def _totals_step_by_step(reqs, grower, cost, n, kv_tokens, longest, horizon, start, arrival) -> DecodeRun:
    """``_step_by_step`` without per-step rows: only each step's total, priced lazily."""
    price, due = cost.decode_total, grower.due
    times, t = [start], start + price(n, kv_tokens, longest)
    for k in range(1, horizon):
        if t >= arrival or (min(due) == k and grower.grow_until(k + 1) == k):
            break
        times.append(t)
        t += price(n, kv_tokens + k * n, longest + k)
    times.append(t)
    return grower.run(times, None, cost.source, len(times) - 1)


class BlockGrower:
    """Allocates the blocks a steady decode batch needs, as the scheduler would step by step
    in running order, and remembers when (``grown``: one entry per request and go, the first
    step it got a block at and how many it got, one every ``block_size`` steps)."""

    __slots__ = ("kv", "reqs", "due", "start_used", "grown", "freed", "blocks")

    def __init__(self, kv: KVManager, reqs: list[Request], due: list[int]):
        self.kv, self.reqs = kv, reqs
        self.due = due  # the step at which request i needs its next block: the step whose token overflows its blocks
        self.start_used = kv.num_used
        self.grown: list[tuple[int, int]] = []
        self.freed: list[tuple[int, int]] = []  # (step, blocks) given back by finishers (``_through``)
        self.blocks = 0  # blocks allocated so far

    def grow_until(self, k_end: int) -> int:
        """Allocate for the steps before ``k_end``; returns the first step the pool cannot give
        (``k_end`` if it can give them all)."""
        due = self.due
        first = min(due)
        if first >= k_end:  # the common short run: no request crosses a block boundary
            return k_end
        kv = self.kv
        bs = kv.block_size
        if kv.bulk_growth and self.grow_each([k_end] * len(due)):
            return k_end
        # block by block in allocation order, as the scheduler would (by step, then running
        # order): the pool may run out at some step, and a prefix cache may evict. Every block
        # needed before k_end as one integer, step << s | request index, so that sorting them
        # gives that order.
        n = len(due)
        s = n.bit_length()
        mask = (1 << s) - 1
        events = [k << s | i for i, k in enumerate(due) if k < k_end]
        if first + bs < k_end:  # some request crosses more than one block boundary
            stride = bs << s
            last = (k_end - bs) << s  # a crossing before this step has another before k_end
            for e in events:  # (the loop also visits the crossings it appends)
                if e < last:
                    events.append(e + stride)
        events.sort()
        events = [(e >> s, e & mask) for e in events]
        j, m, reqs, grown = 0, len(events), self.reqs, self.grown
        while j < m:
            k = events[j][0]
            e = j + 1
            while e < m and events[e][0] == k:
                e += 1
            if not kv.can_allocate(e - j) or kv.evicts_watched(e - j):  # each needs exactly one block
                return k  # (or it would evict a block a refused admission depends on: the loop plans)
            for _, i in events[j:e]:
                r = reqs[i]
                if not kv.grow_one(r.id, r.num_computed + 1 + k):
                    raise RuntimeError(f"KV manager refused a block it said it had (request {r.id})")
                due[i] = k + bs
                grown.append((k, 1))
                self.blocks += 1
            j = e
        return k_end

    def grow_each(self, ends: list[int]) -> bool:
        """Counted blocks (``kv.bulk_growth``): request i gets the blocks of its steps before
        ``ends[i]`` (one every ``block_size`` steps from its due step) at once, when the pool
        holds them all (then no step could be refused, whatever the order); False, and nothing
        changed, when it does not."""
        bs, due = self.kv.block_size, self.due
        pairs, grows, total = [], [], 0  # (request id, blocks); (request index, due step, blocks)
        for i, (r, end, d) in enumerate(zip(self.reqs, ends, due)):
            c = blocks_before(d, end, bs)
            if c:
                pairs.append((r.id, c))
                grows.append((i, d, c))
                total += c
        if not self.kv.can_allocate(total):
            return False
        self.kv.add_blocks(pairs)
        self.blocks += total
        for i, d, c in grows:
            self.grown.append((d, c))
            due[i] = d + c * bs
        return True

    def run(self, times: list, columns: dict | None, source: str, steps: int) -> DecodeRun:
        """The run of ``steps`` steps at ``times``, with the blocks this grower allocated."""
        return DecodeRun(self.reqs, times, columns, self.start_used, self.grown, self.kv.block_size, source, steps,
                         self.freed, self.blocks)


def run_prefix(run: DecodeRun, k: int) -> DecodeRun:
    """The first ``k`` steps of ``run`` (the steps a crash let finish)."""
    cols = None if run.columns is None else {c: v[:k] for c, v in run.columns.items()}
    return DecodeRun(run.reqs, run.times[: k + 1], cols, run.start_used, run.grown, run.block_size, run.source, k,
                     run.freed, run.grown_blocks)
