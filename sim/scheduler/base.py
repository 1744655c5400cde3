"""What every scheduling policy provides, and the one-line registry.

A policy is one small file: a ``Knobs`` model (its config keys, validated with their path) and a
class with ``schedule(now) -> StepPlan``. It owns its queues, may call the KV manager, and never
changes request state: the engine applies the plan (docs/architecture.md sections 2-3). Register with
``@register("name")``.
"""
from __future__ import annotations

import bisect
from collections import deque
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim.kv.blocks import KVManager
from sim.request import Request, decodes_next
from sim.types import StepPlan

REGISTRY: dict[str, type["Scheduler"]] = {}


DECISION_HOOKS = ("schedule", "schedule_running", "schedule_waiting", "budget", "running_order", "queue_key",
                  "victim", "chunk", "admissible", "reserve", "release", "overlapped", "add", "requeue",
                  "form_batch", "wake_at")
"""The methods a policy decides with: a class that defines one of them in its own body says in
that body what the fast paths may assume of it (``register`` checks)."""
PROMISES = ("steady", "decode_batch", "decodes_through_finishes", "admits_beside_decodes", "plan_beside_decodes")
"""What a policy vouches for to the fast paths (``Scheduler``'s defaults promise nothing)."""


def fast_path_refusal(cls) -> str | None:
    """Why ``cls`` may not be registered as it is (None when it may): a class that overrides a
    decision hook must state in its own body what the fast paths may assume, rather than
    inherit promises made for other hooks (docs/policies.md, "Fast paths"):

    - a ``BudgetScheduler`` subclass states ``queue_static`` (and ``chunk_keeps_single_tokens``
      when it overrides ``chunk``);
    - any other policy restates each promise (``steady``, ``decode_batch``, ...) it would
      inherit from a class other than ``Scheduler``, whose defaults promise nothing."""
    own = [h for h in DECISION_HOOKS if h in cls.__dict__]
    if not own:
        return None
    hooks = ", ".join(own)
    if issubclass(cls, BudgetScheduler):
        if "queue_static" not in cls.__dict__:
            return (f"{cls.__name__} overrides {hooks} but does not say whether the fast paths may assume its "
                    f"decisions stay put during a run of decode steps: set `queue_static = False` in "
                    f"{cls.__name__} if its queue order, admission test, running order or budget reads the time or "
                    "the running requests' progress (the safe choice: decode runs then stop while requests wait), "
                    "or `queue_static = True` if none can change until a request arrives or finishes, a block "
                    "runs out or its `wake_at` time comes (docs/policies.md, 'Fast paths')")
        if "chunk" in cls.__dict__ and "chunk_keeps_single_tokens" not in cls.__dict__:
            return (f"{cls.__name__} overrides chunk but does not say whether `chunk(r, 1, budget)` is always 1: "
                    f"set `chunk_keeps_single_tokens` in {cls.__name__} (False is the safe choice; "
                    "docs/policies.md, 'Fast paths')")
        return None
    inherited = [p for p in PROMISES if p not in cls.__dict__ and getattr(cls, p) is not getattr(Scheduler, p)]
    if inherited:
        return (f"{cls.__name__} overrides {hooks} but inherits the fast-path promises {', '.join(inherited)} made "
                f"for its parent's decisions: restate each in {cls.__name__} (returning None / False promises "
                "nothing; docs/policies.md, 'Fast paths')")
    return None


def register(name: str):
    """Class decorator: make a policy selectable as ``scheduler.name: <name>``. Refuses a class
    that overrides a decision hook without stating what the fast paths may assume of it
    (``fast_path_refusal``): a ``TypeError`` naming the fix, when the module is imported."""

    def deco(cls):
        why = fast_path_refusal(cls)
        if why:
            raise TypeError(f"cannot register scheduler {name!r}: {why}")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


