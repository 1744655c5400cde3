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
rank then plans that step, and ``schedule`` preempts as it would), and at the end of the step in
which one of its requests finishes. Everything another part of the engine can read of the rank
stays exact at every step boundary: its waiting and running requests, the blocks in use (grown at
the step that takes them, in running order); only its requests' token counts and times wait for
the run's end, and nothing reads them in between. Each step's time, tokens and rows are the ones
the step-by-step loop gives (tests/test_group_runs.py compares them).

Runs need counted blocks (``kv.bulk_growth``: no prefix cache, whose growth registers and evicts
blocks) and a cost model with a side-effect-free decode series; they are not used with
speculative decoding (each step draws acceptances) or when step plans are recorded.
"""
from __future__ import annotations

from sim import lifecycle
from sim.fastforward import DecodeRun, blocks_before
from sim.types import COMPONENTS

FIRST_CHUNK = 16
"""Steps of a rank's decode series priced when its run starts; each later go prices as many
steps as the run has taken (runs end at the next arrival or finish at that rank: mostly a few
steps, sometimes hundreds)."""

TRIM = 4096
"""The group's clock keeps the start and time of its steps back to the oldest open run's first;
older entries are dropped once this many have piled up."""

DECODES = object()
"""What ``Engine._group`` holds in place of a plan for a rank whose decode run takes the step."""


class RankRun:
    """One rank's decode run: its batch (in running order), where its pricing and blocks stand,
    and the group step at which it began (``first``). ``k``: the steps it has taken."""

    __slots__ = ("reqs", "n", "kv", "kv_tokens", "longest", "horizon", "first", "k", "wake", "due", "dues",
                 "next_due", "start_used", "blocks", "own", "routed", "cost")

    def __init__(self, reqs: list, kv, cost, first: int, wake: float | None):
        bs, held = kv.block_size, kv.held
        left, computed, due = [], [], []
        for r in reqs:
            c = r.num_computed
            left.append(r.output_tokens - r.num_generated)
            computed.append(c)
            due.append(held[r.id] * bs - c)  # the step whose token overflows its blocks
        self.reqs, self.n, self.kv, self.cost = reqs, len(reqs), kv, cost
        self.kv_tokens = sum(computed) + self.n  # as ``fastforward.decode_run`` prices a run
        self.longest = max(computed) + 1
        self.horizon = min(left)  # the run ends at the end of its first finish's step
        self.first, self.k = first, 0
        self.wake = float("inf") if wake is None else wake
        self.due = due
        self.dues: dict[int, list[int]] = {}  # the requests (indices) that need a block at each step
        for i, d in enumerate(due):
            at = self.dues.get(d)
            if at is None:
                self.dues[d] = [i]
            else:
                at.append(i)
        self.next_due = min(self.dues)
        self.start_used = kv.num_used
        self.blocks = 0  # blocks taken so far
        self.own: list = []  # the rank's own part of each step priced so far (``rank_part``'s value)
        self.routed = 0.0  # its own tokens' routed experts, which ``rank_part`` takes off its step

    def grow(self) -> bool:
        """Give step ``k``'s tokens their blocks (one each for the requests whose token overflows
        their blocks), as ``schedule`` would at the step's start; False, and nothing changed, when
        the pool cannot give them all (counted blocks: ``kv.bulk_growth``)."""
        k = self.k
        if k < self.next_due:
            return True
        dues, kv = self.dues, self.kv
        at = dues[k]
        m = len(at)
        if not kv.can_allocate(m) or kv.evicts_watched(m):
            return False
        reqs = self.reqs
        kv.add_blocks([(reqs[i].id, 1) for i in at])
        self.blocks += m
        del dues[k]
        nxt = k + kv.block_size  # each one's next block
        later = dues.get(nxt)
        if later is None:
            dues[nxt] = at
        else:
            later += at
        self.next_due = min(dues)
        return True

    def decode_run(self, times: list, columns: dict | None, gaps: list) -> DecodeRun:
        """The run's ``k`` steps as a replica's decode run (``times``: each step's start, then the
        last one's end), for the step log: the blocks each request took (one at its due step,
        then one every ``block_size`` steps: ``blocks_before``)."""
        k, bs = self.k, self.kv.block_size
        grown = [(d, c) for d in self.due if (c := blocks_before(d, k, bs))]
        run = DecodeRun(self.reqs, times, columns, self.start_used, grown, bs, self.cost.source, k, [], self.blocks)
        run.gaps = gaps
        return run

    def price(self) -> None:
        """Price more of the run's steps (at least step ``k``) from the cost model's decode
        series (``GroupRuns.usable``: it has one)."""
        from sim.cost.expert_parallel import routed

        cm, done, n = self.cost, len(self.own), self.n
        if not done:  # (counted once here, and for the other steps when the run ends)
            self.routed = routed(cm, n)
        m = min(max(FIRST_CHUNK, done), self.horizon - done)
        tot = cm.decode_totals(n, self.kv_tokens + done * n, self.longest + done, m)
        if not isinstance(tot, list):
            tot = tot.tolist()
        moe = self.routed
        self.own += [t - moe for t in tot]


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
        """Rank ``i``'s run took the step that ended at ``end``: the run ends there if one of its
        requests finished."""
        run = self.runs[i]
        run.k += 1
        if run.k == run.horizon:
            self.close(i, end)

    def close(self, i: int, end: float) -> None:
        """End rank ``i``'s run at ``end`` (the end of its last step): its requests catch up, the
        ones that finished leave, its step rows are written and the pricing counted."""
        run, rep = self.runs[i], self.ranks[i]
        self.runs[i] = None
        k, n, cm = run.k, run.n, run.cost
        j = run.first - self.base
        times = self.starts[j:j + k]
        times.append(end)
        totals = self.totals[j:j + k]
        for r in lifecycle.complete_run(run.reqs, times, k, rep.itl):
            rep.leave(r)
        if hasattr(cm, "count_decode_run"):  # what step_time counted at each step
            cm.count_decode_run(n, run.kv_tokens, run.longest, k)
        for _ in range(k - 1):  # what rank_part's routed experts counted at each step (once in ``price``)
            cm.moe(n)
        cols = None
        if rep.steps.keep_rows:
            cols = rows(cm.decode_series(n, run.kv_tokens, run.longest, k), totals)
        rep.steps.add_run(rep.idx, run.decode_run(times, cols, totals), 0, len(rep.scheduler.waiting),
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


def rows(series: dict, totals: list[float]) -> dict:
    """A rank's step rows in a group run: each step's group seconds, its own components, and the
    group's routed experts, exchange and wait for the slowest rank booked as gemm (as
    ``Engine._group`` books a step)."""
    cols = {c: (v if isinstance(v, list) else v.tolist()) for c, v in ((c, series[c]) for c in ("total", *COMPONENTS))}
    own = cols["total"]
    cols["gemm"] = [g + (t - o) for g, t, o in zip(cols["gemm"], totals, own)]
    cols["total"] = totals
    return cols
