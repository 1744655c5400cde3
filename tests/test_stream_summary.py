"""A streamed run's summary (``output.stream``: read back from requests.parquet a batch and one
latency column at a time) is the in-memory run's summary, number for number: counts, sums, SLO
and group figures, prefix-cache figures and the latency distributions (means included, to the
last bit); only the ITL comes from a sketch, within its stated 0.05%."""
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.config import load_config
from sim.shards import run_engine
from sim.metrics.columns import FrameColumns, ParquetColumns
from sim.metrics.records import requests_frame
from sim.metrics.summary import clean_json, summarize

QUIET = {"plots": False, "progress": False, "step_records": False}

PLAIN = tiny_config(cluster={"replicas": 3}, workload=uniform_workload(30.0, 400, 300, 80), output=QUIET)
CLASSES = tiny_config(
    cluster={"replicas": 2}, output=QUIET,
    workload={"num_requests": 300, "rate": 25.0, "tenants": [
        {"name": "chat", "rate": 15.0, "slo_class": "tight"}, {"name": "batch", "rate": 10.0, "slo_class": "loose"}]},
    slo={"classes": {"tight": {"ttft_s": 0.01, "tpot_s": 0.2}, "loose": {"ttft_s": 60.0, "tpot_s": 1.0}}})
REJECTS = tiny_config(cluster={"replicas": 2}, workload=uniform_workload(20.0, 300, 600, 60), output=QUIET,
                      kv={"num_gpu_blocks": 30, "block_size": 16})
PREFIX = tiny_config(cluster={"replicas": 2}, output=QUIET, kv={"prefix_caching": True, "num_gpu_blocks": 400},
                     workload={"rate": 20.0, "num_requests": 300, "system_prompts": {"count": 4, "tokens": 256},
                               "prompt": {"kind": "uniform", "min": 8, "max": 200},
                               "output": {"kind": "uniform", "min": 1, "max": 60}})

LOST = tiny_config(cluster={"replicas": 2}, workload=uniform_workload(30.0, 300, 300, 80), output=QUIET,
                   faults={"on_crash": "lose", "events": [{"kind": "crash", "at_s": 2.0, "replica": 0, "duration_s": 1.0}]})


def streamed(cfg: dict, out, chunk_rows: int):
    return simulate({**cfg, "output": {**cfg["output"], "stream": True, "stream_chunk_rows": chunk_rows}}, out=out)


def assert_same_summary(whole: dict, stream: dict) -> None:
    """Equal in every number but the wall time and the stream note; the ITL within its sketch's error."""
    a, b = dict(whole), dict(stream)
    a["sim"] = {k: v for k, v in a["sim"].items() if k != "wall_s"}
    b["sim"] = {k: v for k, v in b["sim"].items() if k not in ("wall_s", "stream")}
    ia, ib = a.pop("itl_s"), b.pop("itl_s")
    assert a == b
    assert ia["max"] == ib["max"] and ia["mean"] == pytest.approx(ib["mean"], rel=1e-9)
    for q in ("p50", "p90", "p99"):
        assert ib[q] == pytest.approx(ia[q], rel=5e-4)


def file_out_of_admission_order(path) -> bool:
    ids = pq.read_table(path, columns=["request_id"]).column(0).to_numpy()
    return bool((ids[1:] < ids[:-1]).any())


@pytest.mark.parametrize("cfg", [PLAIN, CLASSES, REJECTS, PREFIX, LOST], ids=["plain", "classes", "rejects", "prefix", "lost"])
def test_streamed_summary_equals_the_in_memory_one(cfg, tmp_path):
    whole = simulate(cfg)
    stream = streamed(cfg, tmp_path, 37)
    assert file_out_of_admission_order(tmp_path / "requests.parquet")  # the reordering is exercised
    assert_same_summary(whole.summary, stream.summary)
    # the latency columns come back in admission order, value for value (so means add up alike)
    src, ref = ParquetColumns(tmp_path / "requests.parquet", batch_rows=50), FrameColumns(whole.requests)
    for col in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        np.testing.assert_array_equal(src.finished(col), ref.finished(col))


