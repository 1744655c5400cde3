"""Faults scheduled in simulated time, as plain values the engine consults (docs/faults.md).

No peer simulator models these; the semantics are ours and documented:

- ``crash`` (replica r at t, ``duration_s`` d): at t the replica stops, mid-step if it is in one
  (that step's work is discarded); the requests it held (waiting, running, swapped) are
  re-queued through the router to a serving replica, or lost, as ``faults.on_crash`` says. At
  t + d it serves again with an empty KV cache and a fresh scheduler.
- ``straggler`` (replica r, factor f, [t, t + d)): every component of a step that *starts* in
  the window takes f times as long.
- ``degraded_link`` (replica r or every replica, factor f, [t, t + d)): the communication
  component of a step starting in the window (tensor / pipeline collectives) takes f times as
  long, and a disaggregated KV transfer that starts in it moves at 1/f of the bandwidth.

The cost model still sees only the BatchShape: the engine prices a step of a slowed replica
through ``ScaledCost``, which applies the factors to the ``StepTime`` the cost model returned
(``scale_step``; ``scale_columns`` for a fast-forward run's price columns, the same arithmetic).
A window's start and end end a decode fast-forward run, as an arrival does, so fast-forward
stays exact.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

import numpy as np

from sim.types import COMPONENTS, StepTime


@dataclass(frozen=True, slots=True)
class Window:
    """A straggler or degraded-link window: [start, end) on ``replica`` (None: every replica)."""

    kind: str
    start: float
    end: float
    replica: int | None
    factor: float

    def hits(self, replica: int, t: float) -> bool:
        return (self.replica is None or self.replica == replica) and self.start <= t < self.end


@dataclass(frozen=True, slots=True)
class Crash:
    at_s: float
    replica: int
    restart_s: float  # when it serves again


class FaultSchedule:
    """The configured faults, split into crashes (events the engine applies) and factor windows
    (pure functions of time and replica)."""

    def __init__(self, events):
        self.crashes = sorted((Crash(e.at_s, e.replica, e.at_s + e.duration_s) for e in events if e.kind == "crash"),
                              key=lambda c: (c.at_s, c.replica))
        self.windows = [Window(e.kind, e.at_s, e.at_s + e.duration_s, e.replica, e.factor)
                        for e in events if e.kind != "crash"]
        self._edges: dict = {}  # replica -> sorted start / end times of the windows that hit it
        # crashes re-queue and restarts un-park requests: they end decode runs, as arrivals do
        self._changes = sorted({t for c in self.crashes for t in (c.at_s, c.restart_s)})

    def __bool__(self) -> bool:
        return bool(self.crashes or self.windows)

    def factors(self, replica: int, t: float) -> tuple[float, float]:
        """(compute factor, link factor) for a step of ``replica`` starting at ``t``; overlapping
        windows of one kind multiply."""
        compute = link = 1.0
        for w in self.windows:
            if w.hits(replica, t):
                if w.kind == "straggler":
                    compute *= w.factor
                else:
                    link *= w.factor
        return compute, link

    def next_edge(self, replica: int, t: float) -> float:
        """The first window start or end after ``t`` that changes ``replica``'s factors (inf if
        none): a decode fast-forward run must not run past it."""
        edges = self._edges.get(replica)
        if edges is None:
            edges = self._edges[replica] = sorted({x for w in self.windows if w.replica in (None, replica)
                                                   for x in (w.start, w.end)})
        i = bisect.bisect_right(edges, t)
        return edges[i] if i < len(edges) else float("inf")

    def next_change(self, replica: int, t: float) -> float:
        """The first time after ``t`` at which a fault changes ``replica``'s step prices or can
        send it requests (a crash re-queues, a restart un-parks): where a decode run must end."""
        edge = self.next_edge(replica, t)
        i = bisect.bisect_right(self._changes, t)
        return min(edge, self._changes[i]) if i < len(self._changes) else edge


class ScaledCost:
    """A cost model whose prices are ``scale_step`` / ``scale_columns`` of another's: what a
    step of a straggling or badly connected replica costs. Everything else is delegated."""

    def __init__(self, cost, compute: float, link: float):
        self.cost, self.compute, self.link = cost, compute, link

    def step_time(self, shape) -> StepTime:
        return scale_step(self.cost.step_time(shape), self.compute, self.link)

    def decode_step(self, *args) -> StepTime:
        return scale_step(self.cost.decode_step(*args), self.compute, self.link)

    def decode_totals(self, n, kv_tokens, longest, m):
        """Step totals of a decode run: x ``compute`` (what ``scale_step`` gives when the link is
        healthy); with a degraded link None, so the run is priced step by step, components and all."""
        if self.link != 1.0:
            return None
        tot = self.cost.decode_totals(n, kv_tokens, longest, m)
        if tot is None:
            return None
        return [x * self.compute for x in tot] if isinstance(tot, list) else tot * self.compute

    def decode_series(self, *args):
        series = self.cost.decode_series(*args)
        return None if series is None else scale_columns(series, self.compute, self.link)

    def __getattr__(self, name):
        return getattr(self.cost, name)


def scale_step(st: StepTime, compute: float, link: float) -> StepTime:
    """``st`` with the communication component x ``link`` and then every component x
    ``compute`` (the same arithmetic as ``scale_columns``); ``st`` itself when both are 1."""
    if compute == 1.0 and link == 1.0:
        return st
    comm = st.comm * link
    return replace(st, total=(st.total + (comm - st.comm)) * compute, gemm=st.gemm * compute,
                   attn_prefill=st.attn_prefill * compute, attn_decode=st.attn_decode * compute, comm=comm * compute,
                   other_gpu=st.other_gpu * compute, cpu=st.cpu * compute, swap=st.swap * compute)


def scale_columns(cols: dict, compute: float, link: float) -> dict:
    """``scale_step`` on columns (numpy arrays of ``total`` and each component), elementwise with
    the same operations, so a fast-forwarded run prices exactly as its steps one by one."""
    if compute == 1.0 and link == 1.0:
        return cols
    cols = {c: np.asarray(v) if isinstance(v, list) else v for c, v in cols.items()}  # short runs come as lists
    out = dict(cols)
    comm = cols["comm"] * link
    out["total"] = (cols["total"] + (comm - cols["comm"])) * compute
    for c in COMPONENTS:
        out[c] = (comm if c == "comm" else cols[c]) * compute
    return out


@dataclass
class FaultLog:
    """What the faults did, for summary.json's ``faults`` block."""

    on_crash: str
    applied: list = field(default_factory=list)  # (time, kind, replica) in the order applied
    skipped: int = 0  # crashes of a replica already down or retired
    requeued: int = 0  # re-queue operations (a request re-queued twice counts twice)
    parked_for_decode: int = 0  # disaggregation: decoding requests parked while every decode replica was down
    lost: dict = field(default_factory=dict)  # reason code -> requests

    def lose(self, code: str) -> None:
        self.lost[code] = self.lost.get(code, 0) + 1

    def summary(self, schedule: FaultSchedule, end_s: float) -> dict:
        by_kind: dict[str, int] = {}
        for _, kind, _ in self.applied:
            if kind != "restart":  # the second half of a crash
                by_kind[kind] = by_kind.get(kind, 0) + 1
        for w in schedule.windows:  # a window counts as applied when it began before the run ended
            if w.start <= end_s:
                by_kind[w.kind] = by_kind.get(w.kind, 0) + 1
        return {"on_crash": self.on_crash, "events_applied": sum(by_kind.values()),
                "by_kind": dict(sorted(by_kind.items())), "skipped": self.skipped,
                "requeued": self.requeued, "parked_for_decode": self.parked_for_decode,
                "lost": sum(self.lost.values()), "lost_reasons": dict(sorted(self.lost.items())),
                "timeline": [{"t_s": t, "event": k, "replica": r} for t, k, r in self.applied]}
