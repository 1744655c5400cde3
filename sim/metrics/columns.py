"""The requests table as the summary reads it (``sim.metrics.summary.summarize``), from memory or
from a streamed ``requests.parquet`` in bounded memory.

The summary needs two things of the table: batches of rows, which it folds into counts, integer
sums and a minimum (exact whatever the batches); and, for each latency quantile, one float column
of the finished requests, in admission order. The in-memory table gives both directly. The file
gives batches of rows read one at a time, and each column is gathered alone (8 bytes a finished
request, plus 8 for the sorted ids that put the rows back in admission order), so ``dist`` sees
the very values, in the very order, it sees on the in-memory table: the same quantiles and the
same mean to the last bit.

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

    def finished_by(self, column: str, by: str) -> Iterator[tuple[object, np.ndarray]]:
        """``column`` (float) of the finished requests for each value of ``by`` (nulls left out),
        one value at a time, in an unspecified order within each (for order-free figures:
        quantiles)."""
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
        for k in keys.dropna().unique():
            yield k, self.done[column][(keys == k).to_numpy()].to_numpy(float)


class ParquetColumns(RequestColumns):
    """A streamed ``requests.parquet`` (``output.stream``), read ``batch_rows`` rows at a time and
    only the columns asked for (strings as dictionaries). Rows in the file are in the order
    requests left, in admission order within each written chunk."""

    def __init__(self, path, batch_rows: int = 1 << 18):
        self.path, self.batch_rows = path, batch_rows
        self._ids = None  # the finished requests' ids, sorted; None: not read yet
        self._in_order = False  # the file lists the finished requests in admission order already

    def batches(self, columns):
        import pyarrow.parquet as pq

        strings = [c for c in ("status", "slo_class", "tenant", "session_id", "reject_reason") if c in columns]
        # pre_buffer off: on, pyarrow keeps every column chunk it read until the file is closed
        with pq.ParquetFile(self.path, read_dictionary=strings, pre_buffer=False) as f:
            for b in f.iter_batches(batch_size=self.batch_rows, columns=list(columns)):
                yield b.to_pandas()

    def _finished_rows(self, columns) -> Iterator[pd.DataFrame]:
        for b in self.batches(["status", *columns]):
            done = (b["status"] == FINISHED).to_numpy()
            yield b[columns][done]

    def _sorted_ids(self) -> np.ndarray:
        """The finished requests' ids in admission order (8 bytes a request): a row's place in
        that order is where its id falls in them."""
        if self._ids is None:
            import pyarrow.parquet as pq

            ids = np.empty(pq.ParquetFile(self.path).metadata.num_rows, np.int64)
            n = 0
            for d in self._finished_rows(["request_id"]):
                ids[n:n + len(d)] = d["request_id"].to_numpy(np.int64)
                n += len(d)
            self._ids = ids[:n]
            self._in_order = not np.any(self._ids[1:] < self._ids[:-1])
            self._ids.sort()  # in place
        return self._ids

    def finished(self, column):
        ids = self._sorted_ids()
        out = np.empty(ids.size)
        if self._in_order:
            n = 0
            for d in self._finished_rows([column]):
                out[n:n + len(d)] = d[column].to_numpy(float)
                n += len(d)
            return out
        for d in self._finished_rows(["request_id", column]):
            out[np.searchsorted(ids, d["request_id"].to_numpy(np.int64))] = d[column].to_numpy(float)
        return out

    def finished_by(self, column, by):
        parts: dict = {}
        for d in self._finished_rows([by, column]):
            keys, v = d[by], d[column].to_numpy(float)
            for k in keys.dropna().unique():
                parts.setdefault(k, []).append(v[(keys == k).to_numpy()])
        for k in list(parts):  # one value's column at a time
            yield k, np.concatenate(parts.pop(k))
