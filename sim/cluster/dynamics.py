"""How the replica pool changes during a run: scheduled crashes and restarts, and autoscaling
(docs/faults.md). The pure parts live beside it: the schedule and the slow-down factors in
``faults.py``, the scaling decision and the fleet record in ``autoscale.py``.

``PoolDynamics`` applies them to the engine it serves. It imports no simpy: its two processes
(``faults``, ``autoscale``) wait on the engine's own environment, and it uses only these parts
of the engine: ``cfg``, ``env``, ``faults``, ``replicas``, ``own``, ``by_id``, ``steps``,
``itl``, ``end_s`` and the methods ``_new_replica``, ``_replica`` (a replica's process),
``_dispatch`` (route a request again, or park it), ``_leave`` and ``_done``.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque

from sim import lifecycle
from sim.cluster.autoscale import DEFAULT_SIGNAL, FleetLog, Target, decide, pool_signal
from sim.cluster.faults import FaultLog
from sim.fastforward import run_prefix


class PoolDynamics:
    """Crashes, restarts and autoscaling of ``eng``'s replicas, with what they did (``log``,
    ``fleet``) and the requests waiting for any replica to serve (``parked``)."""

    def __init__(self, eng):
        cfg = eng.cfg
        self.eng = eng
        self.on_crash = cfg.faults.on_crash
        self.log = FaultLog(cfg.faults.on_crash)
        self.scaling = cfg.cluster.autoscale
        self.fleet = FleetLog(cfg.parallelism.tp * cfg.parallelism.pp) if self.scaling.enabled else None
        self.parked: deque = deque()  # requests waiting for any replica to serve
        self.parked_decode: deque = deque()  # disaggregation: decoding requests waiting for a decode replica
        self.draining: set[int] = set()  # replicas the router skips until they are empty (then released)
        # pools with their own autoscaler: each pool's provisioning record
        self.pool_fleets = {p.name: FleetLog(p.gpus_per_replica) for p in eng.pools if p.autoscale is not None}

    def start(self) -> None:
        """Start the processes: scheduled faults, then the autoscaler (in one process: sim.shards
        refuses them with several workers)."""
        eng = self.eng
        if eng.faults.crashes:
            eng.env.process(self.faults())
        if self.fleet is not None:
            self.fleet.provisioned.update((r.idx, 0.0) for r in eng.replicas)
            self.record_fleet(0.0)
            eng.env.process(self.autoscale())
        for p in eng.pools:
            if p.autoscale is not None:
                self.pool_fleets[p.name].provisioned.update((r.idx, 0.0) for r in eng.replicas if r.pool is p)
                eng.env.process(self.autoscale_pool(p))
        if self.pool_fleets:
            self.record_fleet(0.0)

    # ------------------------------------------------------------------ state changes
    def crash(self, rep, now: float) -> bool:
        """Replica ``rep`` fails at ``now``: its step in progress is discarded (the steps of a
        decode run that ended before stand) and the requests it held are re-queued through the
        router or lost (``faults.on_crash``); False if it was not serving."""
        eng = self.eng
        if not rep.up and rep.idx not in self.draining:
            self.log.skipped += 1
            return False
        self.draining.discard(rep.idx)  # its requests go elsewhere now; it restarts as any replica
        rep.up = False
        self.log.applied.append((now, "crash", rep.idx))
        if rep.run is not None:  # a decode run in flight: the steps that ended before the crash count
            run, waiting = rep.run
            rep.run = None
            k = bisect.bisect_right(run.times, now) - 1
            if k > 0:
                part = run_prefix(run, k)
                for r in lifecycle.complete_run(part.reqs, part.times, k, eng.itl):
                    eng._leave(rep, r)
                eng.steps.add_run(rep.idx, part, waiting, waiting, part.used[-1])
        if rep.proc is not None and rep.proc.is_alive:
            rep.proc.interrupt("crash")
        rep.wake = None
        held = list(rep.scheduler.running) + list(rep.scheduler.waiting)
        rep.scheduler.running.clear()
        rep.scheduler.waiting.clear()
        self.record_fleet(now)
        for r in held:
            lifecycle.crash_requeue(r)  # the KV died with the replica; emitted tokens stay emitted
            if self.on_crash == "lose":
                self.lose(r, f"replica_crash: replica {rep.idx} failed at {now:g} s")
            else:
                self.requeue(r)
        return True

    def restart(self, rep, now: float, event: str = "restart") -> None:
        """``rep`` serves again (after a crash or a cold start) with an empty KV pool and a fresh
        scheduler; requests parked while no replica served are dispatched."""
        eng = self.eng
        fresh = eng._new_replica(rep.idx, rep.lives + 1)
        rep.scheduler, rep.kv, rep.lives, rep.up = fresh.scheduler, fresh.kv, rep.lives + 1, True
        if event == "restart":
            self.log.applied.append((now, event, rep.idx))
        rep.proc = eng.env.process(eng._replica(rep))
        self.record_fleet(now)
        parked, self.parked = self.parked, deque()
        for r in parked:
            eng._dispatch(r)
        if rep.role == "decode":
            waiting, self.parked_decode = self.parked_decode, deque()
            for r in waiting:
                self.to_decode(r)

    def requeue(self, r) -> None:
        """``r`` (its KV lost with a crashed replica or a failed transfer) goes through the router
        again; under disaggregation a request past its first token goes to a decode replica
        instead (``to_decode``), never back to the prefill-only pool."""
        self.log.requeued += 1
        if self.eng.disagg is not None and r.first_token_s is not None:
            return self.to_decode(r)
        self.eng._dispatch(r)

    def to_decode(self, r) -> None:
        """Disaggregation: ``r`` already has its first token and no KV. It joins the least loaded
        serving decode replica, which recomputes its prompt and tokens so far (as after a
        recompute preemption); while every decode replica is down it is parked until one
        restarts (counted: ``faults.parked_for_decode``), so prefill replicas never decode."""
        pool = [d for d in self.eng.disagg.decode_pool if d.up]
        if not pool:
            self.log.parked_for_decode += 1
            self.parked_decode.append(r)
            return
        dst = min(pool, key=lambda d: (len(d.scheduler.waiting) + len(d.scheduler.running), d.idx))
        self.eng._place(r, dst)

    def lose(self, r, reason: str) -> None:
        """A fault took ``r``: it ends unserved, with the reason (``code: detail``)."""
        lifecycle.lose(r, reason)
        self.log.lose(reason.split(":")[0])
        self.eng._done(r)

    def lose_parked(self) -> None:
        """At the end of the run: the requests still parked (no replica ever served again) are lost."""
        for r in self.parked:
            self.lose(r, "no_replica: no replica served after it was parked")
        for r in self.parked_decode:
            self.lose(r, "no_decode_replica: no decode replica served again after it was parked")
        self.parked.clear()
        self.parked_decode.clear()

    def record_fleet(self, now: float) -> None:
        if self.fleet is not None:
            live = [r for r in self.eng.replicas if not r.retired]
            self.fleet.record(now, len(live), sum(r.up or r.idx in self.draining for r in live))
        for name, fleet in self.pool_fleets.items():
            live = [r for r in self.eng.replicas if r.pool.name == name and not r.retired]
            fleet.record(now, len(live), sum(r.up or r.idx in self.draining for r in live))

    # ------------------------------------------------------------------ processes
    def faults(self):
        """Apply the scheduled crashes and restarts at their times."""
        eng = self.eng
        env = eng.env
        todo = [(c.at_s, 1, c.replica, c.restart_s) for c in eng.faults.crashes]
        heapq.heapify(todo)
        while todo:
            t, kind, idx, restart_s = heapq.heappop(todo)
            if t > env.now:
                yield env.timeout(t - env.now)
            if eng.end_s is not None:
                return
            rep = eng.replicas[idx]
            if kind == 1:
                if self.crash(rep, env.now):
                    heapq.heappush(todo, (restart_s, 0, idx, restart_s))
            elif not rep.retired:
                self.restart(rep, env.now)

    def autoscale(self):
        """Every ``interval_s``: size the fleet (``autoscale.decide``); new replicas serve after
        the cold start; idle ones are released."""
        eng, a = self.eng, self.scaling
        env = eng.env
        while True:
            yield env.timeout(a.interval_s)
            if eng.end_s is not None:
                return
            drained = [i for i in sorted(self.draining) if not eng.replicas[i].scheduler.has_work()]
            for idx in drained:  # emptied since the last decision: released now (paid until now)
                self.draining.discard(idx)
                self.fleet.drained += 1
                self._release(eng.replicas[idx], env.now)
            live = [r for r in eng.replicas if not r.retired]
            idle = [r.idx for r in live if r.up and not r.scheduler.has_work()]
            busy = {r.idx: len(r.scheduler.waiting) + len(r.scheduler.running) for r in live
                    if r.up and r.scheduler.has_work()}
            d = decide(len(eng.by_id), len(live), idle, a, busy, sorted(self.draining))
            for idx in d.remove:
                self._release(eng.replicas[idx], env.now)
            for idx in d.drain:  # the router skips it (not up); it finishes what it holds
                eng.replicas[idx].up = False
                self.draining.add(idx)
            for idx in d.undrain:
                eng.replicas[idx].up = True
                self.draining.discard(idx)
            add = d.add
            for _ in range(add):
                rep = eng._new_replica(len(eng.replicas))
                rep.up = False
                eng.replicas.append(rep)  # also the entry pool: autoscaling excludes disaggregation
                eng.own.add(rep.idx)
                self.fleet.provisioned[rep.idx] = env.now
                env.process(self._cold_start(rep, a.cold_start_s))
            if add or d.remove or d.drain or d.undrain or drained:
                self.record_fleet(env.now)

    def autoscale_pool(self, pool):
        """One pool's autoscaler (``cluster.pools[i].autoscale``): every ``interval_s``, size the
        pool to ceil(its signal / target) (``autoscale.pool_signal``) within its bounds; new
        replicas of the pool serve after the cold start; a replica leaving takes no new request
        and is released once empty (drain before retire), or at once when idle."""
        eng, a = self.eng, pool.autoscale
        env, fleet = eng.env, self.pool_fleets[pool.name]
        signal = a.signal or DEFAULT_SIGNAL[pool.role]
        target = Target(a.min_replicas, a.max_replicas, a.target)
        while True:
            yield env.timeout(a.interval_s)
            if eng.end_s is not None:
                return
            mine = [r for r in eng.replicas if r.pool is pool]
            drained = [r for r in mine if r.idx in self.draining and not r.scheduler.has_work()]
            for r in drained:  # emptied since the last decision: released now (paid until now)
                self.draining.discard(r.idx)
                fleet.drained += 1
                self._release(r, env.now, fleet)
            live = [r for r in mine if not r.retired]
            idle = [r.idx for r in live if r.up and not r.scheduler.has_work()]
            busy = {r.idx: len(r.scheduler.waiting) + len(r.scheduler.running) for r in live
                    if r.up and r.scheduler.has_work()}
            metric = pool_signal(signal, live, self._pending(pool))
            d = decide(metric, len(live), idle, target, busy, sorted(r.idx for r in live if r.idx in self.draining))
            for idx in d.remove:
                self._release(eng.replicas[idx], env.now, fleet)
            for idx in d.drain:  # the router (or the hand-off) skips it (not up); it finishes what it holds
                eng.replicas[idx].up = False
                self.draining.add(idx)
            for idx in d.undrain:
                eng.replicas[idx].up = True
                self.draining.discard(idx)
            for _ in range(d.add):
                rep = eng._new_replica(len(eng.replicas), pool=pool)
                rep.up = False
                eng.replicas.append(rep)  # (the entry pool too when nothing is disaggregated: the same list)
                if eng.disagg is not None:
                    eng.disagg.add(rep)
                eng.own.add(rep.idx)
                fleet.provisioned[rep.idx] = env.now
                env.process(self._cold_start(rep, a.cold_start_s))
            if d.add or d.remove or d.drain or d.undrain or drained:
                self.record_fleet(env.now)

    def _pending(self, pool) -> list:
        """Requests on their way to ``pool``: parked while no replica served (an entry pool), or
        parked for a decode replica and with their KV in transfer to it (a decode pool)."""
        if pool.role != "decode":
            return list(self.parked)
        heading = self.eng.disagg.heading
        return list(self.parked_decode) + [self.eng.by_id[i] for i, to in heading.items() if to == pool.name]

    def _release(self, rep, now: float, fleet=None) -> None:
        """The autoscaler lets ``rep`` go (it holds no request): no longer paid for."""
        rep.retired, rep.up = True, False
        (fleet or self.fleet).released[rep.idx] = now
        if rep.proc is not None and rep.proc.is_alive:
            rep.proc.interrupt("retired")

    def _cold_start(self, rep, seconds: float):
        yield self.eng.env.timeout(seconds)
        if self.eng.end_s is None:
            self.restart(rep, self.eng.env.now, event="cold_start")
