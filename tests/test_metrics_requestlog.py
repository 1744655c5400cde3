"""``RequestLog`` holds, and gives back, every field of every row as it was added, however the
adds and the reads of its columns interleave (rows packed, then moved into the columns)."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics.requestlog import RequestLog
from sim.request import Request, Status
from sim.types import RequestSpec

times = st.one_of(st.none(), st.floats(0, 1e6), st.just(0))
names = st.one_of(st.none(), st.sampled_from(["a", "gold", "tenant-7"]))
rows = st.fixed_dictionaries({
    "arrival_s": st.floats(0, 1e6), "scheduled": times, "first": times, "finish": times,
    "max_itl_s": st.floats(0, 10), "prompt": st.integers(1, 2**40), "output": st.integers(1, 2**20),
    "generated": st.integers(0, 2**20), "cached": st.integers(0, 2**20), "replica": st.integers(-1, 2**31 - 1),
    "status": st.sampled_from(list(Status)), "preemptions": st.integers(0, 1000), "priority": st.integers(-5, 5),
    "slo_class": names, "tenant": names, "session_id": names, "reject_reason": names,
    "read_after": st.booleans(),
})


def request(i: int, f: dict) -> Request:
    r = Request(RequestSpec(i, f["arrival_s"], f["prompt"], f["output"], None, None, 512, f["session_id"],
                            f["priority"], f["slo_class"], f["tenant"]))
    r.first_scheduled_s, r.first_token_s, r.finish_s = f["scheduled"], f["first"], f["finish"]
    r.max_itl_s, r.num_generated, r.cached_tokens = f["max_itl_s"], f["generated"], f["cached"]
    r.replica, r.status, r.preemptions, r.reject_reason = f["replica"], f["status"], f["preemptions"], f["reject_reason"]
    return r


def expected(i: int, order: int, f: dict) -> dict:
    nan = lambda x: math.nan if x is None else float(x)  # noqa: E731
    return {"arrival_s": f["arrival_s"], "first_scheduled_s": nan(f["scheduled"]), "first_token_s": nan(f["first"]),
            "finish_s": nan(f["finish"]), "max_itl_s": f["max_itl_s"], "request_id": i, "order": order,
            "prompt_tokens": f["prompt"], "output_tokens": f["output"], "generated_tokens": f["generated"],
            "cached_tokens": f["cached"], "replica": f["replica"], "status": list(Status).index(f["status"]),
            "preemptions": f["preemptions"], "priority": f["priority"], "slo_class": f["slo_class"],
            "tenant": f["tenant"], "session_id": f["session_id"], "reject_reason": f["reject_reason"]}


def same(a, b) -> bool:
    """Equal, float bits included (NaN equal to NaN)."""
    if isinstance(a, float) or isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return a == b and type(a) is type(b)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, max_size=40), st.randoms(use_true_random=False))
def test_rows_come_back_as_added(fields, rnd):
    log = RequestLog()
    orders = list(range(len(fields)))
    rnd.shuffle(orders)  # rows leave in another order than admission
    for i, (order, f) in enumerate(zip(orders, fields)):
        log.add(request(i, f), order)
        if f["read_after"]:
            assert len(log.cols["order"]) == i + 1
    assert len(log) == len(fields)
    cols = log.columns()
    want = sorted((expected(i, o, f) for i, (o, f) in enumerate(zip(orders, fields))), key=lambda w: w["order"])
    for j, w in enumerate(want):
        for name, value in w.items():
            got = cols[name][j]
            assert same(got.item() if isinstance(got, np.generic) else got, value), (name, got, value)


def test_merged_logs_hold_every_row():
    """``merge`` (what ``sim.shards.merge`` does with the workers' logs) keeps every row."""
    parts = []
    for w in range(2):
        part = RequestLog()
        for i in range(w, 6, 2):
            part.add(request(i, {"arrival_s": i / 2, "scheduled": None, "first": 1.0 + i, "finish": None,
                                 "max_itl_s": 0.0, "prompt": 10, "output": 3, "generated": 1, "cached": 0,
                                 "replica": w, "status": Status.RUNNING, "preemptions": 0, "priority": 0,
                                 "slo_class": None, "tenant": "t" if i == 3 else None, "session_id": None,
                                 "reject_reason": None}), i)
        parts.append(part)
    merged = RequestLog()
    for p in parts:
        merged.merge(p)
    cols = merged.columns()
    assert cols["request_id"].tolist() == list(range(6)) and cols["replica"].tolist() == [0, 1, 0, 1, 0, 1]
    assert cols["tenant"] == [None, None, None, "t", None, None]
    assert np.isnan(cols["finish_s"]).all() and cols["first_token_s"].tolist() == [1.0 + i for i in range(6)]


def test_a_sink_takes_every_chunk_and_the_log_keeps_none():
    chunks = []
    log = RequestLog(chunks.append, chunk_rows=3)
    f = {"arrival_s": 0.5, "scheduled": 0.5, "first": 0.75, "finish": 1.0, "max_itl_s": 0.25, "prompt": 4,
         "output": 2, "generated": 2, "cached": 0, "replica": 0, "status": Status.FINISHED, "preemptions": 0,
         "priority": 0, "slo_class": None, "tenant": None, "session_id": None, "reject_reason": None}
    for i in range(7):
        log.add(request(i, f), i)
    assert [c["request_id"].tolist() for c in chunks] == [[0, 1, 2], [3, 4, 5]]
    assert len(log) == 1 and len(log.cols["order"]) == 1
    log.flush()
    assert chunks[-1]["request_id"].tolist() == [6] and len(log) == 0
