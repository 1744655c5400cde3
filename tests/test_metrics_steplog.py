"""``StepLog``'s running totals (steps, peak KV blocks, steps per cost source) count every step
logged, one at a time or as decode runs, whenever they are read, with rows kept or not."""
import pickle
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.fastforward import DecodeRun
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
