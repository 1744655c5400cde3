"""The event engine: the only module that imports simpy, the only orchestrator, the owner of
simulated time (docs/architecture.md section 2).

One arrival process feeds a router; each replica runs one loop (``Engine._replica``) that asks
its scheduler for a ``StepPlan``, prices the step's ``BatchShape`` with the cost model, advances
time by the step and applies the results. Request state changes only through ``sim.lifecycle``,
called at the engine's named points (``admit``, ``_step``, ``_run``). Events are per step, never
per token. Where the pieces live: docs/architecture.md.
"""
from __future__ import annotations

import heapq
from functools import partial
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim import lifecycle
from sim.catalog import get_model
from sim.cluster import ROUTERS, ReplicaLoad
from sim.cluster.autoscale import FleetLog
from sim.cluster.disagg import Disaggregation
from sim.cluster.dynamics import PoolDynamics
from sim.cluster.faults import FaultSchedule, ScaledCost
from sim.cluster.frontend import Frontend, with_frontend
from sim.cluster.pools import fleet, pool_parts, pools_output
from sim.config import Config
from sim.cost import make_cost_model
from sim.fastforward import decode_run, steady_decode
from sim.flow import Flow, enters
from sim.kv import KVManager, make_kv_manager
from sim.kv.tiers import tier_block, tiered_cache
from sim.speculative import spec_workload
from sim.metrics.requestlog import RequestLog
from sim.metrics.steplog import ItlLog, ItlSketch, StepLog
from sim.request import Request
from sim.scheduler import REGISTRY
from sim.types import BatchShape, StepTime, default_output_limit
from sim.workload import build_workload
from sim.workload.closed_loop import Clients


@dataclass
class SimOutput:
    """Everything a run produced, as plain values (records for the metrics stage)."""

    config: Config
    requests: RequestLog
    """One row per arrived request (the Request objects are dropped as requests leave)."""
    steps: StepLog
    itl: ItlLog | ItlSketch
    """Inter-token gaps, stored weighted (distinct gaps with the tokens that had each), or their
    sketch when streaming."""
    memory: dict
    num_gpus: int
    simulated_s: float
    workload_info: dict
    cost_source: str
    cost_params: dict
    out_of_range: int
    kv_blocks_per_replica: int
    workers: int = 1  # processes the replicas ran in (engine.workers)
    cost_info: dict | None = None
    """What priced the run, when the cost model describes itself (the kernel database does)."""
    faults: dict | None = None  # summary.json's ``faults`` block (None without faults)
    speculative: dict | None = None  # summary.json's ``speculative`` block (None without speculation)
    kv_tiers: dict | None = None  # a tiered KV cache's sizes and counts (None without one: ``sim.kv.tiers``)
    fleet: FleetLog | None = None  # provisioning record (autoscaling only)
    pools: dict | None = None  # with cluster.pools: per pool, what the summary's ``pools`` block needs
    warnings: list = field(default_factory=list)
    """One line per thing the user should know about this run (``ServesimWarning``)."""