def test_one_chunk_in_admission_order(tmp_path):
    """One chunk holds every row, in admission order: the columns are read straight through."""
    whole = simulate(REJECTS)
    stream = streamed(REJECTS, tmp_path, 10_000)
    assert not file_out_of_admission_order(tmp_path / "requests.parquet")
    assert_same_summary(whole.summary, stream.summary)


def test_the_cases_cover_what_they_are_named_for(tmp_path):
    """Guard the fixtures: each config really produces the figures its comparison is about."""
    s = {name: simulate(cfg).summary for name, cfg in (("classes", CLASSES), ("rejects", REJECTS), ("prefix", PREFIX),
                                                        ("lost", LOST))}
    assert s["lost"]["requests"]["lost"] > 0 and s["lost"]["requests"]["lost_reasons"]
    assert set(s["classes"]["goodput"]["by_class"]) == {"tight", "loose"}
    assert set(s["classes"]["goodput"]["by_tenant"]) == {"chat", "batch"}
    assert 0 < s["classes"]["goodput"]["by_class"]["tight"]["slo_attainment"] < 1
    assert 0 < s["rejects"]["requests"]["rejected"] < s["rejects"]["requests"]["arrived"]
    assert s["rejects"]["requests"]["preemptions"] > 0
    assert s["prefix"]["prefix_cache"]["saved_prefill_tokens"] > 0


def test_many_small_chunks_and_batches(tmp_path):
    """Chunks of 7 rows (dozens of row groups), read back 5 rows at a time."""
    cfg = load_config({**CLASSES, "output": {**QUIET, "stream": True, "stream_chunk_rows": 7}})
    out = run_engine(cfg, None, stream_to=tmp_path / "requests.parquet")
    path = tmp_path / "requests.parquet"
    assert pq.ParquetFile(path).num_row_groups >= 40
    ref = simulate(CLASSES).summary
    got = summarize(out, ParquetColumns(path, batch_rows=5), None, ref["sim"]["wall_s"])
    assert_same_summary(ref, clean_json(got))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(1, 120), batch=st.integers(1, 500), seed=st.integers(0, 50))
def test_any_chunk_and_batch_size_gives_the_same_summary(tmp_path_factory, chunk, batch, seed):
    cfg = {**CLASSES, "seed": seed}
    d = tmp_path_factory.mktemp("s")
    stream = load_config({**cfg, "output": {**QUIET, "stream": True, "stream_chunk_rows": chunk}})
    out = run_engine(stream, None, stream_to=d / "requests.parquet")
    whole = run_engine(load_config(cfg), None)
    a = summarize(whole, requests_frame(whole), None, 0.0)
    b = summarize(out, ParquetColumns(d / "requests.parquet", batch_rows=batch), None, 0.0)
    for k in ("requests", "ttft_s", "tpot_s", "e2e_s", "queue_s", "throughput", "goodput", "prefix_cache"):
        assert a[k] == b[k], k


def test_streamed_requests_are_read_from_the_file_when_asked(tmp_path):
    """A streamed run holds no request rows; ``res.requests`` reads the file (arrival order), and
    gives the rows the in-memory run holds."""
    whole = simulate(PLAIN)
    stream = streamed(PLAIN, tmp_path, 37)
    assert stream._requests is None and stream.requests_path == tmp_path / "requests.parquet"
    got, ref = stream.requests, whole.requests
    assert got is not stream.requests  # nothing kept between accesses
    assert list(got.columns) == list(ref.columns) and len(got) == len(ref)
    norm = lambda f: f.astype(object).where(f.notna(), None)  # noqa: E731  (all-null string columns read back typed)
    pd.testing.assert_frame_equal(norm(got), norm(ref))
