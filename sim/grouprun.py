"""Decode runs of an expert group's ranks: the group's fast path (docs/design-decisions.md,
"Expert groups: decode runs per rank").

An expert group (``parallelism.dp`` attention ranks, ``Engine._group``) takes every step
together: each rank plans its own batch, the step lasts the slowest rank's own part plus the
group's routed experts and exchange (``sim.cost.expert_parallel.dp_step``), and each rank
completes its batch at the step's end. Most ranks, most steps, only decode: nothing waits, every
running request gets its next token, and the policy vouches that its plan stays put
(``Scheduler.decode_batch``, the promise the replica's decode fast-forward uses). Such a rank does
not plan, commit, price or complete step by step: its ``RankRun`` takes part in the group's steps
with its own part read from a priced series (``decode_totals``), grows its blocks at the step
that needs them, and brings its requests up to date once, when the run ends (``GroupRuns.close``,
with ``lifecycle.complete_run`` and ``StepLog.add_run``, as a replica's decode run does).

A run ends before the first group step that starts with a request waiting at its rank (an
arrival), at or after the policy's ``wake_at`` time, or with a block the pool cannot give (the
rank then plans that step, and ``schedule`` preempts as it would). Where the policy vouches that
the rest of the batch decodes on when some requests finish (``decodes_through_finishes``), a
run goes on past finishes: the requests that finish catch up and leave at the end of their last
step, as they would step by step, and the rest go on as a smaller batch, priced from there;
else the run ends at the end of that step. Everything another part of the engine can read of the rank
stays exact at every step boundary: its waiting and running requests, the blocks in use (grown at
the step that takes them, in running order); only its requests' token counts and times wait for
the run's end, and nothing reads them in between. Each step's time, tokens and rows are the ones
the step-by-step loop gives (tests/test_group_runs.py compares them).

Runs need counted blocks (``kv.bulk_growth``: no prefix cache, whose growth registers and evicts
blocks) and a cost model with a side-effect-free decode series; they are not used with
speculative decoding (each step draws acceptances) or when step plans are recorded.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from sim import lifecycle
from sim.cost.expert_parallel import routed
from sim.fastforward import DecodeRun, blocks_before, series_rows

FIRST_CHUNK = 8
"""Steps of a rank's decode series priced when its batch starts; each later go prices as many
steps as the batch has taken (runs end at the next arrival at that rank: mostly a few steps,
sometimes hundreds)."""

TRIM = 4096
"""The group's clock keeps the start and time of its steps back to the oldest open run's first;
older entries are dropped once this many have piled up."""

DECODES = object()
"""What ``Engine._group`` holds in place of a plan for a rank whose decode run takes the step."""

_INF = float("inf")


class RankRun:
    """One rank's decode run: its batch (in running order), where its pricing and blocks stand,
    and the group step at which it began (``first``). ``k``: the steps it has taken; the batch
    now in it is priced from step ``seg`` on (``segs``: (requests, KV tokens, longest, first
    step) of each batch priced, as ``fastforward.run_clock`` is asked)."""

    __slots__ = ("reqs", "kv", "cost", "first", "k", "wake", "computed", "left", "due", "dues", "next_due",
                 "start_used", "blocks", "n", "base", "top", "horizon", "seg", "segs", "own", "routed", "order",
                 "contexts", "j", "ends", "freed")

    def __init__(self, reqs: list, kv, cost, first: int, wake: float | None):
        bs, held = kv.block_size, kv.held
        self.computed = computed = [r.num_computed for r in reqs]
        self.left = left = [r.output_tokens - r.num_generated for r in reqs]  # its steps to its last token
        self.due = due = [held[r.id] * bs - c for r, c in zip(reqs, computed)]  # the step whose token overflows its blocks
        dues: dict[int, list] = {}  # (request id, 1) of each request that needs a block at a step, by step
        for r, d in zip(reqs, due):
            at = dues.get(d)
            if at is None:
                dues[d] = [(r.id, 1)]
            else:
                at.append((r.id, 1))
        self.reqs, self.kv, self.cost = reqs, kv, cost
        self.first, self.k = first, 0
        self.wake = _INF if wake is None else wake
        self.dues, self.next_due = dues, min(dues)
        self.start_used = kv.num_used
        self.blocks = 0  # blocks taken so far
        self.n, self.base, self.top = len(reqs), sum(computed), max(computed)  # the batch: size, computed tokens, longest
        self.horizon = min(left)  # the step at whose start its first finish has left
        self.seg, self.segs = 0, []
        self.own: list = []  # the rank's own part of each step priced so far (``rank_part``'s value)
        self.routed = 0.0  # the batch's routed experts, which ``rank_part`` takes off its step
        self.order = self.contexts = None  # made at the first finish: (steps left, index) sorted; computed sorted
        self.j = 0  # requests that left
        self.ends: dict[int, int] = {}  # index -> the steps it took part in, of those that left
        self.freed: list = []  # (step, blocks) given back at the end of that step by those that left

    def grow(self) -> bool:
        """Give step ``k``'s tokens their blocks (one each for the requests whose token overflows
        their blocks), as ``schedule`` would at the step's start; False, and nothing changed, when
        the pool cannot give them all (counted blocks: ``kv.bulk_growth``)."""
        k = self.k
        if k < self.next_due:
            return True
        dues, kv = self.dues, self.kv
        at = dues.pop(k)
        m = len(at)
        if not kv.can_allocate(m) or kv.evicts_watched(m):
            dues[k] = at
            return False
        kv.add_blocks(at)
        self.blocks += m
        nxt = k + kv.block_size  # each one's next block
        later = dues.get(nxt)
        if later is None:
            dues[nxt] = at
        else:
            later += at
        self.next_due = min(dues)
        return True

    def price(self) -> None:
        """Price more of the batch's steps (at least step ``k``) from the cost model's decode
        series (``GroupRuns.usable``: it has one)."""
        cm, done, n = self.cost, len(self.own), self.n
        if done == self.seg:  # the batch's first step (its routed experts counted here once)
            self.routed = routed(cm, n)
            self.segs.append((n, self.base + n * (done + 1), self.top + done + 1, done))
        _, kv_tokens, longest, s0 = self.segs[-1]
        d = done - s0
        m = min(max(FIRST_CHUNK, d), self.horizon - done)
        tot = cm.decode_totals(n, kv_tokens + d * n, longest + d, m)
        if not isinstance(tot, list):
            tot = tot.tolist()
        moe = self.routed
        self.own += [t - moe for t in tot]

    def finishing(self) -> list[int] | None:
        """The requests (indices, in batch order) whose last token came at the end of step
        ``k - 1``, when some others go on; None when every request left finishes."""
        if self.order is None:
            self.order = sorted(zip(self.left, range(len(self.left))))
            self.contexts = sorted(self.computed)
        order, j, k = self.order, self.j, self.k
        e = j
        while e < len(order) and order[e][0] == k:
            e += 1
        return None if e == len(order) else [i for _, i in order[j:e]]

    def drop(self, gone: list[int], blocks: int) -> None:
        """Requests ``gone`` (indices) left at the end of step ``k - 1`` with ``blocks`` blocks:
        the batch goes on without them, priced again from step ``k``."""
        k, bs, reqs = self.k, self.kv.block_size, self.reqs
        dues, contexts = self.dues, self.contexts
        for i in gone:
            c = self.computed[i]
            self.base -= c
            del contexts[bisect_left(contexts, c)]
            self.ends[i] = k
            d = self.due[i]
            at = d if d >= k else d + bs * -((d - k) // bs)  # its next block's step
            pending = dues[at]
            pending.remove((reqs[i].id, 1))
            if not pending:
                del dues[at]
        self.n -= len(gone)
        self.j += len(gone)
        self.top = contexts[-1]
        self.horizon = self.order[self.j][0]
        self.seg = k
        del self.own[k:]
        self.next_due = min(dues) if dues else _INF
        self.freed.append((k - 1, blocks))

    def decode_run(self, times: list, columns: dict | None, sizes: list | None, gaps: list) -> DecodeRun:
        """The run's ``k`` steps as a replica's decode run (``times``: each step's start, then the
        last one's end), for the step log: the blocks each request took (one at its due step,
        then one every ``block_size`` steps, to its last: ``blocks_before``) and those the
        finished gave back."""
        k, bs, ends, due = self.k, self.kv.block_size, self.ends, self.due
        stayed = Counter(due)  # (requests that share a due step take the same blocks: one entry each)
        for i in ends:
            stayed[due[i]] -= 1
        grown = []
        for i, e in ends.items():  # those that left, to their last step
            c = blocks_before(due[i], e, bs)
            if c:
                grown.append((due[i], c))
        for d, q in stayed.items():
            c = blocks_before(d, k, bs)
            if c and q:
                grown += [(d, c)] * q
        run = DecodeRun(self.reqs, times, columns, self.start_used, grown, bs, self.cost.source, k, self.freed,
                        self.blocks, sizes)
        run.gaps = gaps
        return run


class _Left:
    """A request that finished inside a run, as it stood when the run began: the run's end reads
    it (``lifecycle.complete_run``) to count the gaps of the steps it took part in with the
    others', as single steps group them."""

    __slots__ = ("output_tokens", "num_generated", "num_computed", "last_token_s", "max_itl_s", "status", "finish_s")

    def __init__(self, r):
        self.output_tokens, self.num_generated, self.num_computed = r.output_tokens, r.num_generated, r.num_computed
        self.last_token_s, self.max_itl_s, self.status, self.finish_s = r.last_token_s, r.max_itl_s, r.status, None


