"""``StepLog``'s running totals (steps, peak KV blocks, steps per cost source) count every step
logged, one at a time or as decode runs, whenever they are read, with rows kept or not."""
import pickle
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.fastforward import DecodeRun
from sim.metrics import steplog
from sim.metrics.steplog import StepLog
from sim.types import StepTime

sources = st.sampled_from(["roofline", "profiled", "database"])
events = st.lists(st.one_of(
    st.tuples(st.just("step"), sources, st.integers(0, 5000)),
    st.tuples(st.just("run"), sources, st.tuples(st.integers(1, 30), st.integers(0, 5000), st.integers(0, 5000))),
    st.tuples(st.just("read"), st.none(), st.none())), max_size=40)


def log_events(log: StepLog, evs, count=0, peak=0, by_source=None) -> tuple[int, int, Counter]:
    """Log ``evs`` on top of the totals given; the totals they should give."""
    by_source = Counter() if by_source is None else by_source
    for kind, source, x in evs:
        if kind == "step":
            log.add(0, 0.0, StepTime(0.01, source=source), 2, 0, 2, 0, x, 0)
            count, peak = count + 1, max(peak, x)
            by_source[source] += 1
        elif kind == "run":
            steps, start_used, used_end = x
            run = DecodeRun([None, None], [0.01 * j for j in range(steps + 1)], None, start_used, [], 16, source, steps)
            log.add_run(0, run, 0, 0, used_end)
            count, peak = count + steps, max(peak, run.peak_used(used_end))
            by_source[source] += steps
        else:
            assert log.sources == by_source and log.count == count and log.peak_kv_blocks == peak
    return count, peak, by_source


@settings(max_examples=200, deadline=None)
@given(events, events)
def test_totals_count_every_step(first, second):
    log = StepLog(keep_rows=False)
    count, peak, by_source = log_events(log, first)
    log = pickle.loads(pickle.dumps(log))  # as a worker process hands its log back
    count, peak, by_source = log_events(log, second, count, peak, by_source)
    assert log.count == count and log.peak_kv_blocks == peak and log.sources == by_source
    assert log.sources is log.sources  # one object


def test_merged_totals():
    """``merge`` (what ``sim.shards.merge`` does with the workers' logs) adds the totals."""
    parts = []
    for w in range(2):
        part = StepLog(keep_rows=False)
        log_events(part, [("step", "roofline", 10 * w), ("run", "roofline", (5, 3, 4)), ("step", "profiled", 1)])
        parts.append(part)
    merged = StepLog(keep_rows=False)
    for p in parts:
        merged.merge(p)
    assert merged.sources == Counter({"roofline": 12, "profiled": 2}) and merged.count == 14
    assert merged.peak_kv_blocks == 10


@settings(max_examples=200, deadline=None)
@given(start=st.floats(0, 1e6), runs=st.lists(st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=150), min_size=1,
                                              max_size=4),
       extra=st.integers(0, 3), spans=st.booleans(), pending=st.sampled_from([1, 7, 1 << 16]),
       replicas=st.booleans())
def test_run_busy_time_is_each_step_rounded_to_nanoseconds(start, runs, extra, spans, pending, replicas):
    """A run's busy time (the step log's ``busy_ns``, and ``by_replica``) is the sum of its
    steps' times, each rounded to whole nanoseconds as ``StepLog.add`` rounds one step, whether
    the run carries its steps' spans (a flow's leg) or only its times, and however many step
    times are held before they are rounded (``PENDING_STEPS``); times past the run's steps are not
    read."""
    old, steplog.PENDING_STEPS = steplog.PENDING_STEPS, pending
    try:
        log = StepLog(keep_rows=False, by_replica={} if replicas else None)
        want, per = 0, {}
        for i, gaps in enumerate(runs):
            times = [start]
            for g in gaps:
                times.append(times[-1] + g)
            times += [times[-1] + 1.0] * extra
            run = DecodeRun(None, times, None, 0, [], 16, "roofline", len(gaps))
            if spans:
                run.gaps = [b - a for a, b in zip(times, times[1:len(gaps) + 1])]
            log.add_run(i % 2, run, 0, 0, 0)
            for a, b in zip(times, times[1:len(gaps) + 1]):
                one = StepLog(keep_rows=False)
                one.add(0, a, StepTime(b - a), 1, 0, 1, 0, 0, 0)
                want += one.busy_ns
                per[i % 2] = per.get(i % 2, 0) + one.busy_ns
        assert log.busy_ns == want
        if replicas:
            assert log.by_replica == per
    finally:
        steplog.PENDING_STEPS = old


