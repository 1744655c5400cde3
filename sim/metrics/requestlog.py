"""Columnar per-request records: a request's row is written when it leaves the simulation
(finished or rejected; unfinished ones at the end), and its Python object is dropped, so a
long run holds objects only for the requests in flight (DESIGN.md section 8).

With ``output.stream`` the rows also leave memory: every ``chunk_rows`` rows go to a Parquet
file in chunks (``requests.parquet`` of the results folder) and the summary reads them back
from there a batch at a time (exact quantiles, in bounded memory; see ``sim.metrics.columns``).
"""
from __future__ import annotations

from array import array

import numpy as np

from sim.request import Request, Status

STATUS = list(Status)
STATUS_CODE = {s: i for i, s in enumerate(STATUS)}

_FLOAT = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")
_INT = ("request_id", "order", "prompt_tokens", "output_tokens", "generated_tokens", "cached_tokens")
_SMALL = ("replica", "status", "preemptions", "priority")
_OBJECT = ("slo_class", "tenant", "session_id", "reject_reason")


def _f(x) -> float:
    return np.nan if x is None else x


class RequestLog:
    """One row per request that left the simulation, in the order they left (``order`` is the
    admission order, which the frame is sorted by)."""

    def __init__(self, sink=None, chunk_rows: int = 0):
        self.sink, self.chunk_rows = sink, chunk_rows  # sink(columns) takes full chunks away
        self.cols: dict[str, array | list] = {}
        for c in _FLOAT:
            self.cols[c] = array("d")
        for c in _INT:
            self.cols[c] = array("q")
        for c in _SMALL:
            self.cols[c] = array("i")
        for c in _OBJECT:
            self.cols[c] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, r: Request, order: int) -> None:
        c, s = self.cols, r.spec
        c["arrival_s"].append(s.arrival_s)
        c["first_scheduled_s"].append(_f(r.first_scheduled_s))
        c["first_token_s"].append(_f(r.first_token_s))
        c["finish_s"].append(_f(r.finish_s))
        c["max_itl_s"].append(r.max_itl_s)
        c["request_id"].append(r.id)
        c["order"].append(order)
        c["prompt_tokens"].append(s.prompt_tokens)
        c["output_tokens"].append(s.output_tokens)
        c["generated_tokens"].append(r.num_generated)
        c["cached_tokens"].append(r.cached_tokens)
        c["replica"].append(r.replica)
        c["status"].append(STATUS_CODE[r.status])
        c["preemptions"].append(r.preemptions)
        c["priority"].append(s.priority)
        c["slo_class"].append(s.slo_class)
        c["tenant"].append(s.tenant)
        c["session_id"].append(s.session_id)
        c["reject_reason"].append(r.reject_reason)
        self.rows += 1
        if self.sink is not None and self.rows >= self.chunk_rows:
            self.flush()

    def flush(self) -> None:
        """Hand the rows held so far to the sink (in admission order) and drop them."""
        if self.sink is not None and self.rows:
            self.sink(self.columns())
            self.clear()

    def columns(self) -> dict[str, np.ndarray | list]:
        """The rows as numpy arrays (object columns as lists), in admission order."""
        c = self.cols
        order = np.frombuffer(c["order"], np.int64) if self.rows else np.zeros(0, np.int64)
        idx = np.argsort(order, kind="stable")
        out: dict = {}
        for name in _FLOAT:
            out[name] = np.frombuffer(c[name], float)[idx] if self.rows else np.zeros(0)
        for name in _INT:
            out[name] = np.frombuffer(c[name], np.int64)[idx] if self.rows else np.zeros(0, np.int64)
        for name in _SMALL:
            out[name] = np.frombuffer(c[name], np.int32)[idx] if self.rows else np.zeros(0, np.int32)
        rows = idx.tolist()
        for name in _OBJECT:
            col = c[name]
            out[name] = [None] * len(col) if col.count(None) == len(col) else [col[i] for i in rows]
        return out

    def clear(self) -> None:
        self.__init__(self.sink, self.chunk_rows)
