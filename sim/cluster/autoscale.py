"""Autoscaling: a pure decision function, the signals it reads, and the fleet's provisioning
record. ``cluster.autoscale`` sizes a fleet of identical replicas on outstanding requests; with
``cluster.pools`` each pool has its own autoscaler and signal (``pool_signal``), decisions and
record, and drains and releases only its own replicas.

Policy, after the Kubernetes Horizontal Pod Autoscaler ("Horizontal Pod Autoscaling", algorithm
details: desired = ceil(current replicas x current metric / target metric)) with the metric an
average of outstanding requests per replica, which makes desired = ceil(total outstanding /
target), clamped to [min_replicas, max_replicas]. Every ``interval_s`` the engine asks
``decide``; new replicas serve after ``cold_start_s`` (provisioned and paid for meanwhile).
Scaling down releases idle serving replicas at once (highest index first); when too few are
idle (a balancing router keeps every replica busy under load) it *drains* busy ones, the fewest
outstanding requests first: the router stops sending them requests, they finish what they hold
and are released at the first decision that finds them empty, paid for until then (Kubernetes
ends a pod the same way: removed from the Service's endpoints, then terminated after its grace
period). A draining replica returns to service, without a cold start, when the fleet must grow
again. No request is ever dropped by a scale-down. Departures from the HPA: no tolerance band
and no stabilisation window (a decision acts at once); the metric is exact, not scraped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


def desired_replicas(outstanding: float, cfg) -> int:
    """ceil(outstanding / target), clamped to [min_replicas, max_replicas] (``outstanding``: the
    signal summed over the fleet or pool, ``pool_signal``)."""
    want = math.ceil(outstanding / cfg.target_outstanding)
    return max(cfg.min_replicas, min(cfg.max_replicas, want))


@dataclass(frozen=True)
class Target:
    """What ``desired_replicas`` reads: a pool's bounds and its target per replica."""

    min_replicas: int
    max_replicas: int
    target_outstanding: float


DEFAULT_SIGNAL = {"prefill": "prefill_tokens", "decode": "kv_usage", "both": "outstanding"}
"""A pool's signal when its autoscale block names none: queued prefill work for a prefill pool
(what Dynamo's Planner scales prefill workers on), KV-cache use for a decode pool (its decode
workers' signal), outstanding requests for a pool that does both."""


def pool_signal(signal: str, replicas: list, pending: list = ()) -> float:
    """The signal summed over a pool's ``replicas`` (the live ones, draining included) and the
    requests ``pending`` on their way to it (parked, or their KV in transfer):

    - ``outstanding``: waiting + running requests;
    - ``prefill_tokens``: prompt tokens not yet computed (a request preempted by recompute counts
      its prompt again);
    - ``running``: sequences in the running batch (pending ones not counted);
    - ``kv_usage``: each serving replica's fraction of KV blocks in use (pending ones not counted).

    desired = ceil(this sum / target): the HPA's ceil(replicas x average / target)."""
    if signal == "outstanding":
        return sum(len(r.scheduler.waiting) + len(r.scheduler.running) for r in replicas) + len(pending)
    if signal == "running":
        return sum(len(r.scheduler.running) for r in replicas)
    if signal == "kv_usage":
        return sum(r.kv.num_used / r.kv.num_blocks for r in replicas if r.up)
    if signal == "prefill_tokens":
        left = 0
        for r in replicas:
            for q in (r.scheduler.waiting, r.scheduler.running):
                left += sum(max(0, x.prompt_tokens - x.num_computed) for x in q)
        return left + sum(max(0, x.prompt_tokens - x.num_computed) for x in pending)
    raise ValueError(f"unknown autoscale signal {signal!r}")


@dataclass(frozen=True)
class Decision:
    add: int = 0  # replicas to provision
    remove: tuple = ()  # idle serving replicas to release now
    drain: tuple = ()  # busy serving replicas to stop routing to (released once empty)
    undrain: tuple = ()  # draining replicas to route to again


def decide(outstanding: int, provisioned: int, idle: list[int], cfg, busy: dict[int, int] | None = None,
           draining: list[int] = ()) -> Decision:
    """What to do to reach ``desired_replicas``. ``provisioned`` counts every replica paid for
    (serving, warming up, restarting after a crash, or draining); ``idle`` lists the serving
    replicas without a request, ``busy`` the others with their outstanding requests,
    ``draining`` those already draining (they count as leaving)."""
    want = desired_replicas(outstanding, cfg)
    staying = provisioned - len(draining)
    if want > staying:
        back = tuple(sorted(draining)[: want - staying])
        return Decision(add=want - staying - len(back), undrain=back)
    if want < staying:
        excess = staying - want
        remove = tuple(sorted(idle, reverse=True)[:excess])
        order = sorted((busy or {}).items(), key=lambda kv: (kv[1], -kv[0]))  # fewest outstanding, then highest index
        return Decision(remove=remove, drain=tuple(i for i, _ in order[: excess - len(remove)]))
    return Decision()


@dataclass
class FleetLog:
    """When each replica was provisioned and released, and the fleet's size over time."""

    gpus_per_replica: int
    provisioned: dict = field(default_factory=dict)  # replica -> provisioning time
    released: dict = field(default_factory=dict)  # replica -> release time
    series: list = field(default_factory=list)  # (time, provisioned, serving) after each change
    drained: int = 0  # replicas released after draining (the others were idle when released)

    def record(self, t: float, provisioned: int, serving: int) -> None:
        if self.series and self.series[-1][0] == t:
            self.series[-1] = (t, provisioned, serving)
        else:
            self.series.append((t, provisioned, serving))

    def gpu_hours(self, end_s: float) -> float:
        """GPU-hours of every replica while provisioned (cold start included), up to ``end_s``."""
        s = sum(max(0.0, min(self.released.get(i, end_s), end_s) - t0) for i, t0 in self.provisioned.items())
        return s * self.gpus_per_replica / 3600.0

    def frame_rows(self, end_s: float) -> list[tuple]:
        """(time, provisioned, serving, cumulative GPU-hours) at each change and at ``end_s``."""
        rows = []
        for t, p, s in self.series + [(end_s, *self.series[-1][1:])] if self.series else []:
            if t > end_s:
                break
            rows.append((t, p, s, self.gpu_hours(t)))
        return rows
