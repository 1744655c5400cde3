"""The run's load verdict: stable, backlogged or overloaded, with its evidence and the knob to turn.

Computed from the request rows alone (arrival, first scheduled, finish), so every run gets one:
with or without per-step rows (``output.step_records``), streamed or not (``output.stream``). The
rows are folded batch by batch into counts per time bin (``LoadFold``), so memory stays bounded.

The waiting queue at time t is the number of requests that arrived by t and were not yet
scheduled for the first time (a request preempted later is not counted again; a request that
never started, rejected or lost, is left out). It is read at ``BINS`` equally spaced instants
over the run.

Evidence (``summary.json`` ``verdict.evidence``):

- ``offered_rps``: arrivals / arrival span (first to last arrival).
- ``served_rps``: completed requests / time from the first arrival to the end of the run.
- ``queue_at_last_arrival``, ``peak_queue`` (and when it peaked).
- ``queue_growth_rps``: least-squares slope of the waiting queue over the second half of the
  arrival span (requests per second); ``queue_growth_share`` = that slope / ``offered_rps``, the
  share of the offered arrivals that piled up instead of being served.
- ``drain_s``: end of the run - last arrival; ``longest_service_s``: the longest time a completed
  request spent from its first scheduling to its last token; ``drain_excess_s`` = the drain time
  the longest service does not explain.

Verdict (thresholds are named constants below; a queue is *material* when it holds at least
``MIN_QUEUE`` requests and ``MATERIAL_WAIT_S`` seconds of the offered arrivals):

- **overloaded**: arrivals outpaced service. The queue at the last arrival is material and
  either still growing (``queue_growth_share`` > ``GROWTH_SHARE``) or its drain takes a long
  time after the last arrival (``drain_excess_s`` > ``DRAIN_SHARE`` x the arrival span).
- **backlogged**: the queue grew to a material length at some point but did not end the arrivals
  growing (it drained or was draining).
- **stable**: the queue never became material.
"""
from __future__ import annotations

import math

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (pandas is imported by the results, after the simulation)
    import pandas as pd

BINS = 1024
"""Instants at which the waiting queue is read, equally spaced from 0 to the end of the run."""
MIN_QUEUE = 10
"""A queue shorter than this many requests is noise, whatever the run's size."""
MATERIAL_WAIT_S = 1.0
"""... and so is one holding less than this many seconds of the offered arrivals: a queue of a
second's arrivals adds about a second of waiting, half the default 2 s TTFT limit."""
MIN_QUEUE_SHARE = 0.02
"""Without an offered rate (every request arrived at once), a queue below this share of the
arrivals is not material."""
GROWTH_SHARE = 0.05
"""A queue growing by more than this share of the offered rate at the end of the arrivals is
called growing (the issue's 'material': below 5% the slope is within the noise of Poisson arrivals
over a finite window)."""
DRAIN_SHARE = 0.25
"""A drain after the last arrival longer than the longest service plus this share of the arrival
span is 'makespan far beyond the last arrival'."""
STATES = ("stable", "backlogged", "overloaded")
"""The verdicts, best first."""


def worst_verdict(states) -> str | None:
    """The worst of several runs' verdicts (overloaded > backlogged > stable); None when none has one."""
    states = [s for s in states if s in STATES]
    return max(states, key=STATES.index) if states else None


class LoadFold:
    """Counts per time bin of the request rows (arrivals and first schedulings of the requests that
    started; completions), folded batch by batch: integer counts, minima and maxima, so neither
    the batches' size nor their order changes the result."""

    def __init__(self, end_s: float, bins: int = BINS):
        self.end_s, self.bins = max(float(end_s), 1e-12), bins
        self.width = self.end_s / bins
        self.arrivals = np.zeros(bins, np.int64)  # of the requests that started
        self.starts = np.zeros(bins, np.int64)
        self.arrived = self.completed = 0
        self.t0, self.t_last = math.inf, -math.inf  # first and last arrival (every row)
        self.longest_service = 0.0

    def _bin(self, t: np.ndarray) -> np.ndarray:
        return np.clip((t / self.width).astype(np.int64), 0, self.bins - 1)

    def add(self, req: pd.DataFrame) -> None:
        if not len(req):
            return
        arrival = req["arrival_s"].to_numpy(float)
        sched = req["first_scheduled_s"].to_numpy(float)
        started = np.isfinite(sched)
        self.arrived += len(req)
        self.t0 = min(self.t0, float(arrival.min()))
        self.t_last = max(self.t_last, float(arrival.max()))
        self.arrivals += np.bincount(self._bin(arrival[started]), minlength=self.bins)
        self.starts += np.bincount(self._bin(sched[started]), minlength=self.bins)
        done = (req["status"] == "finished").to_numpy()
        self.completed += int(done.sum())
        if done.any():
            service = req["finish_s"].to_numpy(float)[done] - sched[done]
            service = service[np.isfinite(service)]
            if service.size:
                self.longest_service = max(self.longest_service, float(service.max()))

    def queue(self) -> tuple[np.ndarray, np.ndarray]:
        """(instants, waiting queue at each): the queue at the end of each bin."""
        t = (np.arange(self.bins) + 1) * self.width
        return t, np.cumsum(self.arrivals) - np.cumsum(self.starts)

    def verdict(self, replicas: int = 1) -> dict:
        return judge_load(self, replicas)


