"""The event engine: the only module that imports simpy, the only orchestrator, the owner of
simulated time (DESIGN.md section 2).

One arrival process feeds a router; each replica runs one loop (``Engine._replica``) that asks
its scheduler for a ``StepPlan``, prices the step's ``BatchShape`` with the cost model, advances
time by the step and applies the results. Request state changes only through ``sim.lifecycle``,
called at the engine's named points (``admit``, ``_step``, ``_run``). Events are per step, never
per token. Where the pieces live: docs/architecture.md.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from sim import lifecycle
from sim.catalog import get_hardware, get_model
from sim.cluster import ROUTERS, ReplicaLoad
from sim.cluster.autoscale import FleetLog, decide
from sim.cluster.disagg import Disaggregation
from sim.cluster.faults import FaultLog, FaultSchedule, ScaledCost
from sim.config import Config
from sim.cost import make_cost_model
from sim.cost.memory import memory_for_config
from sim.fastforward import decode_run, run_prefix, steady_decode
from sim.kv import KVManager, make_kv_manager
from sim.metrics.requestlog import RequestLog
from sim.metrics.records import ParquetSink
from sim.metrics.steplog import ItlLog, ItlSketch, StepLog
from sim.request import Request
from sim.scheduler import REGISTRY
from sim.types import BatchShape
from sim.workload import build_workload


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
    fleet: FleetLog | None = None  # provisioning record (autoscaling only)
    warnings: list = field(default_factory=list)
    """One line per thing the user should know about this run (``ServesimWarning``)."""


class Replica:
    """One model replica: its scheduler, KV manager and cost model, and the event its loop
    sleeps on when it has nothing to do."""

    def __init__(self, idx: int, scheduler, kv: KVManager, cost):
        self.idx, self.scheduler, self.kv, self.cost = idx, scheduler, kv, cost
        self.wake: simpy.Event | None = None
        self.role = "both"  # or "prefill" / "decode" under disaggregation
        self.up = True  # serving (False while crashed, warming up or retired)
        self.retired = False  # released by the autoscaler
        self.proc = None  # its simpy process
        self.lives = 0  # restarts and cold starts so far (seeds its next scheduler)
        self.run: tuple | None = None  # (decode run, waiting at its start) while one is in flight

    def poke(self) -> None:
        """Wake the replica's loop if it sleeps."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()


