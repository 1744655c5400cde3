"""Flat records: the engine's output turned into column tables (pandas / Arrow)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sim.metrics.requestlog import STATUS
from sim.types import COMPONENTS

STATUS_VALUES = np.array([s.value for s in STATUS], dtype=object)

REQUEST_COLUMNS = [
    "request_id", "replica", "status", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
    "prompt_tokens", "output_tokens", "generated_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s",
    "max_itl_s", "preemptions", "cached_tokens", "priority", "slo_class", "tenant", "session_id", "reject_reason",
]
FRONTEND_COLUMNS = REQUEST_COLUMNS[:4] + ["engine_arrival_s"] + REQUEST_COLUMNS[4:]
"""The columns of a run with a serving front end (``frontend``, ``sim/cluster/frontend.py``):
``arrival_s`` is then the client's send time, ``engine_arrival_s`` when the engine received the
request; ``first_token_s`` and ``finish_s`` stay engine-side, and ``ttft_s`` / ``e2e_s`` are what
the client sees (each token reaches it ``frontend.detokenize_s_per_token`` after the engine)."""


def requests_frame(out) -> pd.DataFrame:
    """One row per arrived request (completed, rejected or unfinished), in arrival order."""
    return frame_of(out.requests.columns())


def frame_of(c: dict) -> pd.DataFrame:
    """The requests table of ``RequestLog.columns()``, with the derived latencies."""
    arrival, first, finish, sched = c["arrival_s"], c["first_token_s"], c["finish_s"], c["first_scheduled_s"]
    gen = c["generated_tokens"]
    shown = c.get("frontend_out_s")  # the front end's delay of every token the client sees (None: no front end)
    ttft = first - arrival if shown is None else first + shown - arrival
    e2e = finish - arrival if shown is None else finish + shown - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(gen >= 2, (e2e - ttft) / (gen - 1), np.nan)
    cols = {
        "request_id": c["request_id"],
        "replica": c["replica"],
        "status": STATUS_VALUES[c["status"]],
        "arrival_s": arrival,
        "first_scheduled_s": sched,
        "first_token_s": first,
        "finish_s": finish,
        "prompt_tokens": c["prompt_tokens"],
        "output_tokens": c["output_tokens"],
        "generated_tokens": gen,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
        "queue_s": sched - arrival,
        "max_itl_s": c["max_itl_s"],
        "preemptions": c["preemptions"],
        "cached_tokens": c["cached_tokens"],
        "priority": c["priority"],
        "slo_class": c["slo_class"],
        "tenant": c["tenant"],
        "session_id": c["session_id"],
        "reject_reason": c["reject_reason"],
    }
    if shown is not None:
        cols["engine_arrival_s"] = c["engine_arrival_s"]
    return pd.DataFrame(cols, columns=REQUEST_COLUMNS if shown is None else FRONTEND_COLUMNS,
                        copy=False)  # the columns as they are (fresh arrays): no consolidated copy


def request_schema(frontend: bool = False):
    """The Arrow schema of ``requests.parquet`` (the columns of ``frame_of``, typed; ``frontend``:
    a run with a serving front end, ``FRONTEND_COLUMNS``)."""
    import pyarrow as pa

    types = {"request_id": pa.int64(), "replica": pa.int32(), "preemptions": pa.int32(), "priority": pa.int32()}
    for c in ("prompt_tokens", "output_tokens", "generated_tokens", "cached_tokens"):
        types[c] = pa.int64()
    for c in ("status", "slo_class", "tenant", "session_id", "reject_reason"):
        types[c] = pa.string()
    return pa.schema([(c, types.get(c, pa.float64())) for c in (FRONTEND_COLUMNS if frontend else REQUEST_COLUMNS)])


class ParquetSink:
    """Writes chunks of request rows to one Parquet file as they come (``output.stream``)."""

    def __init__(self, path, frontend: bool = False):
        self.path, self.writer, self.rows = path, None, 0
        self.schema = request_schema(frontend)

    def __call__(self, columns: dict) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame_of(columns), schema=self.schema, preserve_index=False)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema)
        self.writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        if self.writer is None:  # no request at all: an empty file with the schema
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(self.path, self.schema)
        self.writer.close()


def steps_frame(out) -> pd.DataFrame:
    """One row per engine step, in order of start time (then replica): replica, time, batch,
    tokens, KV blocks used, time breakdown."""
    s = out.steps
    cols = {
        "replica": np.frombuffer(s.replica, np.int32) if len(s.replica) else np.zeros(0, np.int32),
        "start_s": np.frombuffer(s.start_s, float) if len(s.start_s) else np.zeros(0),
        "duration_s": np.frombuffer(s.duration_s, float) if len(s.duration_s) else np.zeros(0),
    }
    for name in ("batch_size", "num_tokens", "prefill_tokens", "decode_tokens", "preempted", "kv_blocks_used", "waiting"):
        a = getattr(s, name)
        cols[name] = np.frombuffer(a, np.int32) if len(a) else np.zeros(0, np.int32)
    pools = getattr(out, "pools", None)
    if pools:  # each replica's own pool size
        blocks = np.ones(max([i for p in pools.values() for i in p["replicas"]], default=0) + 1)
        for p in pools.values():
            blocks[p["replicas"]] = max(1, p["kv_blocks_per_replica"])
        cols["kv_usage"] = cols["kv_blocks_used"] / blocks[cols["replica"]]
    else:
        cols["kv_usage"] = cols["kv_blocks_used"] / max(1, out.kv_blocks_per_replica)
    for c in COMPONENTS:
        a = s.components[c]
        cols[f"t_{c}_s"] = np.frombuffer(a, float) if len(a) else np.zeros(0)
    cols["cost_source"] = pd.Categorical(s.source) if s.source else pd.Categorical([])
    frame = pd.DataFrame(cols, copy=False)  # views on the engine's columnar buffers
    if frame["replica"].nunique() > 1:  # replicas log as their steps end: order rows by start
        frame = frame.sort_values(["start_s", "replica"], kind="stable", ignore_index=True)
    return frame
