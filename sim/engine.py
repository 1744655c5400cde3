"""The event engine: the only module that imports simpy, the only orchestrator, the owner of
simulated time (DESIGN.md section 2).

One arrival process feeds a router; each replica runs one loop: ask its scheduler for a
``StepPlan``, price the step's ``BatchShape`` with the cost model, advance time by the step,
apply the results. Request state changes only in the named functions ``admit``, ``commit_plan``
and ``complete_step``. Events are per step, never per token.
"""
from __future__ import annotations

import heapq
from array import array
from collections import deque
from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim.catalog import get_hardware, get_model
from sim.cluster import ROUTERS, ReplicaLoad
from sim.config import Config
from sim.cost import make_cost_model
from sim.cost.memory import memory_for_config
from sim.fastforward import VECTOR_RUN, BlockGrower, DecodeRun
from sim.kv import KVManager, make_kv_manager
from sim.metrics.steplog import StepLog
from sim.request import Request, Status
from sim.scheduler import REGISTRY
from sim.types import COMPONENTS, BatchShape, StepPlan
from sim.workload import build_workload


@dataclass
class SimOutput:
    """Everything a run produced, as plain values (records for the metrics stage)."""

    config: Config
    requests: list[Request]
    steps: StepLog
    itl_values: array
    """Distinct inter-token gaps (s) with ``itl_counts`` tokens each: the ITL distribution,
    stored weighted because most gaps of a step are equal."""
    itl_counts: array
    memory: dict
    num_gpus: int
    simulated_s: float
    workload_info: dict
    cost_source: str
    cost_params: dict
    out_of_range: int
    kv_blocks_per_replica: int


class Replica:
    def __init__(self, idx: int, scheduler, kv: KVManager, cost):
        self.idx, self.scheduler, self.kv, self.cost = idx, scheduler, kv, cost
        self.wake: simpy.Event | None = None
        self.role = "both"  # or "prefill" / "decode" under disaggregation