class Engine:
    """Wiring (``__init__``) and the event loop (``_arrivals`` / ``_clients`` feed ``admit``;
    one ``_replica`` loop per replica).

    How one step flows, in ``_replica``:

    1. ``scheduler.schedule(now)`` -> ``StepPlan`` (the policy; it may call its KV manager);
    2. ``_step``: ``lifecycle.commit`` applies preemptions and marks the plan's requests
       scheduled, giving the ``BatchShape``; ``cost.step_time`` prices it; the loop waits that
       long; ``lifecycle.complete_step`` emits tokens; finished requests leave their scheduler
       (``_leave``), and under disaggregation first-token requests move to a decode replica;
    3. ``steps.add`` records the row.

    Fast-forward replaces 2-3 when ``fastforward.steady_decode`` holds: ``_run`` prices the whole
    run of identical decode steps (``fastforward.decode_run``), waits once for its end, and
    applies it with ``lifecycle.complete_run``.

    Faults and autoscaling (docs/faults.md) change the pool over time: ``_faults`` applies
    scheduled crashes (``crash``: the replica's process is interrupted, its requests re-queued
    through ``_dispatch`` or lost) and restarts (``restart``); ``_autoscale`` adds replicas after
    a cold start and releases idle ones; ``_cost`` prices a step of a slowed replica. The pure
    parts (the schedule, the factors, the scaling decision) live in ``sim/cluster/faults.py`` and
    ``sim/cluster/autoscale.py``.
    """

    def __init__(self, cfg: Config, progress=None, record_plans: bool = False, stream_to=None,
                 shard: tuple[int, int] = (0, 1)):
        self.cfg = cfg
        # shard (w, n): this process simulates replicas i with i % n == w (see ``run_engine``)
        self.shard = shard
        self.own = {i for i in range(cfg.cluster.replicas) if i % shard[1] == shard[0]}
        # record_plans: keep each step's (replica, start_s, request ids, BatchShape) in
        # ``self.plans`` (the real replay of calibration/ executes them); off by default.
        self.plans: list | None = [] if record_plans else None
        self.model = get_model(cfg.model)
        self.hw = get_hardware(cfg.hardware)
        knobs = cfg.scheduler.knobs()
        tp, pp = cfg.parallelism.tp, cfg.parallelism.pp
        kv_dtype = cfg.kv_dtype
        self.mem = memory_for_config(cfg, self.model, self.hw)
        self.cost = make_cost_model(cfg, self.model, self.hw)
        self.sched_cls, self.knobs = REGISTRY[cfg.scheduler.name], knobs
        sched_cls = self.sched_cls
        self.warnings: list[str] = []
        if cfg.kv.prefix_caching and not sched_cls.uses_prefix_hits:
            users = ", ".join(sorted(n for n, c in REGISTRY.items() if c.uses_prefix_hits))
            self.warnings.append(f"kv.prefix_caching is on but scheduler {cfg.scheduler.name!r} never uses prefix-cache "
                                 f"hits (blocks are cached, no prefill is skipped); schedulers that use them: {users}")
        self.replicas = [self._new_replica(i) for i in range(cfg.cluster.replicas)]
        npre = cfg.cluster.prefill_replicas
        self.disagg: Disaggregation | None = None
        if npre:
            bw = cfg.cluster.kv_transfer_gbps * 1e9 if cfg.cluster.kv_transfer_gbps else self.hw.host_bw * tp * pp
            self.disagg = Disaggregation(self.replicas, npre, bw, self.model.kv_bytes_per_token(kv_dtype))
        self.entry_pool = self.disagg.entry_pool if self.disagg else self.replicas  # where arrivals go
        self.route = ROUTERS[cfg.cluster.router]
        self.route_state: dict = {"rng": np.random.default_rng([cfg.seed, 3])}  # the router's own stream
        self.rng = np.random.default_rng(cfg.seed)
        self.workload = build_workload(cfg.workload, max_context=self.model.max_context, rng=self.rng)
        # rows of the requests that left; with output.stream they go to ``stream_to`` in chunks
        self.sink = ParquetSink(stream_to) if stream_to is not None else None
        self.requests = RequestLog(self.sink, cfg.output.stream_chunk_rows)
        self.by_id: dict[int, Request] = {}  # the requests in flight
        self.admitted = 0
        self.steps = StepLog(keep_rows=cfg.output.step_records)
        self.itl = ItlSketch() if self.sink is not None else ItlLog()
        # decode fast-forward: exact, so on by default; needs the next arrival time (open loop:
        # the read-ahead; closed loop: the clients' pending ramp-up and think timeouts, since a
        # client waiting on its response can only send after a run, which ends at a completion)
        # and a router whose turns are known in advance
        self.fast_forward = (cfg.engine.fast_forward and record_plans is False
                             and (cfg.cluster.replicas == 1 or self.route.turns is not None) and self.disagg is None
                             # closed loop: a completion on one replica lets a client send to another
                             # in the middle of that one's run, so only a single replica is exact
                             and (cfg.workload.closed_loop is None or cfg.cluster.replicas == 1))
        self.client_wakes: dict[int, float] = {}  # closed loop: client -> time its pending timeout ends
        self.upcoming: deque = deque()  # arrivals read ahead of time (open loop)
        self.env = simpy.Environment()
        self.arrivals_done = False
        self.done_events: dict[int, simpy.Event] = {}  # closed-loop clients wait on these
        self.progress = progress
        # faults and autoscaling (sim/cluster/faults.py, autoscale.py): the pool changes over time
        self.faults = FaultSchedule(cfg.faults.events)
        self.fault_log = FaultLog(cfg.faults.on_crash)
        auto = cfg.cluster.autoscale
        self.fleet = FleetLog(tp * pp) if auto.enabled else None
        self.dynamic = bool(self.faults.crashes) or auto.enabled
        self.end_s: float | None = None  # when the last open request ended (dynamic runs)
        self.parked: deque = deque()  # requests waiting for any replica to serve
        # crashes re-queue and restarts un-park requests: they end decode runs, as arrivals do
        self._changes = sorted({t for c in self.faults.crashes for t in (c.at_s, c.restart_s)})

    def _new_replica(self, i: int, lives: int = 0) -> Replica:
        """Replica ``i`` with an empty KV pool and a fresh scheduler (its ``lives``-th start)."""
        cfg = self.cfg
        kv = make_kv_manager(cfg.kv, self.mem.num_gpu_blocks, self.mem.block_bytes)
        seed = [cfg.seed, 1, i] + ([lives] if lives else [])  # the policy's own stream (predictors)
        sched = self.sched_cls(self.knobs, kv, rng=np.random.default_rng(seed), max_context=self.model.max_context)
        return Replica(i, sched, kv, self.cost)

    # ------------------------------------------------------------------ admission
    def admit(self, spec) -> None:
        """An arrival: reject it with a reason, or route it to a replica's scheduler. (A shard
        keeps only the requests routed to its replicas, and shard 0 the ones rejected before
        routing.)"""
        ctx = self.model.max_context
        order = self.admitted
        self.admitted += 1
        if spec.max_output_tokens is None:
            spec = replace(spec, max_output_tokens=max(1, ctx - spec.prompt_tokens))
        if spec.prompt_tokens + spec.output_tokens > ctx:
            if self.shard[0]:
                return
            req = self._new(spec, order)
            return self._reject(req, f"exceeds_context: prompt {spec.prompt_tokens} + output {spec.output_tokens} tokens exceed "
                                     f"{self.model.id}'s context of {ctx}")
        rep = self._route(spec)
        if rep is not None and rep.idx not in self.own:
            return
        self._place(self._new(spec, order), rep)

    def _route(self, spec) -> Replica | None:
        """The serving entry replica the router picks for ``spec`` (None: none serves)."""
        pool = [r for r in self.entry_pool if r.up] if self.dynamic else self.entry_pool
        if not pool:
            return None
        loads = [ReplicaLoad(len(r.scheduler.waiting), len(r.scheduler.running), r.kv.num_used / r.kv.num_blocks)
                 for r in pool] if self.route.reads_load else pool
        return pool[self.route(spec, loads, self.route_state) % len(pool)]  # the pool may have shrunk

    def _dispatch(self, req: Request) -> None:
        """Route a re-queued or parked ``req`` again."""
        self._place(req, self._route(req.spec))

    def _place(self, req: Request, rep: Replica | None) -> None:
        """``req`` joins ``rep``'s scheduler, is rejected by it, or (no replica serves) is parked."""
        if rep is None:
            self.parked.append(req)
            return
        req.replica = rep.idx
        reason = rep.scheduler.reject_reason(req)
        if reason:
            return self._reject(req, reason)
        rep.scheduler.add(req)
        rep.poke()

    def _new(self, spec, order: int) -> Request:
        req = Request(spec)
        req.order = order
        self.by_id[req.id] = req
        return req

    def _reject(self, req: Request, reason: str) -> None:
        lifecycle.reject(req, reason)
        self._done(req)

    def _lose(self, req: Request, reason: str) -> None:
        """A fault took ``req``: it ends unserved, with the reason (``code: detail``)."""
        lifecycle.lose(req, reason)
        self.fault_log.lose(reason.split(":")[0])
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
        if self.done_events:
            ev = self.done_events.pop(req.id, None)
            if ev is not None:
                ev.succeed()
                self.client_wakes[ev.client] = self.env.now  # it sends again at now + think, at the earliest
        if self.progress is not None:
            self.progress.update(1)
        if not self.by_id and self.arrivals_done and self.dynamic:
            self._drained()

    # ------------------------------------------------------------------ one step / one run
    def _step(self, rep: Replica, plan, start: float):
        """Commit ``plan``, wait for its step, complete it (a generator the loop yields from)."""
        ctx = lifecycle.commit(plan, self.by_id, start)
        if plan.aborted:
            self._abort(plan)
        shape = BatchShape(tuple(plan.num_new_tokens.values()), tuple(ctx), plan.blocks_swapped_in,
                           plan.blocks_swapped_out, self.cfg.parallelism.tp, self.cfg.parallelism.pp)
        st = self._cost(rep, start).step_time(shape)
        if self.plans is not None:
            self.plans.append((rep.idx, start, tuple(plan.num_new_tokens), shape))
        yield self.env.timeout(st.total)
        now = self.env.now
        prefill, decode, changed = lifecycle.complete_step(plan, self.by_id, start, now, self.itl)
        for r in changed:  # finished, or got its first token
            if r.finish_s is not None:
                self._leave(rep, r)
            elif rep.role == "prefill":
                seconds = self.disagg.hand_off(rep, r)
                if self.faults:  # a degraded link moves the KV at 1/factor of the bandwidth
                    seconds *= self.faults.factors(rep.idx, now)[1]
                self.env.process(self._transfer(r, seconds))
        self.steps.add(rep.idx, start, st, len(shape.new_tokens), prefill, decode, len(plan.preempted),
                       rep.kv.num_used, len(rep.scheduler.waiting))

    def _run(self, rep: Replica, plan, start: float):
        """Decode fast-forward from a steady decode ``plan`` (a generator the loop yields from)."""
        lifecycle.commit(plan, self.by_id, start)
        reqs = [self.by_id[rid] for rid in plan.num_new_tokens]
        arrival = self.next_arrival_for(rep)
        if self.faults:  # a fault's start or end, a crash or a restart, ends the run as an arrival does
            arrival = min(arrival, self.next_fault_change(rep, start))
        run = decode_run(reqs, rep.kv, self._cost(rep, start), start, arrival, self.steps.keep_rows)
        waiting = len(rep.scheduler.waiting)  # arrivals can land only in the run's last step
        rep.run = (run, waiting)
        yield _At(self.env, run.times[-1])
        rep.run = None
        for r in lifecycle.complete_run(reqs, run.times, run.steps, self.itl):
            self._leave(rep, r)
        self.steps.add_run(rep.idx, run, waiting, len(rep.scheduler.waiting), rep.kv.num_used)

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
            self.fault_log.requeued += 1
            return self._dispatch(r)
        if reason:  # the decode replica could never admit it: aborted, counted
            self._reject(r, reason)
        dst.poke()
        if self.arrivals_done and not self.disagg.upstream_busy(dst):
            for rep in self.replicas:  # idle decode replicas may now stop
                rep.poke()

    def next_arrival_for(self, rep: Replica) -> float:
        """The earliest time a new request can reach ``rep`` (a lower bound): with one replica
        the next arrival; otherwise the router's ``turns`` tell which upcoming arrival is this
        replica's."""
        if self.cfg.workload.closed_loop is not None:  # any replica: a lower bound
            return min(self.client_wakes.values(), default=float("inf"))
        up = self.upcoming
        if not up:
            return float("inf")
        if len(self.replicas) == 1 or self.dynamic:  # a changing pool: any arrival may come here
            return up[0].arrival_s
        ctx = self.model.max_context
        turns = self.route.turns(self.route_state, len(self.entry_pool))
        for spec in up:
            if spec.prompt_tokens + spec.output_tokens > ctx:
                continue  # rejected before routing: takes no turn
            if next(turns) == rep.idx:
                return spec.arrival_s
        return up[-1].arrival_s  # beyond the read-ahead: not before the last one read

    def _cost(self, rep: Replica, start: float):
        """The cost model for a step of ``rep`` starting at ``start``: slowed by the faults
        active then (the cost model still sees only the BatchShape)."""
        if not self.faults:
            return rep.cost
        compute, link = self.faults.factors(rep.idx, start)
        return rep.cost if compute == 1.0 and link == 1.0 else ScaledCost(rep.cost, compute, link)

    def next_fault_change(self, rep: Replica, t: float) -> float:
        """The first time after ``t`` at which a fault changes ``rep``'s step prices or can
        send it requests (a crash re-queues, a restart un-parks)."""
        edge = self.faults.next_edge(rep.idx, t)
        i = bisect.bisect_right(self._changes, t)
        return min(edge, self._changes[i]) if i < len(self._changes) else edge

    # ------------------------------------------------------------------ processes
    def _arrivals(self):
        env = self.env
        it = iter(self.workload)
        ahead = 2 * len(self.replicas)  # specs read ahead, so a replica can know its next arrival
        up = self.upcoming
        while True:
            while len(up) < ahead:
                spec = next(it, None)
                if spec is None:
                    break
                up.append(spec)
            if not up:
                break
            spec = up[0]
            delay = spec.arrival_s - env.now
            if delay > 0:
                yield env.timeout(delay)
            up.popleft()
            self.admit(spec)
        self._arrivals_finished()

    def _client(self, c: int, budget: list[int]):
        """One closed-loop client: think, send, wait for the response, repeat while the shared
        request budget lasts (``budget[0]`` requests left; None = until ``duration_s``)."""
        from sim.types import RequestSpec
        from sim.workload.closed_loop import client_draws

        env, wl, wakes = self.env, self.cfg.workload, self.client_wakes
        clipped = self.workload.info.setdefault("clipped", {"prompt": 0, "output": 0})
        ramp = wl.closed_loop.ramp_up_s * c / wl.closed_loop.clients
        if ramp > 0:
            wakes[c] = env.now + ramp
            yield env.timeout(ramp)
            del wakes[c]
        for think, prompt, output, p_clip, o_clip in client_draws(wl, self.cfg.seed, c):
            if think > 0:
                wakes[c] = env.now + think
                yield env.timeout(think)
                del wakes[c]
            if wl.duration_s is not None and env.now > wl.duration_s:
                return
            if budget[0] is not None:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            clipped["prompt"] += p_clip
            clipped["output"] += o_clip
            rid = self.admitted
            done = self.done_events[rid] = env.event()
            done.client = c
            self.admit(RequestSpec(id=rid, arrival_s=env.now, prompt_tokens=prompt, output_tokens=output,
                                   session_id=f"client-{c}"))
            yield done
            wakes.pop(c, None)

    def _clients(self):
        cl = self.cfg.workload.closed_loop
        budget = [self.cfg.workload.num_requests]
        yield simpy.AllOf(self.env, [self.env.process(self._client(c, budget)) for c in range(cl.clients)])
        self.workload.info["source"] = f"closed loop: {cl.clients} clients, think {cl.think} mean {cl.think_time_s} s"
        self._arrivals_finished()

    def _arrivals_finished(self):
        self.arrivals_done = True
        if self.dynamic and not self.by_id:
            self.end_s = self.env.now
        for rep in self.replicas:
            rep.poke()

    def _drained(self) -> None:
        """The last open request ended after the last arrival: replicas may stop."""
        self.end_s = self.env.now
        for rep in self.replicas:
            rep.poke()

    # ------------------------------------------------------------------ faults and autoscaling
    def crash(self, rep: Replica, now: float) -> bool:
        """Replica ``rep`` fails at ``now``: its step in progress is discarded (the steps of a
        decode run that ended before stand) and the requests it held are re-queued through the
        router or lost (``faults.on_crash``); False if it was not serving."""
        if not rep.up:
            self.fault_log.skipped += 1
            return False
        rep.up = False
        self.fault_log.applied.append((now, "crash", rep.idx))
        if rep.run is not None:  # a decode run in flight: the steps that ended before the crash count
            run, waiting = rep.run
            rep.run = None
            k = bisect.bisect_right(run.times, now) - 1
            if k > 0:
                part = run_prefix(run, k)
                for r in lifecycle.complete_run(part.reqs, part.times, k, self.itl):
                    self._leave(rep, r)
                self.steps.add_run(rep.idx, part, waiting, waiting, part.used[-1])
        if rep.proc is not None and rep.proc.is_alive:
            rep.proc.interrupt("crash")
        rep.wake = None
        held = list(rep.scheduler.running) + list(rep.scheduler.waiting)
        rep.scheduler.running.clear()
        rep.scheduler.waiting.clear()
        self._record_fleet(now)
        for r in held:
            lifecycle.crash_requeue(r)  # the KV died with the replica; emitted tokens stay emitted
            if self.cfg.faults.on_crash == "lose":
                self._lose(r, f"replica_crash: replica {rep.idx} failed at {now:g} s")
            else:
                self.fault_log.requeued += 1
                self._dispatch(r)
        return True

    def restart(self, rep: Replica, now: float, event: str = "restart") -> None:
        """``rep`` serves again (after a crash or a cold start) with an empty KV pool and a fresh
        scheduler; requests parked while no replica served are dispatched."""
        fresh = self._new_replica(rep.idx, rep.lives + 1)
        rep.scheduler, rep.kv, rep.lives, rep.up = fresh.scheduler, fresh.kv, rep.lives + 1, True
        if event == "restart":
            self.fault_log.applied.append((now, event, rep.idx))
        rep.proc = self.env.process(self._replica(rep))
        self._record_fleet(now)
        parked, self.parked = self.parked, deque()
        for r in parked:
            self._dispatch(r)

    def _faults(self):
        """Apply the scheduled crashes and restarts at their times."""
        env = self.env
        todo = [(c.at_s, 1, c.replica, c.restart_s) for c in self.faults.crashes]
        heapq.heapify(todo)
        while todo:
            t, kind, idx, restart_s = heapq.heappop(todo)
            if t > env.now:
                yield env.timeout(t - env.now)
            if self.end_s is not None:
                return
            rep = self.replicas[idx]
            if kind == 1:
                if self.crash(rep, env.now):
                    heapq.heappush(todo, (restart_s, 0, idx, restart_s))
            elif not rep.retired:
                self.restart(rep, env.now)

    def _autoscale(self):
        """Every ``interval_s``: size the fleet (sim/cluster/autoscale.py); new replicas serve
        after the cold start; idle ones are released."""
        env, a = self.env, self.cfg.cluster.autoscale
        while True:
            yield env.timeout(a.interval_s)
            if self.end_s is not None:
                return
            live = [r for r in self.replicas if not r.retired]
            idle = [r.idx for r in live if r.up and not r.scheduler.has_work()]
            add, remove = decide(len(self.by_id), len(live), idle, a)
            for idx in remove:
                rep = self.replicas[idx]
                rep.retired, rep.up = True, False
                self.fleet.released[idx] = env.now
                if rep.proc is not None and rep.proc.is_alive:
                    rep.proc.interrupt("retired")
            for _ in range(add):
                rep = self._new_replica(len(self.replicas))
                rep.up = False
                self.replicas.append(rep)  # also the entry pool: autoscaling excludes disaggregation
                self.own.add(rep.idx)
                self.fleet.provisioned[rep.idx] = env.now
                env.process(self._cold_start(rep, a.cold_start_s))
            if add or remove:
                self._record_fleet(env.now)

    def _cold_start(self, rep: Replica, seconds: float):
        yield self.env.timeout(seconds)
        if self.end_s is None:
            self.restart(rep, self.env.now, event="cold_start")

    def _record_fleet(self, now: float) -> None:
        if self.fleet is not None:
            live = [r for r in self.replicas if not r.retired]
            self.fleet.record(now, len(live), sum(r.up for r in live))

    def _replica(self, rep: Replica):
        """One replica's process: its loop, until it stops, crashes or is released (a crash
        interrupts it: the step in progress is discarded)."""
        try:
            yield from self._serve(rep)
        except simpy.Interrupt:
            return

    def _serve(self, rep: Replica):
        """One replica's loop: plan, then one step or one fast-forwarded run; sleep when idle."""
        env, sched = self.env, rep.scheduler
        idle_plans = 0  # plans in a row that computed nothing
        while True:
            plan = sched.schedule(env.now)
            if plan.empty:
                moved = bool(plan.preempted or plan.aborted)
                if moved:  # preemptions or aborts without a step: apply them, plan again
                    lifecycle.commit(plan, self.by_id, env.now)
                    self._abort(plan)
                if sched.has_work():
                    idle_plans += 1
                    if not moved or idle_plans > 2:  # no progress: stuck requests become counted aborts
                        for r, reason in sched.drop_stuck():
                            self._reject(r, reason)
                    continue
                if self.arrivals_done and not (self.disagg and self.disagg.upstream_busy(rep)) \
                        and not (self.dynamic and self.by_id):  # a crash may re-queue requests here
                    return
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
                continue
            idle_plans = 0
            if self.fast_forward and steady_decode(sched, plan, self.by_id):
                yield from self._run(rep, plan, env.now)
            else:
                yield from self._step(rep, plan, env.now)

    def run(self) -> SimOutput:
        self.env.process(self._clients() if self.cfg.workload.closed_loop else self._arrivals())
        for rep in self.replicas:
            if rep.idx in self.own:
                rep.proc = self.env.process(self._replica(rep))
        if self.faults.crashes:  # (faults and autoscaling run in one process: sim.shards refuses them)
            self.env.process(self._faults())
        if self.fleet is not None:
            self.fleet.provisioned.update((r.idx, 0.0) for r in self.replicas)
            self._record_fleet(0.0)
            self.env.process(self._autoscale())
        self.env.run()
        end = self.env.now if self.end_s is None else self.end_s  # timers past the last request do not count
        for r in self.parked:  # only when no replica ever served again
            self._lose(r, "no_replica: no replica served after it was parked")
        self.parked.clear()
        for r in sorted(self.by_id.values(), key=lambda r: r.order):  # unfinished: rows too
            self.requests.add(r, r.order)
        if self.sink is not None:
            self.requests.flush()
            self.sink.close()
        cfg = self.cfg
        return SimOutput(
            config=cfg, requests=self.requests, steps=self.steps, itl=self.itl, memory=self.mem.as_dict(),
            num_gpus=cfg.cluster.replicas * cfg.parallelism.tp * cfg.parallelism.pp, simulated_s=end,
            workload_info=dict(self.workload.info), cost_source=self.cost.source,
            cost_params={"source": self.cost.params_source, **self.cost.p.as_dict()},
            out_of_range=self.cost.out_of_range_total(), kv_blocks_per_replica=self.mem.num_gpu_blocks,
            cost_info=self.cost.describe() if hasattr(self.cost, "describe") else None,
            warnings=self.warnings + clip_warnings(self.workload.info, cfg, self.admitted),
            faults=self.fault_log.summary(self.faults, end) if cfg.faults.events else None, fleet=self.fleet)


