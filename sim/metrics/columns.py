"""The requests table as the summary reads it (``sim.metrics.summary.summarize``), from memory or
from a streamed ``requests.parquet`` in bounded memory.

The summary needs two things of the table: batches of rows, which it folds into counts, integer
sums and a minimum (exact whatever the batches); and, for each latency quantile, one float column
of the finished requests, in admission order. The in-memory table gives both directly. The file
gives batches of rows read one at a time, and each column is gathered alone (8 bytes a finished
request) and put back in admission order, so ``dist`` sees the very values, in the very order, it
sees on the in-memory table: the same quantiles and the same mean to the last bit.

Admission order is ``request_id`` order: every workload numbers its requests 0, 1, 2, ... in the
order they arrive, and the engine admits them in that order.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

FINISHED = "finished"


class RequestColumns:
    """What ``summarize`` reads of the requests table."""

    def batches(self, columns: list[str]) -> Iterator[pd.DataFrame]:
        """The rows, in batches, with at least ``columns``."""
        raise NotImplementedError

    def finished(self, column: str) -> np.ndarray:
        """``column`` (float) of the finished requests, in admission order."""
        raise NotImplementedError

    def finished_by(self, column: str, by: str) -> dict:
        """``column`` (float) of the finished requests per value of ``by`` (nulls left out), in an
        unspecified order within each value (for order-free figures: quantiles)."""
        raise NotImplementedError


class FrameColumns(RequestColumns):
    """The requests table held in memory (``sim.metrics.records.requests_frame``: admission order)."""

    def __init__(self, req: pd.DataFrame):
        self.req = req
        self.done = req[req["status"] == FINISHED]

    def batches(self, columns):
        yield self.req  # one batch: the whole table

    def finished(self, column):
        return self.done[column].to_numpy(float)

    def finished_by(self, column, by):
        keys = self.done[by]
        return {k: self.done[column][(keys == k).to_numpy()].to_numpy(float) for k in keys.dropna().unique()}


class ParquetColumns(RequestColumns):
    """A streamed ``requests.parquet`` (``output.stream``), read ``batch_rows`` rows at a time and
    only the columns asked for (strings as dictionaries). Rows in the file are in the order
    requests left, in admission order within each written chunk."""

    def __init__(self, path, batch_rows: int = 1 << 18):
        self.path, self.batch_rows = path, batch_rows
        self._rank = self._unsorted = None
        self._count = 0

    def batches(self, columns):
        import pyarrow.parquet as pq

        strings = [c for c in ("status", "slo_class", "tenant", "session_id", "reject_reason") if c in columns]
        with pq.ParquetFile(self.path, read_dictionary=strings) as f:
            for b in f.iter_batches(batch_size=self.batch_rows, columns=list(columns)):
                yield b.to_pandas()

    def _finished_rows(self, columns) -> Iterator[pd.DataFrame]:
        for b in self.batches(["status", *columns]):
            done = (b["status"] == FINISHED).to_numpy()
            yield b[columns][done]

    def _ranks(self) -> np.ndarray | None:
        """Each finished row's place in admission order (None: the file is in that order already)."""
        if self._unsorted is None:
            ids = np.concatenate([np.zeros(0, np.int64)] +
                                 [d["request_id"].to_numpy(np.int64) for d in self._finished_rows(["request_id"])])
            self._unsorted = bool(np.any(ids[1:] < ids[:-1]))
            if self._unsorted:
                order = np.argsort(ids, kind="stable")
                del ids
                self._rank = np.empty(order.size, np.int32 if order.size < 2**31 else np.int64)
                self._rank[order] = np.arange(order.size, dtype=self._rank.dtype)
            else:
                self._count = ids.size
        return self._rank if self._unsorted else None

    def finished(self, column):
        rank = self._ranks()
        out = np.empty(self._count if rank is None else rank.size)
        pos = 0
        for d in self._finished_rows([column]):
            v = d[column].to_numpy(float)
            where = slice(pos, pos + v.size) if rank is None else rank[pos:pos + v.size]
            out[where] = v
            pos += v.size
        return out

    def finished_by(self, column, by):
        parts: dict = {}
        for d in self._finished_rows([by, column]):
            keys, v = d[by], d[column].to_numpy(float)
            for k in keys.dropna().unique():
                parts.setdefault(k, []).append(v[(keys == k).to_numpy()])
        return {k: np.concatenate(p) for k, p in parts.items()}