def test_workers_merge_every_process_s_extrapolation():
    """``engine.workers``: the per-operator extrapolation of each process is summed, not only the
    first process's kept."""
    from sim.shards import merge_extrapolated

    a = [{"operator": "lm_head", "queries": 3, "gpu_s": 0.5, "query_range": [[1, 4], [10, 10]], "grid_range": [[1, 2]]}]
    b = [{"operator": "lm_head", "queries": 2, "gpu_s": 0.25, "query_range": [[2, 9], [10, 10]], "grid_range": [[1, 2]]},
         {"operator": "attn", "queries": 1, "gpu_s": 0.1, "query_range": [[5, 5]], "grid_range": [[1, 2]]}]
    got = merge_extrapolated([a, b])
    assert [e["operator"] for e in got] == ["lm_head", "attn"]
    assert got[0]["queries"] == 5 and got[0]["gpu_s"] == 0.75 and got[0]["query_range"] == [[1, 9], [10, 10]]
    assert a[0]["query_range"] == [[1, 4], [10, 10]]  # the inputs are left alone


def test_workers_count_extrapolation_as_one_process():
    """A first pricing counts its out-of-range queries once, as any later step does: the count
    does not depend on how many processes priced the replicas (each process prices its own
    first steps), and the merged seconds are the one process's, to the nanosecond."""
    from sim import simulate

    base = {"cluster": {"replicas": 4}, "workload": {"rate": 20.0, "num_requests": 600}, "cost": {"model": "auto"},
            "output": {"plots": False, "progress": False, "step_records": False}}
    one, two = (simulate({**base, "engine": {"workers": w}}).summary for w in (1, 2))
    assert one["sim"]["out_of_range_queries"] == two["sim"]["out_of_range_queries"] > 0
    assert one["cost_model"]["extrapolated"] == two["cost_model"]["extrapolated"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=30), st.data())
def test_itl_extend_parts_is_one_extend_per_part(gaps, data):
    """``extend_parts`` (a decode run's gaps in one append, split into parts by the requests that
    leave) holds the very gaps and counts of one ``extend`` per part, on both ITL logs."""
    from sim.metrics.steplog import ItlLog, ItlSketch

    first = data.draw(st.integers(0, len(gaps) - 1))
    leaves = sorted(data.draw(st.lists(st.integers(0, len(gaps)), max_size=6)))
    alive = len(leaves) + data.draw(st.integers(1, 5))
    for cls in (ItlLog, ItlSketch):
        one, ref = cls(), cls()
        one.extend_parts(gaps, first, alive, leaves)
        j, a = first, alive  # the reference: a part per leave, as the runs emitted them before
        for e in leaves:
            if e > j:
                ref.extend(gaps[j:e], a)
                j = e
            a -= 1
        if j < len(gaps):
            ref.extend(gaps[j:], a)
        assert list(one.values) == list(ref.values) == gaps[first:]
        assert list(one.counts) == list(ref.counts)


def test_column_takes_lists_arrays_and_numpy():
    """A run's step-row column is an ``array("d")`` of the same values whatever the cost model
    gave (a list, a repeated array, a numpy array)."""
    from array import array

    import numpy as np

    from sim.fastforward import column

    want = [0.5, 0.25, 0.125]
    for x in (want, array("d", want), np.array(want)):
        c = column(x)
        assert isinstance(c, array) and c.typecode == "d" and list(c) == want
    rep = array("d", (0.5,)) * 3
    assert column(rep) is rep