def _slope(t: np.ndarray, q: np.ndarray) -> float:
    """Least-squares slope of q over t; 0 with fewer than two instants."""
    if t.size < 2:
        return 0.0
    tc = t - t.mean()
    den = float(np.dot(tc, tc))
    return float(np.dot(tc, q - q.mean()) / den) if den > 0 else 0.0


def judge_load(f: LoadFold, replicas: int = 1) -> dict:
    """The verdict of a folded run (see the module docstring)."""
    if f.arrived == 0:
        return {"state": "stable", "why": "no request arrived", "knob": None, "evidence": {}}
    t, q = f.queue()
    span = max(f.t_last - f.t0, 0.0)
    last = min(int(f.t_last / f.width), f.bins - 1)  # the bin of the last arrival
    half = min(int((f.t0 + span / 2) / f.width), last)
    q_last = int(q[last])
    peak_i = int(np.argmax(q[:last + 1])) if last >= 0 else 0
    peak = int(q[peak_i])
    offered = (f.arrived - 1) / span if span > 0 and f.arrived > 1 else None
    served = f.completed / max(f.end_s - f.t0, 1e-12)
    growth = _slope(t[half:last + 1], q[half:last + 1].astype(float))
    share = growth / offered if offered else None
    drain = max(f.end_s - f.t_last, 0.0)
    excess = max(drain - f.longest_service, 0.0)
    material = max(MIN_QUEUE, MATERIAL_WAIT_S * offered if offered else MIN_QUEUE_SHARE * f.arrived)
    ev = {"offered_rps": offered, "served_rps": served, "arrived": f.arrived, "completed": f.completed,
          "arrival_span_s": span, "queue_at_last_arrival": q_last, "peak_queue": peak,
          "peak_queue_at_s": float(t[peak_i]), "queue_growth_rps": growth, "queue_growth_share": share,
          "drain_s": drain, "longest_service_s": f.longest_service, "drain_excess_s": excess,
          "material_queue": material}
    growing = q_last >= material and share is not None and share > GROWTH_SHARE
    long_drain = q_last >= material and excess > DRAIN_SHARE * span
    if growing or long_drain:
        why = []
        if growing:
            why.append(f"the waiting queue was still growing at the last arrival ({q_last:,} waiting, "
                       f"+{growth:.3g} req/s = {100 * share:.1f}% of the offered {offered:.3g} req/s)")
        if long_drain:
            why.append(f"the run ended {drain:,.0f} s after the last arrival ({excess:,.0f} s more than the "
                       f"longest service), over an arrival span of {span:,.0f} s")
        need = math.ceil(replicas * offered / served) if offered and served > 0 else None
        knob = (f"lower the arrival rate below the served {served:.3g} req/s"
                + (f", or serve it with about {need} replicas (now {replicas})" if need and need > replicas else "")
                + " (or a faster GPU / more tensor parallelism); latency figures of this run describe a queue "
                  "that grows with the run's length, not a steady state")
        return {"state": "overloaded", "why": "; ".join(why), "knob": knob, "evidence": ev}
    if peak >= material:
        why = (f"the waiting queue peaked at {peak:,} requests at {t[peak_i]:,.0f} s and was "
               f"{q_last:,} at the last arrival (not growing)")
        knob = "add headroom (replicas, or a lower rate) if the queueing delay of the peak matters"
        return {"state": "backlogged", "why": why, "knob": knob, "evidence": ev}
    return {"state": "stable", "why": f"the waiting queue stayed below {math.ceil(material):,} requests (peak {peak:,})",
            "knob": None, "evidence": ev}


def verdict_line(v: dict | None) -> str | None:
    """One line for the run table and reports."""
    if not v:
        return None
    ev = v.get("evidence") or {}
    rates = ""
    if ev.get("offered_rps") is not None:
        rates = f" (offered {ev['offered_rps']:.3g} req/s, served {ev['served_rps']:.3g} req/s)"
    line = f"verdict: {v['state']}{rates}: {v['why']}"
    return line + (f"; knob: {v['knob']}" if v.get("knob") else "")