class Knobs(BaseModel):
    """Knobs every batching policy has (vLLM names and defaults where they exist)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    max_num_seqs: int = Field(default=256, ge=1, le=1_000_000, description="most sequences in one step")
    max_num_batched_tokens: int = Field(default=8192, ge=1, le=10_000_000, description="most new tokens in one step")

    @property
    def max_step_tokens(self) -> int:
        """Most tokens one step computes (what the memory plan sizes the activation peak from,
        as vLLM's profile run uses ``max_num_batched_tokens``); a policy with another budget
        overrides it."""
        return self.max_num_batched_tokens


class Scheduler:
    """Base class: FCFS queues and the shared bookkeeping; subclasses implement ``schedule``."""

    name: ClassVar[str] = "base"
    Knobs: ClassVar[type[Knobs]] = Knobs
    uses_prefix_hits: ClassVar[bool] = False
    """True when admission skips prefix-cache hits (with ``kv.prefix_caching``); a policy
    that ignores them still registers blocks, and the run warns that caching has no effect."""

    def __init__(self, knobs: Knobs, kv: KVManager, *, rng: np.random.Generator | None = None,
                 max_context: int | None = None):
        self.knobs = knobs
        self.kv = kv
        self.max_context = max_context  # the model's context length, when the engine knows it
        self.rng = rng if rng is not None else np.random.default_rng(0)  # the engine passes a seeded one
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # ---- the engine calls these ----------------------------------------------------------
    def reject_reason(self, req: Request) -> str | None:
        """Why this policy can never serve ``req`` (None if it can)."""
        kv = self.kv
        need = kv.blocks_for(req.spec.prompt_tokens + req.spec.output_tokens)
        num_blocks = kv.num_blocks
        if need > num_blocks:
            return (f"exceeds_kv_capacity: needs {need} KV blocks for {req.spec.prompt_tokens}+{req.spec.output_tokens} tokens; "
                    f"the replica has {kv.num_blocks}")
        if need <= num_blocks - kv.watermark_blocks:  # the prompt's blocks, no more than these, fit too
            return None
        prompt = kv.blocks_for(req.spec.prompt_tokens)
        if prompt > kv.num_blocks - kv.watermark_blocks:  # vLLM's AllocStatus.NEVER
            return (f"exceeds_kv_capacity: the prompt needs {prompt} KV blocks; admission keeps "
                    f"{kv.watermark_blocks} of the replica's {kv.num_blocks} free (watermark)")
        return None

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def readmit_reason(self, req: Request, computed: int) -> str | None:
        """Why ``req``, back in the waiting queue with ``computed`` tokens' KV kept (0 after a
        recompute preemption, when its prompt and generated tokens must be computed again; its
        prompt after a hand-off to a decode replica), can never be admitted again (None if it
        can): the blocks admission takes at once exceed what the watermark leaves of the pool.
        vLLM v0 ignores such a request (``AllocStatus.NEVER``, ``FINISHED_IGNORED``); it is
        aborted with this reason and counted."""
        kv = self.kv
        tokens = self.admission_tokens(req, computed)
        need = kv.blocks_for(tokens)
        if need <= kv.num_blocks - kv.watermark_blocks:
            return None
        return (f"aborted: resuming needs {need} KV blocks at once for {tokens} tokens; admission keeps "
                f"{kv.watermark_blocks} of the replica's {kv.num_blocks} free (watermark)")

    def admission_tokens(self, req: Request, computed: int) -> int:
        """Tokens whose KV admitting waiting ``req`` takes at once, with ``computed`` tokens
        kept: all of them for a policy that runs whole prompts (policies that chunk override)."""
        return req.num_tokens

    def drop_stuck(self) -> list[tuple[Request, str]]:
        """The engine calls this when ``schedule`` planned nothing although requests remain.
        With nothing running the pool is as free as it will ever be and the token budget whole,
        so the head of the queue can never be admitted: it leaves the queue and is returned with
        its reason (never an exception). Should running requests get no tokens (no policy here
        does that), the last one is dropped instead, so every call removes one request."""
        kv = self.kv
        if self.running:
            r = self.running.pop()
            kv.free(r.id)
            return [(r, "aborted: the scheduler planned no tokens for it while it was running")]
        if not self.waiting:
            return []
        r = self.waiting.popleft()
        kv.swapped.pop(r.id, None)
        kv.free(r.id)
        return [(r, self.readmit_reason(r, r.num_computed) or (
            f"aborted: cannot be admitted even by an idle replica ({r.num_tokens} tokens, {r.num_computed} computed; "
            f"{kv.num_blocks} KV blocks of {kv.block_size} tokens, {kv.watermark_blocks} kept free at admission; "
            f"max_num_batched_tokens {self.knobs.max_num_batched_tokens})"))]

    def finish(self, req: Request) -> None:
        """``req`` produced its last token: drop it and free its blocks."""
        self.running.remove(req)
        self.kv.free(req.id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, now: float) -> StepPlan:
        raise NotImplementedError

    @classmethod
    def reads_output_limit(cls, knobs) -> bool:
        """Whether this policy (with ``knobs``) decides by a request's output limit
        (``max_output_tokens``: reservation, a predictor that takes it); a trace without that
        column then gets the trace's longest output as every request's limit. Default: False."""
        return False

    def wake_at(self, now: float) -> float | None:
        """The earliest time after ``now`` at which this policy's plan may change although
        nothing else happens (a request held until a time, a timer of its own); None: never.
        The engine wakes an idle replica then (it does not drop requests that only wait for
        that time) and ends fast-forwarded runs at the first step that starts at or after it.
        The default: None."""
        return None

    def decode_batch(self) -> list[Request] | None:
        """The running requests, in the order ``schedule`` would give them their tokens, when
        ``schedule`` would now plan exactly one decode token for each of them and nothing else
        (no admission, no other effect) provided the pool gives the blocks those tokens need;
        else None. The engine then runs the decode steps without planning, and plans when the
        pool cannot give the first step's blocks. Policies opt in; the safe default is None."""
        return None

    def steady(self) -> bool:
        """Vouch that, right after a plan giving every running request one decode token, the
        next ``schedule`` calls would give the same plan again (same requests, same order, no
        other effect) until a request finishes, a request arrives or a block runs out. The
        engine then fast-forwards such runs. Policies opt in; the safe default is False."""
        return False

    def decodes_through_finishes(self) -> bool:
        """Vouch, for a batch of decodes ``decode_batch`` or a steady plan gave, that when some
        of its requests finish (and leave through ``finish``) with no other change,
        ``decode_batch`` would give the rest of the batch in the same order. The engine's decode
        run then goes on past finishes. Policies opt in; the safe default is False."""
        return False

    def admits_beside_decodes(self) -> bool:
        """Vouch that ``plan_beside_decodes`` gives the plan ``schedule`` would make whenever
        every running request's next token is a decode token whose blocks are in place, and
        that with nothing waiting ``decode_batch`` would give the running requests in
        ``running_order`` (the engine then runs decode steps and admissions without bringing the
        running requests up to date in between: ``sim.flow``). The running requests' progress
        may then be stale when ``running_order`` reads it (as of the step each joined), so an
        order that reads progress must order decoding requests alike whatever it is (sarathi's
        puts every decode first, in running order). Policies opt in; the safe default is False."""
        return False

    def plan_beside_decodes(self, now: float) -> StepPlan | None:
        """The plan ``schedule(now)`` would make when every running request decodes (see
        ``admits_beside_decodes``), made without reading the running requests' progress, less
        the decode tokens: those are one per running request, first, in running order
        (``with_decodes`` puts them in; a policy that opts in gives both). Only called when
        ``admits_beside_decodes`` holds."""
        return None

    # ---- helpers for policies -------------------------------------------------------------
    def requeue(self, victim: Request) -> None:
        """Where a preempted request waits: the front of the queue (policies may override)."""
        self.waiting.appendleft(victim)

    def preempt(self, victim: Request, plan: StepPlan) -> None:
        """Take ``victim``'s KV away and requeue it (``requeue``). By swap when ``kv.preemption``
        is swap and the host space holds its blocks (progress kept, blocks priced over the host
        link), else by recompute (blocks freed; the engine resets its progress on commit). A
        recompute victim that could never be admitted again (``readmit_reason``) is aborted
        (``plan.aborted``) instead of requeued."""
        self.running.remove(victim)
        plan.preempted.append(victim.id)
        plan.num_new_tokens.pop(victim.id, None)
        if self.kv.can_swap_out(victim.id):
            plan.blocks_swapped_out += self.kv.swap_out(victim.id)
            plan.swapped_out.append(victim.id)
        else:
            self.kv.free(victim.id)
            reason = self.readmit_reason(victim, 0)
            if reason:  # it could never come back: aborted, as vLLM v0 ignores it
                plan.aborted[victim.id] = reason
                return
        self.requeue(victim)
        plan.num_new_tokens.pop(victim.id, None)

    def admit_blocks(self, r: Request, plan: StepPlan, total_tokens: int, cached: int = 0) -> bool:
        """Blocks for a waiting request to cover ``total_tokens`` (all-or-nothing, keeping the
        watermark): swapped back in from host memory if it was swapped out, else allocated,
        taking ``cached`` prompt tokens' blocks from the prefix cache. Records both in ``plan``."""
        kv = self.kv
        if kv.is_swapped(r.id):
            moved = kv.swapped[r.id]
            if not kv.swap_in(r.id, total_tokens):
                return False
            plan.swapped_in.append(r.id)
            plan.blocks_swapped_in += moved
            return True
        if not kv.allocate(r.id, total_tokens, admit=True, spec=r.spec, cached_tokens=cached):
            return False
        if cached:
            plan.cached_tokens[r.id] = cached
            if kv.tiered:  # blocks loaded from a lower tier: priced with the step, counted per tier
                kv.record_loads(plan, r.first_scheduled_s is None)
        return True

    def schedule_decodes(self, plan: StepPlan) -> None:
        """Give every running request its next token(s), preempting by recompute when blocks
        run out. The victim is the last request in ``running`` (the most recently admitted
        under FCFS), as in vLLM; a request that is itself the last one preempts itself."""
        kv, out, running = self.kv, plan.num_new_tokens, self.running
        held, bs = kv.held, kv.block_size
        i = 0
        while i < len(running):
            r = running[i]
            total = r.prompt_tokens + r.num_generated
            if total > held[r.id] * bs:  # needs a new block (the common case skips this)
                while not kv.allocate(r.id, total):
                    victim = running[-1]
                    self.preempt(victim, plan)
                    if victim is r:
                        break
                else:
                    out[r.id] = total - r.num_computed
                    i += 1
                continue
            out[r.id] = total - r.num_computed
            i += 1