class GroupRuns:
    """The decode runs of one expert group's ranks (None where a rank steps by plan) and the
    group's clock: each step's start and seconds since ``base``, which a run reads when it
    ends."""

    def __init__(self, ranks: list):
        self.ranks = ranks
        self.runs: list[RankRun | None] = [None] * len(ranks)
        self.starts: list[float] = []
        self.totals: list[float] = []
        self.base = 0  # the group step of starts[0]
        self.stepped = 0  # group steps so far

    @staticmethod
    def usable(cost) -> bool:
        """Whether ``cost`` prices decode steps as a series without side effects (else an expert
        group steps by plan only)."""
        return cost.decode_totals(1, 1, 1, 1) is not None

    def takes(self, i: int, now: float) -> bool:
        """Whether rank ``i``'s decode run takes the step starting at ``now`` (one goes on, or
        starts now); False: the rank plans it (any run it had is brought up to date first)."""
        rep = self.ranks[i]
        run, sched = self.runs[i], rep.scheduler
        if run is not None:
            if not sched.waiting and now < run.wake and run.grow():
                if run.k == len(run.own):
                    run.price()
                return True
            self.close(i, now)
            if sched.waiting:
                return False
        if not sched.running or sched.waiting or not rep.kv.bulk_growth or rep.role == "prefill":
            return False
        reqs = sched.decode_batch()
        if reqs is None:
            return False
        run = RankRun(reqs, rep.kv, rep.cost, self.stepped, sched.wake_at(now))
        if not run.grow():
            return False
        run.price()
        self.runs[i] = run
        return True

    def own(self, i: int) -> tuple[float, int]:
        """Rank ``i``'s own part of this step and its tokens (its run takes the step)."""
        run = self.runs[i]
        return run.own[run.k], run.n

    def step(self, now: float, total: float) -> None:
        """The group's step starting at ``now`` lasts ``total`` seconds."""
        self.starts.append(now)
        self.totals.append(total)
        self.stepped += 1

    def done(self, i: int, end: float) -> None:
        """Rank ``i``'s run took the step that ended at ``end``. Requests that finished in it
        leave: the run goes on without them where the policy vouches for it, else it ends."""
        run = self.runs[i]
        run.k += 1
        if run.k < run.horizon:
            return
        rep = self.ranks[i]
        gone = run.finishing() if rep.scheduler.decodes_through_finishes() else None
        if gone is None:
            return self.close(i, end)
        reqs = run.reqs
        out = [reqs[x] for x in gone]
        held = rep.kv.held
        blocks = sum(held[r.id] for r in out)
        run.drop(gone, blocks)
        for x in gone:
            reqs[x] = _Left(reqs[x])
        lifecycle.complete_run(out, self._times(run, end), run.k, None)  # (their gaps: with the run's, at its end)
        for r in out:
            rep.leave(r)

    def _times(self, run: RankRun, end: float) -> list[float]:
        """The start of each step ``run`` took, then ``end``, the end of the last."""
        j = run.first - self.base
        times = self.starts[j:j + run.k]
        times.append(end)
        return times

    def close(self, i: int, end: float) -> None:
        """End rank ``i``'s run at ``end`` (the end of its last step): its requests catch up, the
        ones that finished leave, its step rows are written and the pricing counted."""
        run, rep = self.runs[i], self.ranks[i]
        self.runs[i] = None
        k, cm = run.k, run.cost
        times = self._times(run, end)
        for r in lifecycle.complete_run(run.reqs, times, k, rep.itl):
            if r.__class__ is not _Left:  # (those left at their own finish)
                rep.leave(r)
        priced = [(n, kv_tokens, longest, (nxt[3] if nxt is not None else k) - s0)
                  for (n, kv_tokens, longest, s0), nxt in zip(run.segs, run.segs[1:] + [None])]
        count = getattr(cm, "count_decode_run", None)
        for n, kv_tokens, longest, kept in priced:
            if count is not None:  # what step_time counted at each step
                count(n, kv_tokens, longest, kept)
            for _ in range(kept - 1):  # what rank_part's routed experts counted at each step (once in ``price``)
                cm.moe(n)
        j = run.first - self.base
        totals = self.totals[j:j + k]
        cols = sizes = None
        if rep.steps.keep_rows:
            series, sizes = series_rows(cm, priced)
            cols = rows(series, totals)
        rep.steps.add_run(rep.idx, run.decode_run(times, cols, sizes, totals), 0, len(rep.scheduler.waiting),
                          rep.kv.num_used)
        self._trim()

    def _trim(self) -> None:
        """Drop the clock's entries that no open run reads."""
        if len(self.starts) < TRIM:
            return
        keep = min((r.first for r in self.runs if r is not None), default=self.stepped)
        cut = keep - self.base
        if cut >= TRIM // 2:
            del self.starts[:cut], self.totals[:cut]
            self.base = keep


def rows(cols: dict, totals: list[float]) -> dict:
    """A rank's step rows in a group run (``cols``: its own steps' columns): each step's group
    seconds, its own components, and the group's routed experts, exchange and wait for the
    slowest rank booked as gemm (as ``Engine._group`` books a step)."""
    own = cols["total"]
    cols["gemm"] = [g + (t - o) for g, t, o in zip(cols["gemm"], totals, own)]
    cols["total"] = totals
    return cols