class Engine:
    def __init__(self, cfg: Config, progress=None, record_plans: bool = False):
        self.cfg = cfg
        # record_plans: keep each step's (replica, start_s, request ids, BatchShape) in
        # ``self.plans`` (the real replay of calibration/ executes them); off by default.
        self.plans: list | None = [] if record_plans else None
        self.model = get_model(cfg.model)
        self.hw = get_hardware(cfg.hardware)
        knobs = cfg.scheduler.knobs()
        self.mem = memory_for_config(cfg, self.model, self.hw)
        self.cost = make_cost_model(cfg, self.model, self.hw)
        sched_cls = REGISTRY[cfg.scheduler.name]
        self.replicas = []
        for i in range(cfg.cluster.replicas):
            kv = make_kv_manager(cfg.kv, self.mem.num_gpu_blocks, self.mem.block_bytes)
            rng = np.random.default_rng([cfg.seed, 1, i])  # the policy's own stream (predictors)
            self.replicas.append(Replica(i, sched_cls(knobs, kv, rng=rng, max_context=self.model.max_context), kv, self.cost))
        # prefill/decode disaggregation: arrivals go to the prefill pool; after its first token a
        # request's KV moves to the least loaded decode replica
        npre = cfg.cluster.prefill_replicas
        self.entry_pool = self.replicas[:npre] if npre else self.replicas
        self.decode_pool = self.replicas[npre:] if npre else []
        for rep in self.entry_pool if npre else ():
            rep.role = "prefill"
        for rep in self.decode_pool:
            rep.role = "decode"
        gpus = cfg.parallelism.tp * cfg.parallelism.pp
        self.kv_transfer_bw = (cfg.cluster.kv_transfer_gbps * 1e9 if cfg.cluster.kv_transfer_gbps
                               else self.hw.host_bw * gpus)
        self.in_flight = 0  # KV transfers under way
        self.route = ROUTERS[cfg.cluster.router]
        self.route_state: dict = {"rng": np.random.default_rng([cfg.seed, 3])}  # the router's own stream
        self.rng = np.random.default_rng(cfg.seed)
        self.workload = build_workload(cfg.workload, max_context=self.model.max_context, rng=self.rng)
        self.requests: list[Request] = []
        self.by_id: dict[int, Request] = {}
        self.steps = StepLog(keep_rows=cfg.output.step_records)
        self.itl_values = array("d")
        self.itl_counts = array("q")
        # decode fast-forward: exact, so on by default; needs the next arrival time, which only
        # an open-loop arrival process knows, and a router that reads no replica state
        self.fast_forward = (cfg.engine.fast_forward and record_plans is False and not cfg.workload.closed_loop
                             and (cfg.cluster.replicas == 1 or cfg.cluster.router == "round_robin")
                             and not cfg.cluster.prefill_replicas)
        self.upcoming: deque = deque()  # arrivals read ahead of time (open loop)
        self.env = simpy.Environment()
        self.arrivals_done = False
        self.done_events: dict[int, simpy.Event] = {}  # closed-loop clients wait on these
        self.progress = progress

    # ------------------------------------------------------------------ state changes
    def admit(self, spec) -> None:
        """An arrival: reject it with a reason, or route it to a replica's scheduler."""
        ctx = self.model.max_context
        if spec.max_output_tokens is None:
            spec = replace(spec, max_output_tokens=max(1, ctx - spec.prompt_tokens))
        req = Request(spec)
        self.requests.append(req)
        self.by_id[req.id] = req
        if spec.prompt_tokens + spec.output_tokens > ctx:
            return self._reject(req, f"exceeds_context: prompt {spec.prompt_tokens} + output {spec.output_tokens} tokens exceed "
                                     f"{self.model.id}'s context of {ctx}")
        pool = self.entry_pool
        loads = [ReplicaLoad(len(r.scheduler.waiting), len(r.scheduler.running), r.kv.num_used / r.kv.num_blocks)
                 for r in pool] if self.cfg.cluster.router != "round_robin" else pool
        rep = pool[self.route(spec, loads, self.route_state)]
        req.replica = rep.idx
        reason = rep.scheduler.reject_reason(req)
        if reason:
            return self._reject(req, reason)
        rep.scheduler.add(req)
        if rep.wake is not None and not rep.wake.triggered:
            rep.wake.succeed()

    def _reject(self, req: Request, reason: str) -> None:
        req.status = Status.REJECTED
        req.reject_reason = reason
        self._notify_done(req)
        if self.progress is not None:
            self.progress.update(1)

    def _notify_done(self, req: Request) -> None:
        ev = self.done_events.pop(req.id, None)
        if ev is not None:
            ev.succeed()

    def commit_plan(self, rep: Replica, plan: StepPlan, now: float) -> BatchShape:
        """Apply preemptions and mark scheduled requests; return the step's batch shape."""
        for rid in plan.preempted:
            r = self.by_id[rid]
            r.preemptions += 1
            if rid in plan.swapped_out:  # swap: its KV waits in host memory, progress kept
                r.status = Status.SWAPPED
            else:
                r.num_computed = 0  # recompute: progress resets, generated tokens stay emitted
                r.status = Status.WAITING
        for rid, c in plan.cached_tokens.items():  # prefix-cache hits count as computed
            r = self.by_id[rid]
            r.num_computed = c
            if r.first_scheduled_s is None:
                r.cached_tokens = c
        by_id = self.by_id
        ctx = []
        for rid in plan.num_new_tokens:
            r = by_id[rid]
            if r.status is not Status.RUNNING:
                if r.first_scheduled_s is None:
                    # simpy adds the arrival's delay to the clock: keep an ulp of rounding from
                    # putting the first schedule before the arrival
                    r.first_scheduled_s = max(now, r.spec.arrival_s)
                r.status = Status.RUNNING
            ctx.append(r.num_computed)
        new = plan.num_new_tokens.values()
        return BatchShape(tuple(new), tuple(ctx), plan.blocks_swapped_in, plan.blocks_swapped_out,
                          self.cfg.parallelism.tp, self.cfg.parallelism.pp)

    def complete_step(self, rep: Replica, plan: StepPlan, start: float, now: float) -> tuple[int, int]:
        """Advance every scheduled request; emit tokens; finish requests. Returns (prefill, decode) tokens."""
        prefill = decode = 0
        by_id = self.by_id
        step_gaps = 0  # tokens whose previous token came at this step's start: gap = the step
        step = now - start
        for rid, n in plan.num_new_tokens.items():
            r = by_id[rid]
            c = r.num_computed + n
            r.num_computed = c
            g = r.num_generated
            if n == 1 and g:
                decode += 1
            else:
                prefill += n
            if c < r.prompt_tokens + g:
                continue
            g += 1  # the step computed the last missing token: sample the next output token
            r.num_generated = g
            if r.first_token_s is None:
                r.first_token_s = now
            else:
                gap = now - r.last_token_s
                if r.last_token_s == start:
                    step_gaps += 1
                else:
                    self._itl(gap, 1)
                if gap > r.max_itl_s:
                    r.max_itl_s = gap
            r.last_token_s = now
            if g >= r.output_tokens:
                self._finish(rep, r, now)
            elif rep.role == "prefill":
                self._hand_off(rep, r)
        if step_gaps:
            self._itl(step, step_gaps)
        return prefill, decode

    def _itl(self, gap: float, tokens: int) -> None:
        """Record ``tokens`` inter-token gaps of ``gap`` seconds (the ITL is stored weighted: the
        tokens of a step whose previous token came at the step's start share one gap)."""
        self.itl_values.append(gap)
        self.itl_counts.append(tokens)

    def _finish(self, rep: Replica, r: Request, now: float) -> None:
        r.status = Status.FINISHED
        r.finish_s = now
        rep.scheduler.finish(r)
        if self.done_events:
            self._notify_done(r)
        if self.progress is not None:
            self.progress.update(1)

    def _hand_off(self, rep: Replica, r: Request) -> None:
        """Disaggregation: ``r`` has its first token; its KV leaves the prefill replica and, after
        the transfer, joins the least loaded decode replica with its computed tokens intact."""
        rep.scheduler.finish(r)  # leaves this replica: its blocks return to the pool
        r.status = Status.WAITING
        self.in_flight += 1
        nbytes = r.num_computed * self.model.kv_bytes_per_token(self.cfg.kv.dtype or self.cfg.dtype)
        self.env.process(self._transfer(r, nbytes / self.kv_transfer_bw))

    def _transfer(self, r: Request, seconds: float):
        yield self.env.timeout(seconds)
        self.in_flight -= 1
        dst = min(self.decode_pool, key=lambda d: (len(d.scheduler.waiting) + len(d.scheduler.running), d.idx))
        r.replica = dst.idx
        dst.scheduler.add(r)
        done = self.arrivals_done and not self._upstream_busy(dst)
        for rep in [dst] + (self.replicas if done else []):  # idle decode replicas may now stop
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()

    def _upstream_busy(self, rep: Replica) -> bool:
        """Can work still reach ``rep`` from another replica (a decode replica's prefill pool)?"""
        if rep.role != "decode":
            return False
        return bool(self.in_flight) or any(p.scheduler.has_work() for p in self.entry_pool)

    def _steady_decode(self, rep: Replica, plan: StepPlan) -> bool:
        """True when ``plan`` gives every running request exactly its next decode token, nothing
        else happens in it, and the policy vouches that it would plan the same again."""
        sched = rep.scheduler
        if (plan.preempted or plan.swapped_in or plan.blocks_swapped_out or plan.cached_tokens
                or len(plan.num_new_tokens) != len(sched.running) or not sched.steady()):
            return False
        by_id = self.by_id
        for rid, n in plan.num_new_tokens.items():
            r = by_id[rid]
            if n != 1 or not r.num_generated or r.num_generated >= r.output_tokens:
                return False
        return True

    def decode_run(self, rep: Replica, plan: StepPlan, start: float) -> DecodeRun:
        """Decode fast-forward: the steps of a steady decode batch up to the first of (a request
        finishes, the next arrival at this replica, a block the pool cannot give), priced exactly
        as single steps would be, with per-request work only at the ends. Blocks are allocated as
        the steps need them; request state is applied by ``complete_run``."""
        reqs = [self.by_id[rid] for rid in plan.num_new_tokens]
        n = len(reqs)
        kv, cost = rep.kv, rep.cost
        horizon = min(r.output_tokens - r.num_generated for r in reqs)
        kv_tokens = sum(r.num_computed for r in reqs) + n
        longest = max(r.num_computed for r in reqs) + 1
        arrival = self.next_arrival_for(rep)
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

    def complete_run(self, rep: Replica, run: DecodeRun) -> None:
        """Apply a decode run: every request computed and emitted one token per step."""
        k, reqs, times = run.steps, run.reqs, run.times
        start0, end, first_end = times[0], times[-1], times[1]
        gaps = [times[j + 1] - times[j] for j in range(1, k)]  # "now - start" of each later step
        run_max = max(gaps) if gaps else 0.0
        same = 0
        for r in reqs:  # the first step's gaps, grouped as complete_step groups them
            gap = first_end - r.last_token_s
            if r.last_token_s == start0:
                same += 1
            else:
                self._itl(gap, 1)
            r.max_itl_s = max(r.max_itl_s, gap, run_max)
            r.num_computed += k
            r.num_generated += k
            r.last_token_s = end
        if same:
            self._itl(first_end - start0, same)
        if gaps:
            self.itl_values.extend(gaps)
            self.itl_counts.extend([len(reqs)] * len(gaps))
        for r in reqs:
            if r.num_generated >= r.output_tokens:
                self._finish(rep, r, end)

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

    def next_arrival_for(self, rep: Replica) -> float:
        """The earliest time a new request can reach ``rep`` (a lower bound). With round-robin
        routing, the read-ahead tells which upcoming arrival is this replica's; otherwise any
        arrival may be."""
        up = self.upcoming
        if not up:
            return float("inf")
        if len(self.replicas) == 1 or self.cfg.cluster.router != "round_robin":
            return up[0].arrival_s
        n, ctx = len(self.replicas), self.model.max_context
        slot = self.route_state.get("next", 0)
        for spec in up:
            if spec.prompt_tokens + spec.output_tokens > ctx:
                continue  # rejected before routing: takes no turn
            if slot == rep.idx:
                return spec.arrival_s
            slot = (slot + 1) % n
        return up[-1].arrival_s  # beyond the read-ahead: not before the last one read

    def _client(self, c: int, budget: list[int]):
        """One closed-loop client: think, send, wait for the response, repeat while the shared
        request budget lasts (``budget[0]`` requests left; None = until ``duration_s``)."""
        from sim.types import RequestSpec
        from sim.workload.closed_loop import client_draws

        env, wl = self.env, self.cfg.workload
        for think, prompt, output in client_draws(wl, self.cfg.seed, c):
            if think > 0:
                yield env.timeout(think)
            if wl.duration_s is not None and env.now > wl.duration_s:
                return
            if budget[0] is not None:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            rid = len(self.requests)
            done = self.done_events[rid] = env.event()
            self.admit(RequestSpec(id=rid, arrival_s=env.now, prompt_tokens=prompt, output_tokens=output,
                                   session_id=f"client-{c}"))
            yield done

    def _clients(self):
        cl = self.cfg.workload.closed_loop
        budget = [self.cfg.workload.num_requests]
        yield simpy.AllOf(self.env, [self.env.process(self._client(c, budget)) for c in range(cl.clients)])
        self.workload.info["source"] = f"closed loop: {cl.clients} clients, think {cl.think} mean {cl.think_time_s} s"
        self._arrivals_finished()

    def _arrivals_finished(self):
        self.arrivals_done = True
        for rep in self.replicas:
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()

    def _replica(self, rep: Replica):
        env, sched, cost, log = self.env, rep.scheduler, rep.cost, self.steps
        while True:
            plan = sched.schedule(env.now)
            if plan.empty:
                if sched.has_work():
                    raise RuntimeError(f"scheduler {sched.name!r} made no progress with "
                                       f"{len(sched.waiting)} waiting and {len(sched.running)} running requests")
                if self.arrivals_done and not self._upstream_busy(rep):
                    return
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
                continue
            start = env.now
            shape = self.commit_plan(rep, plan, start)
            if self.fast_forward and self._steady_decode(rep, plan):
                run = self.decode_run(rep, plan, start)
                waiting = len(sched.waiting)  # arrivals can land only in the run's last step
                yield _At(env, run.times[-1])
                self.complete_run(rep, run)
                log.add_run(rep.idx, run, waiting, len(sched.waiting), rep.kv.num_used)
                continue
            st = cost.step_time(shape)
            if self.plans is not None:
                self.plans.append((rep.idx, start, tuple(plan.num_new_tokens), shape))
            yield env.timeout(st.total)
            prefill, decode = self.complete_step(rep, plan, start, env.now)
            log.add(rep.idx, start, st, len(shape.new_tokens), prefill, decode, len(plan.preempted),
                    rep.kv.num_used, len(sched.waiting))

    def run(self) -> SimOutput:
        self.env.process(self._clients() if self.cfg.workload.closed_loop else self._arrivals())
        for rep in self.replicas:
            self.env.process(self._replica(rep))
        self.env.run()
        oor = self.cost.out_of_range_total()
        cfg = self.cfg
        return SimOutput(
            config=cfg, requests=self.requests, steps=self.steps, itl_values=self.itl_values,
            itl_counts=self.itl_counts, memory=self.mem.as_dict(),
            num_gpus=cfg.cluster.replicas * cfg.parallelism.tp * cfg.parallelism.pp, simulated_s=self.env.now,
            workload_info=dict(self.workload.info), cost_source=self.cost.source,
            cost_params={"source": self.cost.params_source, **self.cost.p.as_dict()}, out_of_range=oor,
            kv_blocks_per_replica=self.mem.num_gpu_blocks)


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


def run_engine(cfg: Config, progress=None) -> SimOutput:
    """Build the pipeline for ``cfg`` and run it to completion."""
    return Engine(cfg, progress).run()
