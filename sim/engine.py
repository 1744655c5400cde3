"""The event engine: the only module that imports simpy, the only orchestrator, the owner of
simulated time (DESIGN.md section 2).

One arrival process feeds a router; each replica runs one loop (``Engine._replica``) that asks
its scheduler for a ``StepPlan``, prices the step's ``BatchShape`` with the cost model, advances
time by the step and applies the results. Request state changes only through ``sim.lifecycle``,
called at the engine's named points (``admit``, ``_step``, ``_run``). Events are per step, never
per token. Where the pieces live: docs/architecture.md.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim import lifecycle
from sim.catalog import get_hardware, get_model
from sim.cluster import ROUTERS, ReplicaLoad
from sim.cluster.disagg import Disaggregation
from sim.config import Config
from sim.cost import make_cost_model
from sim.cost.memory import memory_for_config
from sim.fastforward import decode_run, steady_decode
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


class Replica:
    """One model replica: its scheduler, KV manager and cost model, and the event its loop
    sleeps on when it has nothing to do."""

    def __init__(self, idx: int, scheduler, kv: KVManager, cost):
        self.idx, self.scheduler, self.kv, self.cost = idx, scheduler, kv, cost
        self.wake: simpy.Event | None = None
        self.role = "both"  # or "prefill" / "decode" under disaggregation

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
        sched_cls = REGISTRY[cfg.scheduler.name]
        self.replicas = []
        for i in range(cfg.cluster.replicas):
            kv = make_kv_manager(cfg.kv, self.mem.num_gpu_blocks, self.mem.block_bytes)
            rng = np.random.default_rng([cfg.seed, 1, i])  # the policy's own stream (predictors)
            self.replicas.append(Replica(i, sched_cls(knobs, kv, rng=rng, max_context=self.model.max_context), kv, self.cost))
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
                             and (cfg.cluster.replicas == 1 or self.route.turns is not None) and self.disagg is None)
        self.client_wakes: dict[int, float] = {}  # closed loop: client -> time its pending timeout ends
        self.upcoming: deque = deque()  # arrivals read ahead of time (open loop)
        self.env = simpy.Environment()
        self.arrivals_done = False
        self.done_events: dict[int, simpy.Event] = {}  # closed-loop clients wait on these
        self.progress = progress

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
        pool = self.entry_pool
        loads = [ReplicaLoad(len(r.scheduler.waiting), len(r.scheduler.running), r.kv.num_used / r.kv.num_blocks)
                 for r in pool] if self.route.reads_load else pool
        rep = pool[self.route(spec, loads, self.route_state)]
        if rep.idx not in self.own:
            return
        req = self._new(spec, order)
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

    def _done(self, req: Request) -> None:
        """``req`` finished or was rejected: its row is written and its object dropped; wake its
        closed-loop client, count progress."""
        self.requests.add(req, req.order)
        del self.by_id[req.id]
        if self.done_events:
            ev = self.done_events.pop(req.id, None)
            if ev is not None:
                ev.succeed()
                self.client_wakes[ev.client] = self.env.now  # it sends again at now + think, at the earliest
        if self.progress is not None:
            self.progress.update(1)

    # ------------------------------------------------------------------ one step / one run
    def _step(self, rep: Replica, plan, start: float):
        """Commit ``plan``, wait for its step, complete it (a generator the loop yields from)."""
        ctx = lifecycle.commit(plan, self.by_id, start)
        shape = BatchShape(tuple(plan.num_new_tokens.values()), tuple(ctx), plan.blocks_swapped_in,
                           plan.blocks_swapped_out, self.cfg.parallelism.tp, self.cfg.parallelism.pp)
        st = rep.cost.step_time(shape)
        if self.plans is not None:
            self.plans.append((rep.idx, start, tuple(plan.num_new_tokens), shape))
        yield self.env.timeout(st.total)
        now = self.env.now
        prefill, decode, changed = lifecycle.complete_step(plan, self.by_id, start, now, self.itl)
        for r in changed:  # finished, or got its first token
            if r.finish_s is not None:
                self._leave(rep, r)
            elif rep.role == "prefill":
                self.env.process(self._transfer(r, self.disagg.hand_off(rep, r)))
        self.steps.add(rep.idx, start, st, len(shape.new_tokens), prefill, decode, len(plan.preempted),
                       rep.kv.num_used, len(rep.scheduler.waiting))

    def _run(self, rep: Replica, plan, start: float):
        """Decode fast-forward from a steady decode ``plan`` (a generator the loop yields from)."""
        lifecycle.commit(plan, self.by_id, start)
        reqs = [self.by_id[rid] for rid in plan.num_new_tokens]
        run = decode_run(reqs, rep.kv, rep.cost, start, self.next_arrival_for(rep), self.steps.keep_rows)
        waiting = len(rep.scheduler.waiting)  # arrivals can land only in the run's last step
        yield _At(self.env, run.times[-1])
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
        dst = self.disagg.land(r)
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
        if len(self.replicas) == 1:
            return up[0].arrival_s
        ctx = self.model.max_context
        turns = self.route.turns(self.route_state, len(self.entry_pool))
        for spec in up:
            if spec.prompt_tokens + spec.output_tokens > ctx:
                continue  # rejected before routing: takes no turn
            if next(turns) == rep.idx:
                return spec.arrival_s
        return up[-1].arrival_s  # beyond the read-ahead: not before the last one read

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
        ramp = wl.closed_loop.ramp_up_s * c / wl.closed_loop.clients
        if ramp > 0:
            wakes[c] = env.now + ramp
            yield env.timeout(ramp)
            del wakes[c]
        for think, prompt, output in client_draws(wl, self.cfg.seed, c):
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
        for rep in self.replicas:
            rep.poke()

    def _replica(self, rep: Replica):
        """One replica's loop: plan, then one step or one fast-forwarded run; sleep when idle."""
        env, sched = self.env, rep.scheduler
        while True:
            plan = sched.schedule(env.now)
            if plan.empty:
                if sched.has_work():
                    raise RuntimeError(f"scheduler {sched.name!r} made no progress with "
                                       f"{len(sched.waiting)} waiting and {len(sched.running)} running requests")
                if self.arrivals_done and not (self.disagg and self.disagg.upstream_busy(rep)):
                    return
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
            elif self.fast_forward and steady_decode(sched, plan, self.by_id):
                yield from self._run(rep, plan, env.now)
            else:
                yield from self._step(rep, plan, env.now)

    def run(self) -> SimOutput:
        self.env.process(self._clients() if self.cfg.workload.closed_loop else self._arrivals())
        for rep in self.replicas:
            if rep.idx in self.own:
                self.env.process(self._replica(rep))
        self.env.run()
        for r in sorted(self.by_id.values(), key=lambda r: r.order):  # unfinished: rows too
            self.requests.add(r, r.order)
        if self.sink is not None:
            self.requests.flush()
            self.sink.close()
        cfg = self.cfg
        return SimOutput(
            config=cfg, requests=self.requests, steps=self.steps, itl=self.itl, memory=self.mem.as_dict(),
            num_gpus=cfg.cluster.replicas * cfg.parallelism.tp * cfg.parallelism.pp, simulated_s=self.env.now,
            workload_info=dict(self.workload.info), cost_source=self.cost.source,
            cost_params={"source": self.cost.params_source, **self.cost.p.as_dict()},
            out_of_range=self.cost.out_of_range_total(), kv_blocks_per_replica=self.mem.num_gpu_blocks,
            cost_info=self.cost.describe() if hasattr(self.cost, "describe") else None)


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
