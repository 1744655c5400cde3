"""Decode runs that admit arrivals (``flow``): a replica's decode steps and the steps that
admit new requests beside them, run with the batch's progress held in columns
(docs/design-decisions.md, "Decode runs that admit arrivals").

A replica that runs ahead already runs its decode steps between arrivals as one run that goes
on past finishes (``fastforward.decode_run``). Each arrival then cost a round
through the engine's loop: every request of the run brought up to date, a plan that walks the
running requests, a step with the new prompt, and a new run whose setup reads every request
again. Here the batch is held as columns instead, across arrivals:

- each request of the batch is a ``_Member``: the step it joined, its computed tokens as a
  function of the step, the step before which it leaves and the step at which it next needs a
  KV block; the batch's sums (computed tokens, the longest context) price the decode steps, as
  in ``fastforward._through``;
- a request's own state is brought up to date once, when it leaves
  (``lifecycle.complete_decodes``), or when the flow ends;
- at an arrival the policy plans only the admission (``Scheduler.plan_beside_decodes``: the plan
  ``schedule`` would make, given that every running request decodes, without reading their
  progress); a plan that admits whole prompts and leaves nothing waiting is run here as a mixed
  step, priced from the batch's sums (``RooflineCostModel.beside_decodes``; from its
  ``BatchShape`` for a model that prices otherwise), and its new requests join the batch; any
  other plan ends the flow and the engine runs it as a step (``Engine._step``).

The flow ends (each request brought up to date, the loop planning again) when a plan is not of
that kind, when the pool cannot give the blocks of the next steps (the loop's run grows them
block by block and the policy preempts), when the cost model has no series, after
``FLOW_STEPS`` steps (bounded memory), or when the batch empties. Results are identical to the
loop's (tests/test_flow.py, and the fast-forward equivalence tests against single steps); the
ITL gaps, request departures and step log entries come in the order the loop gave them (the
mixed step's and each run's after the wait at its end), so even a streamed run's ITL sketch
sums the same values in the same order.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush
from operator import sub

from sim import lifecycle
from sim.fastforward import DecodeRun, run_clock, series_rows
from sim.request import Status, decodes_next
from sim.types import BatchShape, StepPlan

FLOW_STEPS = 4096
"""Steps after which a flow ends (its requests brought up to date) and a new one may start: the
step times it keeps are bounded."""

_RUNNING = Status.RUNNING
_MIXED, _LEG = "mixed", "leg"  # the kinds of record ``flow``'s ``flush`` completes


class _Member:
    """A request in the flow's batch: its computed tokens at the start of step k are ``o + k``;
    its state is as of the start of step ``s`` (the steps from ``s`` on are applied when it
    leaves or the flow ends), the first of the flow's segment ``si`` (a mixed step, or a leg of
    decode steps); its last token is step ``e - 1``'s; it next needs a KV block at step
    ``due``."""

    __slots__ = ("r", "rid", "o", "s", "si", "e", "due")

    def __init__(self, r, o: int, s: int, si: int, e: int, due: int):
        self.r, self.rid, self.o, self.s, self.si, self.e, self.due = r, r.id, o, s, si, e, due


def enters(sched, plan, by_id: dict, now: float) -> bool:
    """Whether ``plan`` (made at ``now``) may start a flow: the KV blocks are counted
    (``kv.bulk_growth``), the policy plans admissions beside decodes
    (``Scheduler.admits_beside_decodes``), the plan gives every running request its next
    decode token (its last token came at ``now``) and admits at least one fresh request with
    its whole prompt, and nothing else: no preemption, swap, prefix hit or abort, and nothing
    left waiting."""
    tokens = plan.num_new_tokens
    if not _nothing_else(plan, sched) or len(tokens) != len(sched.running):
        return False
    if not (sched.kv.bulk_growth and sched.admits_beside_decodes()):  # (counted blocks: growth is arithmetic)
        return False
    new = 0
    for rid, n in tokens.items():
        r = by_id[rid]
        if r.status is _RUNNING:
            if n != 1 or not decodes_next(r) or r.last_token_s != now:
                return False
        elif not _whole(r, n):
            return False
        else:
            new += 1
    return new > 0


class Flow:
    """One flow on a replica: its batch (``members``, by request id), the order they leave in
    (``leaves``, a heap of (e, seq, member)), their ``o`` sorted (``offsets``: the longest
    context) and summed (``base``), each step's start and the end of the last one run
    (``times``), and the largest gap of each segment (``seg_max``: a mixed step or a leg of
    decode steps, in step order). ``run`` drives it; the other methods are its parts. It reads
    only the replica's side of the engine (``Replica``: its scheduler, pool, cost model, logs,
    ``next_arrival``, ``must_wait``, ``step``, ``drop``, ``leave``)."""

    __slots__ = ("rep", "sched", "kv", "cost", "by_id", "itl", "members", "leaves", "offsets", "times", "seg_max",
                 "base", "seq", "aggregates", "counting", "rows")

    def __init__(self, rep, start: float):
        self.rep, self.sched, self.kv, self.cost = rep, rep.scheduler, rep.kv, rep.cost
        self.by_id, self.itl = rep.by_id, rep.itl
        self.members: dict[int, _Member] = {}
        self.leaves: list = []
        self.offsets: list[int] = []
        self.times = [start]
        self.seg_max: list[float] = []
        self.base = self.seq = 0
        self.aggregates = hasattr(self.cost, "beside_decodes")
        self.counting = hasattr(self.cost, "count_decode_run")  # (a model that counts the steps a run keeps)
        self.rows = rep.steps.keep_rows  # step rows: each leg's columns and batch sizes too

    def join(self, r, o: int, s: int, e: int) -> None:
        """``r`` joins the batch: ``o`` its computed tokens less the step, from step ``s`` (the
        next segment's first) to its last token, step ``e - 1``'s."""
        m = _Member(r, o, s, len(self.seg_max), e, self.kv.held[r.id] * self.kv.block_size - o)
        self.members[m.rid] = m
        heappush(self.leaves, (e, self.seq, m))
        self.seq += 1
        insort(self.offsets, o)
        self.base += o

    def leave(self, m: _Member) -> None:
        del self.members[m.rid]
        del self.offsets[bisect_left(self.offsets, m.o)]
        self.base -= m.o

    def settle(self, m: _Member, k: int, upto: int, partial: float = 0.0) -> None:
        """Apply ``m``'s steps from ``m.s`` up to step ``k`` (its state at step k's start): its
        largest gap is that of its segments before ``upto`` and ``partial`` (that of its steps in
        the segment it leaves in, when it does not end with it)."""
        if k > m.s:
            si = m.si
            gap = max(self.seg_max[si:upto]) if si < upto else partial
            lifecycle.complete_decodes(m.r, k - m.s, self.times[k], gap if gap > partial else partial)

    def mixed(self, k: int, p) -> tuple:
        """Step ``k``: the members decode and ``p``'s new requests (``plan_beside_decodes``'
        admissions) get their whole prompts; priced and committed now, completed at the next
        ``flush`` (after the wait at its end)."""
        times, members, leaves, by_id = self.times, self.members, self.leaves, self.by_id
        t = times[k]
        new = p.num_new_tokens
        n_old = len(members)
        chunks = [(q, 0) for q in new.values()]
        st = self.cost.beside_decodes(n_old, self.base + n_old * (k + 1),
                                      self.offsets[-1] + k + 1 if n_old else 0, chunks) if self.aggregates else None
        if st is None:  # the shape, in the order ``schedule`` gives it
            full = self.sched.with_decodes(StepPlan(dict(new)))
            tokens = full.num_new_tokens
            ctx = tuple(members[rid].o + k if rid in members else 0 for rid in tokens)
            st = self.cost.step_time(BatchShape(tuple(tokens.values()), ctx, 0, 0, self.rep.tp, self.rep.pp))
        end = t + st.total
        times.append(end)
        self.seg_max.append(end - t)  # (join below: the new requests' first segment is the next one)
        lifecycle.commit(p, by_id, t)
        gone = []
        while leaves and leaves[0][0] <= k + 1:  # members whose last token is this step's
            m = heappop(leaves)[2]
            self.leave(m)
            gone.append(m)
        for rid in new:
            r = by_id[rid]
            if r.output_tokens > 1:  # (one token: it finishes with its prompt)
                self.join(r, r.prompt_tokens - (k + 1), k + 1, k + r.output_tokens)
        return (_MIXED, k, st, p, n_old, n_old + len(new), gone, len(self.seg_max))

    def flush(self, rec) -> None:
        """What the loop does after the wait at the end of a step or run: ITL gaps, departures,
        the step log."""
        rep, itl, times = self.rep, self.itl, self.times
        if rec[0] is _MIXED:
            _, k, st, fresh, n_old, batch, gone, upto = rec
            t, end = times[k], times[k + 1]
            prefill, _, changed = lifecycle.complete_step(fresh, self.by_id, t, end, itl)
            if n_old and itl is not None:
                itl.add(end - t, n_old)
            for m in gone:
                self.settle(m, m.e, upto)
                rep.leave(m.r)
            for r in changed:
                if r.finish_s is not None:
                    rep.leave(r)
            rep.steps.add(rep.idx, t, st, batch, prefill, n_old, 0, self.kv.num_used, len(self.sched.waiting))
            return
        _, k0, k1, n0, gone, run, gaps, upto = rec
        if itl is not None:  # the leg's gaps, each for the members that took part in its step
            itl.extend_parts(gaps, 0, n0, [m.e - k0 for m in gone if m.e < k1] if gone else ())
        for m in gone:
            self.settle(m, m.e, upto, max(gaps[:m.e - k0]))
            rep.leave(m.r)
        rep.steps.add_run(rep.idx, run, 0, len(self.sched.waiting), self.kv.num_used)  # (a leg starts with none waiting)

    def decode_leg(self, k0: int, arrival: float):
        """The decode steps from ``k0`` on, through finishes, up to the first step that would
        start at or after ``arrival`` or the batch's end: priced, their blocks grown (None when the
        pool may not hold them or the cost model has no series: the flow then ends, its members
        as they were at ``k0`` but for the step of their next block, which it no longer reads)."""
        members, leaves, offsets, kv, cost, times = (self.members, self.leaves, self.offsets, self.kv, self.cost,
                                                     self.times)
        rep = self.rep
        left, n, k, hint = self.base, len(members), k0, rep.step_s
        priced, gone, popped = [], [], []
        t = times[k0]  # (the last entry: the leg's step times are appended as priced, taken back if it is dropped)
        while True:
            nxt = leaves[0][0]
            kv_tokens, longest = left + n * (k + 1), offsets[-1] + k + 1
            more = run_clock(cost, n, kv_tokens, longest, nxt - k, t, arrival, hint)
            if more is None:
                del times[k0 + 1:]
                return self.undo(popped)
            kept = len(more) - 1
            if self.counting or self.rows:
                priced.append((n, kv_tokens, longest, kept))
            times += more[1:]
            t = more[-1]
            if kept < nxt - k:  # the arrival cut it
                k += kept
                break
            k = nxt
            while leaves and leaves[0][0] == k:  # (taken off now; put back if the leg is dropped)
                entry = heappop(leaves)
                popped.append(entry)
                m = entry[2]
                gone.append(m)
                left -= m.o
                del offsets[bisect_left(offsets, m.o)]
                n -= 1
            if not n or t >= arrival:
                break
            hint = more[-1] - more[-2]
        # each member's blocks for its steps in the leg, when the pool holds them all (its next
        # block's step is moved past them at once: a refused leg ends the flow, which reads it no more)
        bs, held = kv.block_size, kv.held
        grown, pairs, total, due = [], [], 0, []  # due: the members that need a block at step k (the leg's end)
        for m in members.values():
            e = m.e
            d = m.due
            end = e if e < k else k
            if d < end:  # fastforward.blocks_before(d, end, bs), inlined: the flows' hottest loop
                c = (end - 1 - d) // bs + 1
                grown.append((d - k0, c))
                pairs.append((m.rid, c))
                total += c
                d += c * bs
                m.due = d
            if d == k and e > k:
                due.append(m)
        if not kv.can_allocate(total):
            del times[k0 + 1:]
            return self.undo(popped)
        start_used = kv.num_used
        kv.add_blocks(pairs)
        if self.counting:
            count = cost.count_decode_run
            for args in priced:
                count(*args)
        freed = []
        for m in gone:
            freed.append((m.e - 1 - k0, held[m.rid]))
            del members[m.rid]
        n0 = n + len(gone)
        self.base = left
        rep.step_s = t - times[-2]
        gaps = list(map(sub, times[k0 + 1:], times[k0:k]))  # each step's
        self.seg_max.append(max(gaps))
        run = DecodeRun(None, times[k0:k + 1] if self.rows else None, None, start_used, grown, bs, cost.source, k - k0,
                        freed, total)  # (its times: what a step row records)
        run.gaps = gaps
        if self.rows:
            run.columns, run.sizes = series_rows(cost, priced)
        return k, (_LEG, k0, k, n0, gone, run, gaps, len(self.seg_max) - 1), due

    def undo(self, popped: list) -> None:
        """Put back the members a dropped leg took off (its answer: None)."""
        for entry in popped:
            heappush(self.leaves, entry)
            insort(self.offsets, entry[2].o)
        return None

    def materialize(self, k: int) -> None:
        """Bring every member up to date at the start of step ``k``: the flow ends there."""
        upto = len(self.seg_max)
        for m in list(self.members.values()):
            self.settle(m, k, upto)

    def run(self, plan):
        """Run ``plan`` (``enters`` holds) as the flow's first step, then its decode steps and
        the admissions beside them (a generator the engine's loop yields from; it returns the
        time the loop goes on at)."""
        rep, sched, kv, by_id, members, times = self.rep, self.sched, self.kv, self.by_id, self.members, self.times
        fresh = StepPlan()
        for rid, n in plan.num_new_tokens.items():  # the running requests decode in the first step
            r = by_id[rid]
            if r.status is _RUNNING:
                self.join(r, r.num_computed, 0, r.output_tokens - r.num_generated)
            else:
                fresh.num_new_tokens[rid] = n
        rec = self.mixed(0, fresh)
        due_now = None  # the members that need a block at step k, when the last leg found them
        k = 1
        while True:
            t = times[k]
            arrival = rep.next_arrival()
            if rep.must_wait(t, arrival):
                yield t
                arrival = rep.next_arrival()  # (the arrivals up to t reached the scheduler)
            self.flush(rec)
            rec = None
            if len(members) > sched.budget():  # (the policy gives some of them no token)
                self.materialize(k)
                return t
            if sched.waiting:  # admission beside the members' decodes
                due = [m for m in members.values() if m.due == k] if due_now is None else due_now
                if due:
                    if not kv.can_allocate(len(due)):
                        self.materialize(k)
                        return t
                    kv.add_blocks([(m.rid, 1) for m in due])
                    for m in due:
                        m.due += kv.block_size
                p = sched.plan_beside_decodes(t)
                due_now = None
                if _admits_whole(p, sched, by_id):
                    rec = self.mixed(k, p)
                    k += 1
                    continue
                self.materialize(k)
                full = sched.with_decodes(p)
                if full.empty:  # no member left and nothing admitted (held, or aborted): no step runs;
                    rep.drop(full, t)  # its aborts applied, the loop plans again (as it would have)
                    return t
                return (yield from rep.step(full, t))
            if not members:
                return t
            if k >= FLOW_STEPS:
                self.materialize(k)
                return t
            wake = sched.wake_at(t)  # the policy's own time ends the leg as an arrival does
            leg = self.decode_leg(k, arrival if wake is None or wake >= arrival else wake)
            if leg is None:
                self.materialize(k)
                return t
            k, rec, due_now = leg


def _admits_whole(p, sched, by_id: dict) -> bool:
    """Whether ``p`` (``plan_beside_decodes``') admits fresh requests with their whole prompts
    and nothing else, leaving nothing waiting."""
    if not p.num_new_tokens or not _nothing_else(p, sched):
        return False
    for rid, n in p.num_new_tokens.items():
        if not _whole(by_id[rid], n):
            return False
    return True


def _nothing_else(p, sched) -> bool:
    """No preemption, swap, prefix hit or abort in plan ``p``, and nothing left waiting."""
    return not (sched.waiting or p.preempted or p.aborted or p.swapped_in or p.blocks_swapped_out or p.cached_tokens)


def _whole(r, n: int) -> bool:
    """Whether ``n`` tokens are fresh request ``r``'s whole prompt."""
    return n == r.prompt_tokens and not r.num_computed and not r.num_generated
