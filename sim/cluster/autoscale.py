"""Queue-length autoscaling: a pure decision function and the fleet's provisioning record.

Policy, after the Kubernetes Horizontal Pod Autoscaler ("Horizontal Pod Autoscaling", algorithm
details: desired = ceil(current replicas x current metric / target metric)) with the metric an
average of outstanding requests per replica, which makes desired = ceil(total outstanding /
target), clamped to [min_replicas, max_replicas]. Every ``interval_s`` the engine asks
``decide``; new replicas serve after ``cold_start_s`` (provisioned and paid for meanwhile);
removal takes only idle serving replicas (no request waiting or running), highest index first,
so no request is ever dropped by a scale-down. Departures from the HPA: no tolerance band and no
stabilisation window (a decision acts at once); the metric is exact, not scraped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


def desired_replicas(outstanding: int, cfg) -> int:
    """ceil(outstanding / target), clamped to [min_replicas, max_replicas]."""
    want = math.ceil(outstanding / cfg.target_outstanding)
    return max(cfg.min_replicas, min(cfg.max_replicas, want))


def decide(outstanding: int, provisioned: int, idle: list[int], cfg) -> tuple[int, list[int]]:
    """(replicas to add, indices of idle serving replicas to remove). ``provisioned`` counts
    every replica paid for (serving, warming up or restarting after a crash); ``idle`` lists the
    serving replicas without a request."""
    want = desired_replicas(outstanding, cfg)
    if want > provisioned:
        return want - provisioned, []
    if want < provisioned:
        return 0, sorted(idle, reverse=True)[: provisioned - want]
    return 0, []


@dataclass
class FleetLog:
    """When each replica was provisioned and released, and the fleet's size over time."""

    gpus_per_replica: int
    provisioned: dict = field(default_factory=dict)  # replica -> provisioning time
    released: dict = field(default_factory=dict)  # replica -> release time
    series: list = field(default_factory=list)  # (time, provisioned, serving) after each change

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