def sort_key_queue(waiting: deque, r: Request, key) -> None:
    """Insert ``r`` into ``waiting`` kept in ascending ``key`` order (after equal keys)."""
    waiting.insert(bisect.bisect_right(waiting, key(r), key=key), r)


class BudgetScheduler(Scheduler):
    """The vLLM v1-shaped step most policies share: running requests first (in
    ``running_order``), then waiting ones in queue order (kept by ``queue_key``), all under one
    token budget; no admission in a step that preempted.

    A policy overrides only its hooks, each a small function in its own file: ``budget``,
    ``running_order``, ``queue_key`` (None: FCFS), ``victim``, ``chunk`` (tokens a request may
    compute this step), ``admissible`` (an extra admission test), ``reserve`` (tokens of KV to
    hold on admission).
    """

    queue_key = None  # a static ordering of the waiting queue; None keeps arrival order
    uses_prefix_hits = True  # ``schedule_waiting`` skips the cached blocks of a fresh request

    formed_at = float("-inf")  # when the batch of the step being planned was formed (``overlapped``)
    last_schedule = float("-inf")  # when the previous step was planned (``overlapped``)

    def overlapped(self) -> bool:
        """True when the engine forms the batch of step k+1 while step k runs (vLLM's async
        scheduling, TRT-LLM's overlap scheduler): a request that arrives during a step may join
        only the step after the next one; an idle engine (nothing running) takes it at once.
        Policies with such a knob override this."""
        return False

    spec_tokens = 0
    """Draft tokens a decoding request verifies per step (``speculative.num_speculative_tokens``;
    set by the engine; 0: no speculation). They are scheduled with its decode token, counted in
    the budget, with KV slots for all of them, as vLLM v1 does."""

    def budget(self) -> int:
        return self.knobs.max_num_batched_tokens

    def running_order(self) -> list[Request]:
        return list(self.running)

    def victim(self) -> Request:
        return self.running[-1]

    def chunk(self, r: Request, want: int, budget: int) -> int:
        """Chunked prefill: as many of the ``want`` tokens as the budget allows (0: none)."""
        return min(want, budget)

    chunk_keeps_single_tokens: ClassVar[bool] = True
    """True when ``chunk(r, 1, budget)`` is 1 for every budget of at least 1 (a decode token is
    never split or refused), so ``schedule_running`` skips the call for decodes. A policy whose
    ``chunk`` may refuse a single token sets it False."""

    def admissible(self, r: Request, now: float) -> bool:
        """An extra admission test (``overlapped``: only requests that arrived before this
        step's batch was formed)."""
        return not self.overlapped() or r.spec.arrival_s <= self.formed_at

    def reserve(self, r: Request, total_tokens: int) -> int:
        return total_tokens

    def admission_tokens(self, req: Request, computed: int) -> int:
        return self.reserve(req, computed + 1)  # chunked: the next token, or what ``reserve`` holds

    def add(self, req: Request) -> None:
        if self.queue_key is None:
            self.waiting.append(req)
        else:
            sort_key_queue(self.waiting, req, self.queue_key)

    queue_static: ClassVar[bool] = True
    """True when none of this policy's decisions (the waiting queue's order, the admission test,
    the running order, the budget, the chunks) can change during a run of decode steps until a
    request arrives or finishes, a block runs out or the policy's ``wake_at`` time comes (no
    time-dependent keys, no test reading the running requests' progress). A subclass that
    overrides a decision hook states it in its own body (``register`` checks)."""

    def steady(self) -> bool:
        # schedule_running gives each running request its next token in running order again.
        # A waiting head that was refused stays refused while the batch only decodes: the token
        # budget left is the same and free blocks only shrink (a plain KV manager's refused
        # allocation has no side effects: ``static_refusal``) - unless the queue order or the
        # test moves with time.
        # (overlapped: a waiting request refused now may be admitted at the next step)
        return not self.waiting or (self.queue_static and self.kv.static_refusal and not self.overlapped())

    def requeue(self, victim: Request) -> None:
        if self.queue_key is None:
            self.waiting.appendleft(victim)
        else:
            sort_key_queue(self.waiting, victim, self.queue_key)

    def decodes_through_finishes(self) -> bool:
        # with nothing waiting, decode_batch's tests hold for any part of a batch that passed
        # them (fewer requests under the budget, each still decoding) and running_order keeps
        # the order of the requests left (the running list; sarathi's stable sort)
        return not self.waiting

    def decode_batch(self) -> list[Request] | None:
        # schedule_running gives each running request in running_order its remaining tokens
        # under the budget, growing its blocks; with nothing waiting, no admission follows
        if self.waiting or not self.running or not self.chunk_keeps_single_tokens or not self.steady():
            return None
        order = self.running_order()
        if len(order) > self.budget():
            return None
        for r in order:
            if not decodes_next(r):
                return None
        return order

    def admits_beside_decodes(self) -> bool:
        # schedule_running would give each running request its one decode token (the budget
        # holds them: checked by the engine before each run of decode steps), so ``schedule``
        # is these tokens and then schedule_waiting; that needs the plan made here (schedule,
        # schedule_running, release, steady and decode_batch as this class has them) and an
        # admission that does not read the running requests' progress or the time
        # (queue_static) and is not formed a step ahead (overlapped)
        here = _PLANS_HERE.get(type(self))
        if here is None:
            cls = type(self)
            here = _PLANS_HERE[cls] = all(getattr(cls, name) is getattr(BudgetScheduler, name) for name in _PLANNED_HERE)
        return here and self.queue_static and not self.overlapped() and self.chunk_keeps_single_tokens

    def with_decodes(self, plan: StepPlan) -> StepPlan:
        """``plan`` (``plan_beside_decodes``') with the decode tokens it leaves out put first:
        the plan ``schedule`` would have made."""
        tokens = {r.id: 1 for r in self.running_order() if r.id not in plan.num_new_tokens}
        tokens.update(plan.num_new_tokens)
        plan.num_new_tokens = tokens
        return plan

    def plan_beside_decodes(self, now: float) -> StepPlan:
        self.form_batch(now)
        plan = StepPlan()
        self.schedule_waiting(plan, self.budget() - len(self.running), now)
        return plan

    def form_batch(self, now: float) -> None:
        """Note that the batch of a step starting at ``now`` is planned (``overlapped``: while
        requests run, it was formed when the previous step was planned)."""
        if self.overlapped():
            self.formed_at = self.last_schedule if self.running else now
            self.last_schedule = now

    def release(self, plan: StepPlan) -> bool:
        """Whether waiting requests may be admitted after the running ones got ``plan``'s
        tokens (a policy that holds prompts back overrides it; no admission follows a preemption
        either way)."""
        return True

    def schedule(self, now: float) -> StepPlan:
        self.form_batch(now)
        plan = StepPlan()
        budget = self.schedule_running(plan, self.budget())
        if not plan.preempted and self.release(plan):
            self.schedule_waiting(plan, budget, now)
        return plan

    def schedule_running(self, plan: StepPlan, budget: int) -> int:
        """Running requests catch up (decodes, unfinished chunks); returns the budget left. A
        victim already scheduled this step gives its tokens back to the budget."""
        kv, out, preempted = self.kv, plan.num_new_tokens, plan.preempted
        held, bs, covered_is_noop, chunk = kv.held, kv.block_size, kv.covered_is_noop, self.chunk
        single, spec = self.chunk_keeps_single_tokens, self.spec_tokens
        for r in self.running_order():
            if budget <= 0:
                break
            rid = r.id
            if preempted and rid in preempted:
                continue
            computed = r.num_computed
            want = r.prompt_tokens + r.num_generated - computed  # r.remaining, inlined
            if want == 1 and single:
                n = 1
                if spec and r.num_generated:  # a decode: its drafts too, as the budget and the client's limit allow
                    d = min(spec, budget - 1)
                    limit = r.spec.max_output_tokens
                    if limit is not None and limit - r.num_generated - 1 < d:
                        d = limit - r.num_generated - 1
                    if d > 0:
                        n += d
            else:
                n = chunk(r, want, budget)
                if n <= 0:
                    continue
            total = computed + n
            blocks = held.get(rid)
            # blocks that already cover the tokens need no allocation (when asking has no side effects)
            if (covered_is_noop and blocks is not None and total <= blocks * bs) or kv.allocate(rid, total):
                out[rid] = n
                budget -= n
            else:
                budget = self._make_room(r, total, n, plan, budget)
        return budget

    def _make_room(self, r: Request, total: int, n: int, plan: StepPlan, budget: int) -> int:
        """``schedule_running`` for a request whose blocks the pool just refused to grow to
        ``total`` tokens for its ``n`` tokens: preempt ``victim``s until they fit, or until ``r``
        itself was the victim; returns the budget left. A victim already scheduled this step
        gives its tokens back to the budget."""
        out = plan.num_new_tokens
        while True:
            v = self.victim()
            budget += out.get(v.id, 0)
            self.preempt(v, plan)
            if v is r:
                return budget
            if self.kv.allocate(r.id, total):
                out[r.id] = n
                return budget - n

    def schedule_waiting(self, plan: StepPlan, budget: int, now: float) -> None:
        """Admit waiting requests in queue order until one does not fit (head-of-line)."""
        kv, waiting, running, out = self.kv, self.waiting, self.running, plan.num_new_tokens
        max_seqs = self.knobs.max_num_seqs
        while waiting and budget > 0 and len(running) < max_seqs:
            r = waiting[0]
            rid, computed = r.id, r.num_computed
            num_tokens = r.prompt_tokens + r.num_generated  # r.num_tokens, inlined
            swapped = kv.is_swapped(rid)
            cached = kv.prefix_hit(r.spec, num_tokens) if computed == 0 and not swapped else 0
            if not running and not swapped:  # nothing else can free memory: the chunk shrinks to what fits
                budget = min(budget, (kv.num_free - kv.watermark_blocks) * kv.block_size - computed - cached)
            n = self.chunk(r, num_tokens - computed - cached, budget)
            if n <= 0 or not self.admissible(r, now):
                return
            if not self.admit_blocks(r, plan, self.reserve(r, computed + cached + n), cached):
                return
            waiting.popleft()
            running.append(r)
            out[rid] = n
            budget -= n


_PLANNED_HERE = ("schedule", "schedule_running", "release", "steady", "decode_batch", "decodes_through_finishes",
                 "plan_beside_decodes")
"""``BudgetScheduler`` methods that ``admits_beside_decodes`` needs as they are here."""
_PLANS_HERE: dict[type, bool] = {}  # per class: whether it has every one of them as it is here