class Replica:
    """One model replica: its scheduler, KV manager and cost model, and the event its loop
    sleeps on when it has nothing to do.

    It is also the whole interface the fast paths (``sim.flow``) have to the engine: besides
    those three, the logs (``by_id``, ``itl``, ``steps``), its parallelism (``tp``, ``pp``),
    ``next_arrival``, ``must_wait``, ``step``, ``drop`` and ``leave``. Nothing else of the engine is
    theirs to read or change."""

    def __init__(self, idx: int, scheduler, kv: KVManager, cost, engine: "Engine", pool):
        self.idx, self.scheduler, self.kv, self.cost = idx, scheduler, kv, cost
        self.by_id, self.itl, self.steps = engine.by_id, engine.itl, engine.steps
        self.pool = pool  # its ``PoolSpec`` (sim/cluster/pools.py)
        self.tp, self.pp = pool.tp, pool.pp
        # the fast paths' interface: the engine's own functions, bound to this replica (no extra
        # Python frame on their hot paths)
        self.next_arrival = partial(engine.next_arrival_for, self)
        """() -> the earliest time a new request can reach this replica (a lower bound)."""
        self.must_wait = partial(engine._wait, self)
        """(end, arrival=None) -> whether the replica's loop must wait for the clock to reach
        ``end`` (the end of a step or run), rather than go on at its own clock (``runs_ahead``)."""
        self.step = partial(engine._step, self)
        """(plan, start) -> a generator running ``plan`` as one step (yield from it; it returns
        the step's end)."""
        self.drop = lambda plan, now: engine._empty(self.scheduler, plan, now)
        """(plan, now) -> an empty ``plan``: its preemptions and aborts applied, no step run."""
        self.leave = partial(engine._leave, self)
        """(r) -> ``r`` produced its last token: it leaves the scheduler and its row is written."""
        self.wake: simpy.Event | None = None
        self.role = pool.role  # "both", or "prefill" / "decode" under disaggregation
        self.up = True  # serving (False while crashed, warming up or retired)
        self.retired = False  # released by the autoscaler
        self.proc = None  # its simpy process
        self.lives = 0  # restarts and cold starts so far (seeds its next scheduler)
        self.run: tuple | None = None  # (decode run, waiting at its start) while one is in flight
        self.step_s: float | None = None  # its last decode step's seconds (sizes the next run's pricing)

    def poke(self) -> None:
        """Wake the replica's loop if it sleeps."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()


class Engine:
    """Wiring (``__init__``), admission, and the event loop: arrivals (``_arrivals``, or the
    closed-loop ``clients``) feed ``admit``, which routes each request to a replica; each replica
    runs one loop (``_replica`` -> ``_serve``). ``run`` starts the processes and gathers the
    output.

    How one step flows, in ``_serve``:

    1. ``scheduler.schedule(now)`` -> ``StepPlan`` (the policy; it may call its KV manager);
    2. ``_step``: ``lifecycle.commit`` applies preemptions and marks the plan's requests
       scheduled, giving the ``BatchShape``; ``_cost(rep, start).step_time`` prices it; the loop
       waits that long; ``lifecycle.complete_step`` emits tokens; finished requests leave their
       scheduler (``_leave`` -> ``_done``: the row is written), and under disaggregation
       first-token requests move to a decode replica (``_transfer``);
    3. ``steps.add`` records the row.

    SimPy's loop drives every run. The fast paths compute ahead between events, with results
    identical to single steps:

    - decode runs replace 2-3 when ``fastforward.steady_decode`` holds: ``_run`` prices the whole
      run of identical decode steps (``fastforward.decode_run``) up to the next event (the next
      possible arrival, ``next_arrival_for``; a fault change; the policy's ``wake_at``), waits
      once for its end, and applies it with ``lifecycle.complete_run``. They replace 1 too when
      the policy knows its plan without making it (``Scheduler.decode_batch``);
    - a replica that shares no state (``runs_ahead``) does not wait for a step or run that ends
      before its next arrival can come (``_wait``): its process keeps its own clock, ahead of
      simpy's;
    - flows (``sim.flow.Flow``) run decode steps and the admissions beside them with the batch
      held in columns; they reach the engine only through ``Replica``;
    - in an expert group (``_group``), a rank that only decodes takes the group's steps in a run
      (``sim.grouprun``), without planning, and catches up when the run ends.

    Around the loop: ``self.faults`` (``sim/cluster/faults.py``) slows the steps of a straggling
    replica (``_cost``); ``self.dynamics`` (``sim/cluster/dynamics.py``) crashes, restarts and
    autoscales replicas and holds the requests parked while none serves; ``self.clients``
    (``sim/workload/closed_loop.py``) are the closed-loop clients, woken by ``_done``.
    """

    def __init__(self, cfg: Config, progress=None, record_plans: bool = False, stream_to=None,
                 shard: tuple[int, int] = (0, 1)):
        self.cfg = cfg
        # shard (w, n): this process simulates replicas i with i % n == w (see ``run_engine``)
        self.shard = shard
        self.pools = fleet(cfg)  # (described below)
        self.own = {i for i in range(sum(p.ranks for p in self.pools)) if i % shard[1] == shard[0]}
        # record_plans: keep each step's (replica, start_s, request ids, BatchShape) in
        # ``self.plans`` (the real replay of calibration/ executes them); off by default.
        self.plans: list | None = [] if record_plans else None
        self.model = get_model(cfg.model)
        # the pools (the shorthand's one or two share ``cfg``): per (GPU, dtype, TP, PP) a card,
        # a memory plan and a cost model; ``hw``, ``mem``, ``cost`` are the first pool's
        self.parts = pool_parts(self.pools, self.model, bool(cfg.cluster.pools))
        self.hw, self.mem, self.cost = self.parts[self.pools[0].key]
        self.pool_of = [p for p in self.pools for _ in range(p.ranks)]  # by replica index (a rank with dp > 1)
        # a tiered KV cache's run-wide counts (None: off; the config refuses one with cluster.pools)
        self.tiers = tiered_cache(cfg, self.mem.block_bytes)
        self.sched_cls, self.knobs = REGISTRY[cfg.scheduler.name], cfg.scheduler.knobs()
        self.warnings: list[str] = prefix_caching_warnings(cfg)
        # rows of the requests that left; with output.stream they go to ``stream_to`` in chunks
        if stream_to is not None:
            from sim.metrics.records import ParquetSink  # (pyarrow: imported only when streaming)

            self.sink = ParquetSink(stream_to, frontend=cfg.frontend.active)
        else:
            self.sink = None
        # the serving front end (sim/cluster/frontend.py; None: none, rows carry no client-side times)
        self.frontend = Frontend(cfg.frontend) if cfg.frontend.active else None
        self.requests = RequestLog(self.sink, cfg.output.stream_chunk_rows,
                                   None if self.frontend is None else self.frontend.out_s)
        self.by_id: dict[int, Request] = {}  # the requests in flight
        self.admitted = 0
        # (busy time: only for the share of extrapolated GPU time, which a cost model that names
        # what it extrapolated reports)
        pooled = bool(cfg.cluster.pools)  # (each pool's busy share: busy time per replica)
        self.steps = StepLog(keep_rows=cfg.output.step_records, track_busy=pooled or hasattr(self.cost, "extrapolated"),
                             by_replica={} if pooled else None)
        self.itl = ItlSketch() if self.sink is not None else ItlLog()
        # attention data parallelism: each replica is an expert group of ``dp`` ranks, each rank
        # its own scheduler and KV pool (a ``Replica``: the routers see ranks); a group steps as one
        self.dp = max(p.dp for p in self.pools)  # (what dp > 1 does not simulate is refused by the config)
        self.replicas = [self._new_replica(i) for i in range(len(self.pool_of))]
        self.disagg = Disaggregation.for_config(cfg, self.replicas, self.hw, self.model, self.pools, self.parts)  # None: not disaggregated
        self.entry_pool = self.disagg.entry_pool if self.disagg else self.replicas  # where arrivals go
        self.route = ROUTERS[cfg.cluster.router]
        self.route_state: dict = {"rng": np.random.default_rng([cfg.seed, 3]),  # the router's own stream
                                  "cluster": cfg.cluster}  # and its knobs
        self.rng = np.random.default_rng(cfg.seed)
        self.workload = with_frontend(build_workload(spec_workload(cfg), max_context=self.model.max_context,
                                                     rng=self.rng,
                                                     trace_output_bound=self.sched_cls.reads_output_limit(self.knobs),
                                                     block_tokens=cfg.kv.block_size), cfg.frontend)
        self.drafter = self._drafter()  # speculative decoding (None: off)
        self.fast_forward = (cfg.engine.fast_forward and record_plans is False and fast_forward_exact(cfg, self.route)
                             and self.dp == 1 and self.drafter is None)
        # an expert group's ranks that only decode take its steps in decode runs (``sim.grouprun``)
        self.group_runs = cfg.engine.fast_forward and record_plans is False and self.drafter is None
        self.upcoming: deque = deque()  # arrivals read ahead of time (open loop)
        self.ahead: list[deque] | None = None  # per replica, the arrival times of its upcoming requests (``_read_ahead``)
        self.env = simpy.Environment()
        self.arrivals_done = False
        self.progress = progress
        self.clients = Clients(self) if cfg.workload.closed_loop else None
        # faults (the schedule prices steps; crashes change the pool) and autoscaling
        self.faults = FaultSchedule(cfg.faults.events)
        self.dynamics = PoolDynamics(self)
        self.dynamic = (bool(self.faults.crashes) or cfg.cluster.autoscale.enabled  # the pool changes
                        or any(p.autoscale is not None for p in self.pools))
        self.end_s: float | None = None  # when the last open request ended (dynamic runs)
        # a replica that shares no state runs ahead of simpy's clock up to its next possible
        # arrival (``_wait``): nothing reaches it or reads it before then
        self.runs_ahead = (self.fast_forward and not self.dynamic and not self.faults and self.clients is None
                           and self.disagg is None)
        # such a replica's decode runs go on past finishes too (when its policy vouches for it:
        # ``_run``), and admit arrivals beside their decodes (``sim.flow``)
        self.through_finishes = self.runs_ahead

    def _drafter(self):
        """Speculative decoding's acceptance draws and draft pricing (``sim.speculative``), or None."""
        sp = self.cfg.speculative
        if not sp.enabled:
            return None
        from sim.speculative import Drafter

        draft = None
        if sp.draft_model is not None:
            draft = make_cost_model(self.cfg, get_model(sp.draft_model), self.hw)
        return Drafter(sp, np.random.default_rng([self.cfg.seed, 5]), self.cost, draft)

    def _new_replica(self, i: int, lives: int = 0, pool=None) -> Replica:
        """Replica ``i`` with an empty KV pool and a fresh scheduler (its ``lives``-th start), of
        ``pool`` (a new replica's; default: the pool replica ``i`` belongs to)."""
        cfg = self.cfg
        if pool is None:  # (cluster.autoscale adds replicas to the one pool there is)
            pool = self.pool_of[i] if i < len(self.pool_of) else self.pools[0]
        if i == len(self.pool_of):
            self.pool_of.append(pool)
        _, mem, cost = self.parts[pool.key]
        kv = make_kv_manager(cfg.kv, mem.num_gpu_blocks, mem.block_bytes, self.tiers)
        seed = [cfg.seed, 1, i] + ([lives] if lives else [])  # the policy's own stream (predictors)
        sched = self.sched_cls(pool.knobs or self.knobs, kv, rng=np.random.default_rng(seed),  # a pool's own limits
                               max_context=self.model.max_context)
        if cfg.speculative.enabled and pool.role != "prefill":  # (a prefill pool verifies nothing)
            sched.spec_tokens = cfg.speculative.num_speculative_tokens
        return Replica(i, sched, kv, cost, self, pool)

    # ------------------------------------------------------------------ admission
    def admit(self, spec, turn: int | None = None, order: int | None = None) -> None:
        """An arrival, numbered in arrival order: reject it with a reason, or route it to a
        replica's scheduler (``turn``: the entry replica the router's ``turns`` already gave it,
        see ``_read_ahead``; ``order``: its number, when a shard read others past). A shard keeps
        only the requests routed to its replicas, and shard 0 the ones rejected before routing."""
        ctx = self.model.max_context
        if order is None:
            order = self.admitted
        self.admitted += 1
        if spec.max_output_tokens is None:
            spec = spec.with_output_limit(default_output_limit(spec.prompt_tokens, ctx))
        too_long = spec.prompt_tokens + spec.output_tokens > ctx
        rep = None if too_long else self._route(spec) if turn is None else self.entry_pool[turn]
        if (too_long and self.shard[0]) or (rep is not None and rep.idx not in self.own):
            return  # another shard's request
        req = Request(spec)
        req.order = order
        self.by_id[req.id] = req
        if too_long:
            return self._reject(req, f"exceeds_context: prompt {spec.prompt_tokens} + output {spec.output_tokens} "
                                     f"tokens exceed {self.model.id}'s context of {ctx}")
        self._place(req, rep)

    def _route(self, spec) -> Replica | None:
        """The serving entry replica the router picks for ``spec`` (None: none serves)."""
        pool = [r for r in self.entry_pool if r.up] if self.dynamic else self.entry_pool
        if not pool:
            return None
        loads = [ReplicaLoad(len(r.scheduler.waiting), len(r.scheduler.running), r.kv.num_used / r.kv.num_blocks, r.kv)
                 for r in pool] if self.route.reads_load else pool
        return pool[self.route(spec, loads, self.route_state) % len(pool)]  # the pool may have shrunk

    def _dispatch(self, req: Request) -> None:
        """Route a re-queued or parked ``req`` again."""
        self._place(req, self._route(req.spec))

    def _place(self, req: Request, rep: Replica | None) -> None:
        """``req`` joins ``rep``'s scheduler, is rejected by it, or (no replica serves) is parked."""
        if rep is None:
            self.dynamics.parked.append(req)
            return
        req.replica = rep.idx
        reason = rep.scheduler.reject_reason(req)
        if reason:
            return self._reject(req, reason)
        rep.scheduler.add(req)
        rep.poke()

    def _reject(self, req: Request, reason: str) -> None:
        lifecycle.reject(req, reason)
        self._done(req)

    def _abort(self, plan) -> None:
        """Requests the policy dropped with ``plan`` (they left its queues for good)."""
        for rid, reason in plan.aborted.items():
            self._reject(self.by_id[rid], reason)

    def _done(self, req: Request) -> None:
        """``req`` finished, was rejected or lost: its row is written and its object dropped; wake
        its closed-loop client, count progress; note when the last request in flight ends."""
        self.requests.add(req, req.order)
        del self.by_id[req.id]
        if self.clients is not None:
            self.clients.finished(req.id)
        if self.progress is not None:
            self.progress.update(1)
        if self.dynamic and not self.by_id and self.arrivals_done:
            self._arrivals_finished()  # the last open request ended: replicas may stop

    # ------------------------------------------------------------------ one step / one run
    def _step(self, rep: Replica, plan, start: float):
        """Commit ``plan``, wait for its step (unless the replica runs ahead: ``_wait``),
        complete it; returns the step's end (a generator the loop yields from)."""
        shape = self._commit(plan, start, rep)
        st = self._cost(rep, start).step_time(shape)
        accepted = None
        if self.drafter is not None:  # the decodes verify their drafts: acceptances drawn, drafts priced
            st, accepted = self._verify(plan, st, rep.cost)
        if self.plans is not None:
            self.plans.append((rep.idx, start, tuple(plan.num_new_tokens), shape))
        now = start + st.total  # (simpy's clock: now + delay)
        if self._wait(rep, now):
            yield now
        prefill, decode, changed = lifecycle.complete_step(plan, self.by_id, start, now, self.itl, accepted)
        if changed:
            self._changed(rep, changed, now)
        self.steps.add(rep.idx, start, st, len(shape.new_tokens), prefill, decode, len(plan.preempted),
                       rep.kv.num_used, len(rep.scheduler.waiting))
        return now

    def _changed(self, rep: Replica, changed, now: float) -> None:
        """Requests of ``rep`` that finished (they leave) or got their first token at ``now``
        (on a prefill replica their KV starts moving to a decode replica)."""
        for r in changed:
            if r.finish_s is not None:
                self._leave(rep, r)
            elif rep.role == "prefill":
                seconds = self.disagg.hand_off(rep, r)
                if self.faults:  # a degraded link moves the KV at 1/factor of the bandwidth
                    seconds *= self.faults.factors(rep.idx, now)[1]
                self.env.process(self._transfer(r, seconds))

    def _commit(self, plan, now: float, rep: Replica) -> BatchShape:
        """Commit ``plan`` of ``rep`` at ``now`` (``lifecycle.commit``) and abort what it dropped;
        the step's ``BatchShape``."""
        ctx = lifecycle.commit(plan, self.by_id, now)
        if plan.aborted:
            self._abort(plan)
        return BatchShape(tuple(plan.num_new_tokens.values()), tuple(ctx), plan.blocks_swapped_in,
                          plan.blocks_swapped_out, rep.tp, rep.pp, plan.blocks_loaded, plan.blocks_loaded_disk)

    def _empty(self, sched, plan, now: float) -> tuple[bool, float | None]:
        """An empty ``plan``: its preemptions and aborts applied; returns whether it had any, and
        the time the policy holds the requests it still has until (``wake_at``; None: no time,
        nothing left, or something moved, so the policy plans again at once)."""
        moved = bool(plan.preempted or plan.aborted)
        if moved:
            lifecycle.commit(plan, self.by_id, now)
            self._abort(plan)
        return moved, (sched.wake_at(now) if not moved and sched.has_work() else None)

    def _verify(self, plan, st, target):
        """Speculative decoding in a step: each decoding request given drafts (more than its one
        decode token) gets its accepted count drawn; the drafts of those requests are priced
        (on ``target``, the replica's cost model: its pool's) and added to ``st``. Returns (the
        step's time, {request id: accepted drafts})."""
        from sim.speculative import with_draft

        accepted, n, kv, longest = {}, 0, 0, 0
        by_id, accept = self.by_id, self.drafter.accept
        for rid, k in plan.num_new_tokens.items():
            if k > 1:
                r = by_id[rid]
                if r.num_generated and r.num_computed == r.prompt_tokens + r.num_generated - 1:
                    accepted[rid] = accept(k - 1, r.spec.acceptance)
                    n += 1
                    c = r.num_computed + 1
                    kv += c
                    longest = max(longest, c)
        return with_draft(st, self.drafter.price(n, kv, longest, target)), accepted

    def _run(self, rep: Replica, reqs: list[Request], start: float):
        """Decode fast-forward of the running requests ``reqs``, each to get one decode token
        per step (a steady plan's, or ``Scheduler.decode_batch``'s; a generator the loop yields
        from, returning the run's end, or None when the pool cannot give the first step's blocks:
        only a batch that no plan has allocated for, which the loop then plans)."""
        arrival = self.next_arrival_for(rep)
        cost = rep.cost
        if self.faults:  # a fault's start or end, a crash or a restart, ends the run as an arrival does
            arrival = min(arrival, self.faults.next_change(rep.idx, start))
            cost = self._cost(rep, start)
        wake = rep.scheduler.wake_at(start)  # so does the policy's own time
        bound = arrival if wake is None or wake >= arrival else wake
        through = self.through_finishes and rep.scheduler.decodes_through_finishes()
        run = decode_run(reqs, rep.kv, cost, start, bound, self.steps.keep_rows, rep.step_s, through)
        if not run.steps:
            return None
        times = run.times
        end = times[-1]
        rep.step_s = end - times[-2]
        waiting = rep.scheduler.waiting
        w0 = len(waiting)  # arrivals can land only in the run's last step
        if self._wait(rep, end, arrival):
            rep.run = (run, w0)
            yield end
            rep.run = None
        for r in lifecycle.complete_run(reqs, times, run.steps, self.itl):
            self._leave(rep, r)
        self.steps.add_run(rep.idx, run, w0, len(waiting), rep.kv.num_used)
        return end

    def _wait(self, rep: Replica, end: float, arrival: float | None = None) -> bool:
        """Whether the loop must wait for the clock to reach ``end``, the end of a step or run
        of ``rep``, rather than run ahead (``runs_ahead``): it must when an arrival can reach
        ``rep`` by then (``arrival``: ``next_arrival_for(rep)`` when the caller has it)."""
        return not self.runs_ahead or end >= (self.next_arrival_for(rep) if arrival is None else arrival)

    def _leave(self, rep: Replica, r: Request) -> None:
        """``r`` produced its last token: it leaves its scheduler (blocks freed)."""
        rep.scheduler.finish(r)
        self._done(r)

    def _transfer(self, r: Request, seconds: float):
        """Disaggregation: ``r``'s KV moves to a decode replica."""
        yield self.env.timeout(seconds)
        dst, reason = self.disagg.land(r)
        if dst is None:  # every decode replica is down: prefill again from scratch
            lifecycle.crash_requeue(r)
            return self.dynamics.requeue(r)
        if reason:  # the decode replica could never admit it: aborted, counted
            self._reject(r, reason)
        dst.poke()
        if self.arrivals_done and not self.disagg.upstream_busy(dst):
            for rep in self.replicas:  # idle decode replicas may now stop
                rep.poke()

    def next_arrival_for(self, rep: Replica) -> float:
        """The earliest time a new request can reach ``rep`` (a lower bound): with one replica
        the next arrival; otherwise the router's ``turns`` told which upcoming arrivals are this
        replica's as they were read ahead (``_read_ahead``)."""
        if self.cfg.workload.closed_loop is not None:  # any replica: a lower bound
            return min(self.clients.wakes.values(), default=float("inf"))
        up = self.upcoming
        if not up:
            return float("inf")
        if self.ahead is None:  # one replica, or a changing pool: any arrival may come here
            return up[0].arrival_s
        mine = self.ahead[rep.idx]
        return mine[0] if mine else up[-1].arrival_s  # beyond the read-ahead: not before the last one read

    def _cost(self, rep: Replica, start: float):
        """The cost model for a step of ``rep`` starting at ``start``: slowed by the faults
        active then (the cost model still sees only the BatchShape)."""
        if not self.faults:
            return rep.cost
        compute, link = self.faults.factors(rep.idx, start)
        return rep.cost if compute == 1.0 and link == 1.0 else ScaledCost(rep.cost, compute, link)

    # ------------------------------------------------------------------ processes
    def _arrivals(self):
        """The open-loop process: admit each request at its arrival time, reading ahead into
        ``upcoming`` so that ``next_arrival_for`` sees the next ones. A shard reads another
        shard's requests past (``_read_ahead``): admitting one would only number it."""
        env = self.env
        it = iter(self.workload)
        ahead = 2 * len(self.replicas)  # specs read ahead, so a replica can know its next arrival
        up = self.upcoming
        turn_of = self._read_ahead()
        orders = deque() if turn_of is not None and self.shard[1] > 1 else None  # a shard's: each spec's number
        read = 0
        while True:
            while len(up) < ahead:
                spec = next(it, None)
                if spec is None:
                    break
                read += 1
                if turn_of is not None and turn_of(spec) is False:  # another shard's
                    continue
                up.append(spec)
                if orders is not None:
                    orders.append(read - 1)
            if not up:
                break
            spec = up[0]
            if spec.arrival_s > env.now:  # at its exact time,
                yield _At(env, spec.arrival_s, simpy.core.URGENT)  # before any step that ends then
            up.popleft()
            self.admit(spec, None if turn_of is None else turn_of(None), None if orders is None else orders.popleft())
        self.admitted = read  # (a shard numbered the others' requests too)
        self._arrivals_finished()

    def _read_ahead(self):
        """With several replicas, a fixed pool and a router whose turns are known (what the
        fast-forward needs), the function that files each spec read ahead under the replica it
        will go to (``self.ahead``, read by ``next_arrival_for``; called with None when the
        oldest spec read is admitted, it returns that spec's replica, which ``admit`` then takes
        instead of asking the router again); else None. In a shard it files only the shard's own
        specs (its replicas', and the ones rejected before routing in shard 0) and returns False
        for another shard's, which takes its turn and nothing else."""
        if not self.fast_forward or len(self.replicas) == 1 or self.dynamic:
            return None
        ctx = self.model.max_context
        turns = self.route.turns(self.route_state, len(self.entry_pool))  # the picks of every routed request, in order
        self.ahead = per_rep = [deque() for _ in self.replicas]
        filed = deque()  # the replica of each spec in ``upcoming`` (None: rejected before routing)
        sharded = self.shard[1] > 1
        mine = [p.idx in self.own for p in self.entry_pool]
        rejects = not self.shard[0]  # whether this process keeps the requests rejected before routing

        def turn_of(spec) -> int | None | bool:
            if spec is None:  # the oldest spec read is admitted: its turn
                i = filed.popleft()
                if i is not None:
                    per_rep[i].popleft()
                return i
            elif spec.prompt_tokens + spec.output_tokens > ctx:
                if sharded and not rejects:
                    return False
                filed.append(None)  # rejected before routing: takes no turn
            else:
                i = next(turns)
                if sharded and not mine[i]:
                    return False
                filed.append(i)
                per_rep[i].append(spec.arrival_s)
            return None

        return turn_of

    def _arrivals_finished(self):
        """No request will arrive any more (or, after that, the last open request ended): note
        when the last open request ended (dynamic runs) and wake every replica, so idle ones stop."""
        self.arrivals_done = True
        if self.dynamic and not self.by_id:
            self.end_s = self.env.now
        for rep in self.replicas:
            rep.poke()

    def _replica(self, rep: Replica):
        """One replica's simpy process: its loop (``_serve``) until it stops, crashes or is
        released (a crash interrupts it: the step in progress is discarded). The loop yields the
        time it waits for, or None to sleep until ``poke``d, or ``(t,)`` to sleep until poked or
        time ``t`` (the policy's ``wake_at``); it is then sent the time it woke."""
        env, loop = self.env, self._serve(rep)
        try:
            until = next(loop)
            while True:
                if until is None:
                    rep.wake = env.event()
                    yield rep.wake
                    rep.wake = None
                    until = loop.send(env.now)
                elif until.__class__ is tuple:
                    rep.wake = env.event()
                    yield rep.wake | _At(env, until[0])
                    rep.wake = None
                    until = loop.send(env.now)
                else:
                    yield _At(env, until)
                    until = next(loop)
        except (StopIteration, simpy.Interrupt):
            return

    def _serve(self, rep: Replica):
        """One replica's loop: plan, then one step or one fast-forwarded run; sleep when idle.
        ``now`` is the replica's clock: ahead of simpy's (``env.now``) while the replica runs
        ahead. A generator that ``_replica`` runs under simpy: it yields the time it must wait
        for (the arrivals up to then reach its scheduler first), or None to sleep until a request
        reaches it, or ``(t,)`` to sleep until then or time ``t``, when every request it holds
        waits for the policy's ``wake_at`` time ``t`` (it is sent the time it woke)."""
        env, sched = self.env, rep.scheduler
        idle_plans = 0  # plans in a row that computed nothing
        now = env.now
        while True:
            if self.fast_forward:  # the plan a policy knows without planning: every running request decodes
                reqs = sched.decode_batch()
                if reqs is not None:
                    end = yield from self._run(rep, reqs, now)
                    if end is not None:
                        now = end
                        continue
            plan = sched.schedule(now)
            if plan.empty:
                moved, wake = self._empty(sched, plan, now)  # (moved: plan again)
                if sched.has_work():
                    if wake is not None and wake > now:  # the policy holds them until then
                        if now > env.now:
                            yield now
                        now = yield (wake,)
                        continue
                    idle_plans += 1
                    if not moved or idle_plans > 2:  # no progress: stuck requests become counted aborts
                        for r, reason in sched.drop_stuck():
                            self._reject(r, reason)
                    continue
                if now > env.now:  # ran ahead: the clock catches up before the replica idles
                    yield now
                if self.arrivals_done \
                        and not (self.disagg and self.disagg.upstream_busy(rep)) \
                        and not (self.dynamic and self.by_id):  # a crash may re-queue requests here
                    return
                now = yield None  # asleep until a request reaches it
                continue
            idle_plans = 0
            reqs = steady_decode(sched, plan, self.by_id) if self.fast_forward else None
            if reqs is not None:  # (the plan allocated the first step's blocks: the run has steps)
                now = yield from self._run(rep, reqs, now)
            elif self.through_finishes and enters(sched, plan, self.by_id, now):  # decode runs that admit
                now = yield from Flow(rep, now).run(plan)
            else:
                now = yield from self._step(rep, plan, now)

    def _group(self, ranks: list[Replica]):
        """The simpy process of one expert group of ``dp`` attention ranks (``parallelism.dp``):
        every step, each rank's scheduler plans its own batch; the ranks' steps are one
        synchronised step (``sim.cost.expert_parallel.dp_step_time``: the slowest rank's own part,
        then the routed experts and the exchange for the whole group's tokens; a rank with
        nothing to do runs a dummy batch, as vLLM does), and each rank completes its batch at its
        end. The fast path (``sim.grouprun``): a rank that only decodes takes the steps in a decode
        run, without planning, and catches up when the run ends. The group sleeps when no rank
        has work."""
        from sim.cost.expert_parallel import dp_step
        from sim.grouprun import DECODES, GroupRuns

        env, by_id = self.env, self.by_id
        cost = ranks[0].cost
        idle = BatchShape((), (), 0, 0, ranks[0].tp, ranks[0].pp)  # a rank with nothing to do (a dummy batch)
        idle_plans = 0
        runs = GroupRuns(ranks) if self.group_runs and GroupRuns.usable(cost) else None
        while True:
            now = env.now
            plans, shapes, held, moved_any = [], [], [], False
            for i, rep in enumerate(ranks):
                sched = rep.scheduler
                if runs is not None and runs.takes(i, now):  # its decode run takes the step
                    plans.append(DECODES)
                    shapes.append(None)
                    continue
                if not sched.waiting and not sched.running:  # (planning would give nothing)
                    plans.append(None)
                    shapes.append(idle)
                    continue
                plan = sched.schedule(now)
                if plan.empty:
                    moved, wake = self._empty(sched, plan, now)
                    moved_any = moved_any or moved
                    if sched.has_work():
                        held.append((rep, wake))
                    plans.append(None)
                    shapes.append(idle)
                    continue
                plans.append(plan)
                shapes.append(self._commit(plan, now, rep))
            if not any(p is not None for p in plans):
                if held:
                    wakes = [w for _, w in held if w is not None and w > now]
                    if len(wakes) == len(held):  # every rank's requests wait for their policy's time
                        yield self._sleep(ranks, min(wakes))
                        continue
                    idle_plans += 1
                    if not moved_any or idle_plans > 2:  # no progress: stuck requests become counted aborts
                        for rep, w in held:
                            if w is None or w <= now:
                                for r, reason in rep.scheduler.drop_stuck():
                                    self._reject(r, reason)
                    continue
                if self.arrivals_done and not (self.disagg and any(self.disagg.upstream_busy(r) for r in ranks)):
                    return  # (no faults: nothing can reach it any more)
                yield self._sleep(ranks, None)
                continue
            idle_plans = 0
            accepted = [None] * len(ranks)
            if self.drafter is not None:  # each rank's decodes verify their drafts (``_verify``)
                def drafts(i, st):
                    st, accepted[i] = self._verify(plans[i], st, ranks[i].cost)
                    return st
                total, owns = dp_step(cost, shapes, drafts)
            elif runs is not None:
                total, owns = dp_step(cost, shapes, None, runs.own)
                runs.step(now, total)
            else:
                total, owns = dp_step(cost, shapes)
            end = now + total
            yield _At(env, end)
            for i, (rep, plan, shape, own, acc) in enumerate(zip(ranks, plans, shapes, owns, accepted)):
                if plan is None:
                    continue
                if plan is DECODES:
                    runs.done(i, end)
                    continue
                if self.plans is not None:
                    self.plans.append((rep.idx, now, tuple(plan.num_new_tokens), shape))
                # the rank's own components; the group's routed experts, the exchange and the wait
                # for the slowest rank are the rest of the step (booked as gemm: mostly experts)
                st = StepTime(total, own.gemm + (total - own.total), own.attn_prefill, own.attn_decode, own.comm,
                              own.other_gpu, own.cpu, own.swap, own.source, own.out_of_range)
                prefill, decode, changed = lifecycle.complete_step(plan, by_id, now, end, self.itl, acc)
                if changed:
                    self._changed(rep, changed, end)
                self.steps.add(rep.idx, now, st, len(shape.new_tokens), prefill, decode, len(plan.preempted),
                               rep.kv.num_used, len(rep.scheduler.waiting))

    def _sleep(self, ranks: list[Replica], until: float | None):
        """The event an idle group waits on: a request reaching any of its ranks (each rank's
        ``wake``), or time ``until``."""
        ev = self.env.event()
        for rep in ranks:
            rep.wake = ev
        if until is None:
            return ev
        return ev | _At(self.env, until)

    def run(self) -> SimOutput:
        """Start the processes (arrivals or clients, the replicas, faults and autoscaling), run
        simpy's loop until nothing is left to happen, and gather the output."""
        self.env.process(self.clients.run() if self.clients else self._arrivals())
        i = 0
        while i < len(self.replicas):  # pool by pool: one process per replica, or per expert group
            dp = self.replicas[i].pool.dp
            if dp > 1:  # stepping its ranks together
                self.env.process(self._group(self.replicas[i:i + dp]))
            elif i in self.own:
                self.replicas[i].proc = self.env.process(self._replica(self.replicas[i]))
            i += dp
        self.dynamics.start()
        self.env.run()
        end = self.env.now if self.end_s is None else self.end_s  # timers past the last request do not count
        self.dynamics.lose_parked()
        for r in sorted(self.by_id.values(), key=lambda r: r.order):  # unfinished: rows too
            self.requests.add(r, r.order)
        if self.sink is not None:
            self.requests.flush()
            self.sink.close()
        return output(self, end)


class _At(simpy.events.Timeout):
    """A timeout that fires at the absolute time ``at``. simpy adds a delay to its clock, and
    ``now + delay`` cannot land on every float: a decode run must end exactly where the same
    steps taken one by one would, and an arrival lands at its own time. ``priority``: simpy's
    NORMAL, or URGENT for an arrival, which comes before the other events at its time (a step
    that ends when a request arrives is followed by a plan that sees it). (Schedules the way
    simpy 4's ``Environment.schedule`` does.)"""

    def __init__(self, env: simpy.Environment, at: float, priority: int = simpy.core.NORMAL):
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = at - env.now
        self._ok = True
        heapq.heappush(env._queue, (at, priority, next(env._eid), self))


def output(eng: Engine, end: float) -> SimOutput:
    """What ``eng`` produced, its run having ended at ``end``."""
    cfg, cost = eng.cfg, eng.cost
    return SimOutput(
        config=cfg, requests=eng.requests, steps=eng.steps, itl=eng.itl, memory=eng.mem.as_dict(),
        num_gpus=sum(p.replicas * p.gpus_per_replica for p in eng.pools), simulated_s=end,
        workload_info=dict(eng.workload.info), cost_source=cost.source,
        cost_params={"source": cost.params_source, **cost.p.as_dict()},
        out_of_range=sum(c.out_of_range_total() for _, _, c in eng.parts.values()),
        kv_blocks_per_replica=eng.mem.num_gpu_blocks,
        cost_info=cost.describe() if hasattr(cost, "describe") else None,  # (None: the source and params)
        warnings=eng.warnings + clip_warnings(eng.workload.info, cfg, eng.admitted),
        faults=eng.dynamics.log.summary(eng.faults, end) if cfg.faults.events else None,
        fleet=eng.dynamics.fleet, speculative=eng.drafter.summary() if eng.drafter is not None else None,
        pools=pools_output(eng) if cfg.cluster.pools else None,
        kv_tiers=tier_block(cfg, eng.mem.block_bytes, eng.tiers))


def fast_forward_exact(cfg: Config, route) -> bool:
    """Whether decode fast-forward gives exactly the steps taken one by one for ``cfg``. It needs
    the next arrival time (open loop: the read-ahead; closed loop: the clients' pending ramp-up
    and think timeouts, since a client waiting on its response can only send after a run, which
    ends at a completion) and, with several replicas, a router whose turns are known in advance;
    no disaggregation; and in a closed loop a single replica (a completion on one replica lets a
    client send to another in the middle of that one's run)."""
    return ((cfg.cluster.replicas == 1 or route.turns is not None) and not cfg.cluster.disaggregated
            and (cfg.workload.closed_loop is None or cfg.cluster.replicas == 1))


def prefix_caching_warnings(cfg: Config) -> list[str]:
    """The warning for prefix caching with a scheduler that never uses its hits (else none)."""
    if not cfg.kv.prefix_caching or REGISTRY[cfg.scheduler.name].uses_prefix_hits:
        return []
    users = ", ".join(sorted(n for n, c in REGISTRY.items() if c.uses_prefix_hits))
    return [f"kv.prefix_caching is on but scheduler {cfg.scheduler.name!r} never uses prefix-cache "
            f"hits (blocks are cached, no prefill is skipped); schedulers that use them: {users}"]


def clip_warnings(info: dict, cfg: Config, arrived: int) -> list[str]:
    """One line per kind of clipping the workload did (``info["clipped"]``, ``clipped_to_context``).
    Every clipped request is counted in the summary; a lognormal's bounds are its documented
    truncation, so its clipping warns only past 1% of the requests (the default conversation
    lognormals clip about 0.3% of the outputs at 2,048 tokens)."""
    out = []
    for side in ("prompt", "output"):
        n = (info.get("clipped") or {}).get(side)
        d = getattr(cfg.workload, side)
        truncation = bool(cfg.workload.tenants) or d.kind == "lognormal"  # (tenants: each its own; the 1% rule)
        if n and (not truncation or n > 0.01 * arrived):
            where = (f"workload.{side}'s bounds [{d.min}, {d.max}]" if not cfg.workload.tenants
                     else f"the bounds [min, max] of its tenant's {side} distribution")
            hint = (f"; its fixed value {d.value} lies outside them (set workload.{side}.min / max to include it)"
                    if not cfg.workload.tenants and d.kind == "fixed" else "")
            out.append(f"{n:,} of {arrived:,} request(s) had their {side} length clipped to {where}{hint}")
        n = (info.get("clipped_to_context") or {}).get(side)
        if n:
            kept = "; outputs are kept, prompts shortened" if side == "prompt" else ""
            out.append(f"{n:,} of {arrived:,} request(s) had their {side} length clipped to {cfg.model}'s context "
                       f"(workload.clip_to_context{kept})")
    return out