class _At(simpy.events.Timeout):
    """A timeout that fires at the absolute time ``at``. simpy adds a delay to its clock, and
    ``now + delay`` cannot land on every float: a decode run must end exactly where the same
    steps taken one by one would. (Schedules the way simpy 4's ``Environment.schedule`` does.)"""

    def __init__(self, env: simpy.Environment, at: float):
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = at - env.now
        self._ok = True
        heapq.heappush(env._queue, (at, simpy.core.NORMAL, next(env._eid), self))


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
            out.append(f"{n:,} of {arrived:,} request(s) had their {side} length clipped to {cfg.model}'s context "
                       "(workload.clip_to_context)")
    return out


def run_engine(cfg: Config, progress=None, stream_to=None) -> SimOutput:
    """Build the pipeline for ``cfg`` and run it to completion (``stream_to``: the Parquet file
    request rows are streamed to, with ``output.stream``). With ``engine.workers`` > 1 the
    replicas are shared out over processes (``sim.shards``)."""
    workers = min(cfg.engine.workers, cfg.cluster.replicas)
    if workers > 1:
        from sim.shards import run_sharded

        return run_sharded(cfg, workers, progress)
    return Engine(cfg, progress, stream_to=stream_to).run()


def run_shard(cfg: Config, shard: tuple[int, int]) -> SimOutput:
    """One process's part of a sharded run (no progress bar, no streaming)."""
    return Engine(cfg, shard=shard).run()
