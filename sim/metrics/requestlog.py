"""Columnar per-request records: a request's row is written when it leaves the simulation
(finished or rejected; unfinished ones at the end), and its Python object is dropped, so a
long run holds objects only for the requests in flight (docs/architecture.md section 8).

With ``output.stream`` the rows also leave memory: every ``chunk_rows`` rows go to a Parquet
file in chunks (``requests.parquet`` of the results folder) and the summary reads them back
from there a batch at a time (exact quantiles, in bounded memory; see ``sim.metrics.columns``).
"""
from __future__ import annotations

import struct
from array import array

import numpy as np

from sim.request import Request, Status

STATUS = list(Status)
STATUS_CODE = {s: i for i, s in enumerate(STATUS)}

_FLOAT = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")
_INT = ("request_id", "order", "prompt_tokens", "output_tokens", "generated_tokens", "cached_tokens")
_SMALL = ("replica", "status", "preemptions", "priority")
_OBJECT = ("slo_class", "tenant", "session_id", "reject_reason")
_NUMBERS = _FLOAT + _INT + _SMALL
_ROW = struct.Struct("=" + "d" * len(_FLOAT) + "q" * len(_INT) + "i" * len(_SMALL))  # a row's numbers, packed
_ROW_FIELDS = np.dtype([(c, np.float64) for c in _FLOAT] + [(c, np.int64) for c in _INT] + [(c, np.int32) for c in _SMALL])
_pack = _ROW.pack
_NAN = np.nan


class RequestLog:
    """One row per request that left the simulation, in the order they left (``order`` is the
    admission order, which the frame is sorted by).

    A row's numbers are packed into one buffer as its request leaves (one ``struct`` pack instead
    of an append per column) and moved into the columns (``cols``) when they are read."""

    def __init__(self, sink=None, chunk_rows: int = 0, frontend_out_s: float | None = None):
        self.sink, self.chunk_rows = sink, chunk_rows  # sink(columns) takes full chunks away
        # with a serving front end (sim/cluster/frontend.py): arrival_s is the client's send time,
        # engine_arrival_s when the engine received the request, and every token reaches the client
        # frontend_out_s after the engine emitted it (None: no front end, no such columns)
        self.frontend_out_s = frontend_out_s
        self._engine_arrival = array("d") if frontend_out_s is not None else None
        self._cols: dict[str, array | list] = {}
        for c in _FLOAT:
            self._cols[c] = array("d")
        for c in _INT:
            self._cols[c] = array("q")
        for c in _SMALL:
            self._cols[c] = array("i")
        for c in _OBJECT:
            self._cols[c] = []
        self._objects = tuple(self._cols[c] for c in _OBJECT)
        self._packed = bytearray()  # the numbers of the rows added since the columns were read, as _ROW
        self.rows = 0

    @property
    def cols(self) -> dict[str, array | list]:
        """The columns, every row added so far in them: typed arrays (``array``), lists for the
        object columns."""
        if self._packed:
            packed = np.frombuffer(self._packed, _ROW_FIELDS)
            for c in _NUMBERS:
                self._cols[c].frombytes(packed[c].tobytes())
            self._packed = bytearray()
        return self._cols

    def __len__(self) -> int:
        return self.rows

    def add(self, r: Request, order: int) -> None:
        s = r.spec
        scheduled, first, finish = r.first_scheduled_s, r.first_token_s, r.finish_s  # None: NaN
        if self._engine_arrival is not None:
            self._engine_arrival.append(s.arrival_s)
        self._packed += _pack(s.arrival_s if s.sent_s is None else s.sent_s, _NAN if scheduled is None else scheduled, _NAN if first is None else first,
                              _NAN if finish is None else finish, r.max_itl_s,
                              r.id, order, s.prompt_tokens, s.output_tokens, r.num_generated, r.cached_tokens,
                              r.replica, STATUS_CODE[r.status], r.preemptions, s.priority)
        slo_class, tenant, session_id, reject_reason = self._objects
        slo_class.append(s.slo_class)
        tenant.append(s.tenant)
        session_id.append(s.session_id)
        reject_reason.append(r.reject_reason)
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
        if self._engine_arrival is not None:
            out["engine_arrival_s"] = np.frombuffer(self._engine_arrival, float)[idx] if self.rows else np.zeros(0)
            out["frontend_out_s"] = np.full(self.rows, self.frontend_out_s)
        rows = None  # idx as a list, made for the first object column that holds anything
        for name in _OBJECT:
            col = c[name]
            if col.count(None) == len(col):
                out[name] = [None] * len(col)
            else:
                rows = idx.tolist() if rows is None else rows
                out[name] = [col[i] for i in rows]
        return out

    def merge(self, other: "RequestLog") -> None:
        """Append ``other``'s rows (another process's log of other replicas: ``sim.shards``)."""
        cols = self.cols
        for name, col in other.cols.items():
            cols[name].extend(col)
        if other._engine_arrival is not None:
            if self._engine_arrival is None:  # (an empty log taking a front-end run's rows)
                self.frontend_out_s, self._engine_arrival = other.frontend_out_s, array("d")
            self._engine_arrival.extend(other._engine_arrival)
        self.rows += other.rows

    def clear(self) -> None:
        self.__init__(self.sink, self.chunk_rows, self.frontend_out_s)
