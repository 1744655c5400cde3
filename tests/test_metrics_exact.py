"""The fast paths of the metrics give, to the bit, what the straightforward code they replaced
gives (the reference versions are written out here)."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics.summary import PCTS, dist, weighted_dist


def weighted_dist_reference(values, counts) -> dict:
    """The ITL summary as first written: pairs ordered by np.lexsort, counts summed in that order."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(counts, dtype=np.int64)
    if v.size == 0 or c.sum() == 0:
        return dist([])
    order = np.lexsort((c, v))
    v, c = v[order], c[order]
    mean = float(np.dot(v, c))
    cum = np.cumsum(c)
    n = int(cum[-1])

    def at(i):
        return float(v[np.searchsorted(cum, i, side="right")])

    out = {"mean": mean / n}
    for p in PCTS:
        h = (n - 1) * p / 100.0
        lo = int(np.floor(h))
        a, b = at(lo), at(min(lo + 1, n - 1))
        out[f"p{p}"] = a + (h - lo) * (b - a)
    out["max"] = float(v[-1])
    return out


def same(a: dict, b: dict) -> bool:
    """Equal to the bit (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(
        x is y or (x is not None and y is not None and (math.isnan(x) and math.isnan(y) or x == y)
                   and math.copysign(1, x) == math.copysign(1, y)) for x, y in zip(a.values(), b.values()))


# few distinct values and counts, so that pairs tie on the value, on both, or not at all
gaps = st.one_of(st.sampled_from([0.0, 1e-3, 0.0071, 0.0071000000000001, 0.5, 3.0]),
                 st.floats(0.0, 10.0, allow_subnormal=True))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(gaps, st.integers(0, 5000)), min_size=1, max_size=400))
def test_weighted_dist_equals_the_lexsort_version(pairs):
    v = [g for g, _ in pairs]
    c = [n for _, n in pairs]
    assert same(weighted_dist(v, c), weighted_dist_reference(v, c))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-0.0, 0.0, -1.0, 2.0, math.inf, -math.inf, math.nan]), st.integers(0, 9)),
                min_size=1, max_size=60))
def test_weighted_dist_outside_the_fast_path_is_unchanged(pairs):
    v = [g for g, _ in pairs]
    c = [n for _, n in pairs]
    assert same(weighted_dist(v, c), weighted_dist_reference(v, c))


def test_weighted_dist_on_many_gaps_with_ties():
    rng = np.random.default_rng(3)
    v = np.round(rng.lognormal(-5, 0.5, 200_000), 7)  # about one value in ten shared
    c = rng.integers(1, 30, v.size)
    assert same(weighted_dist(v, c), weighted_dist_reference(v, c))


@settings(max_examples=60, deadline=None)
@given(arrival=st.sampled_from(["poisson", "gamma"]), rate=st.floats(0.5, 500.0), cv=st.floats(0.2, 5.0),
       num=st.one_of(st.none(), st.integers(1, 3000)), duration=st.one_of(st.none(), st.floats(0.5, 200.0)),
       prompt=st.sampled_from([{"kind": "lognormal", "median": 300, "sigma": 2.5, "max": 4000},
                               {"kind": "uniform", "min": 3, "max": 90}, {"kind": "fixed", "value": 12}]),
       seed=st.integers(0, 2**32), ctx=st.one_of(st.none(), st.integers(2, 5000)))
def test_renewal_stream_equals_the_general_one(arrival, rate, cv, num, duration, prompt, seed, ctx):
    import copy

    from sim.config import load_config
    from sim.workload import synthetic

    if num is None and duration is None:
        num = 100
    if num is None and duration * rate > 5000:
        duration = 5000 / rate
    cfg = load_config({"workload": {"arrival": arrival, "rate": rate, "cv": cv, "num_requests": num,
                                    "duration_s": duration, "prompt": prompt}}).workload
    rng = np.random.default_rng(seed)
    fast, general = {"prompt": 0, "output": 0}, {"prompt": 0, "output": 0}
    a = list(synthetic._renewal_requests(cfg, copy.deepcopy(rng), fast, ctx))
    b = list(synthetic._merged_requests(cfg, copy.deepcopy(rng), general, ctx))
    assert repr(a) == repr(b) and fast == general


ops = st.lists(st.one_of(st.tuples(st.just("add"), st.floats(0, 1), st.integers(0, 300)),
                         st.tuples(st.just("extend"), st.lists(st.floats(0, 1), max_size=20), st.integers(0, 300)),
                         st.tuples(st.just("read"), st.none(), st.none())), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops, ops)
def test_itl_log_counts_are_one_per_value_in_order(first, second):
    from array import array

    from sim.metrics.steplog import ItlLog

    log, values, counts = ItlLog(), [], []
    for kind, gaps, tokens in first + [("merge", None, None)] + second:
        if kind == "add":
            log.add(gaps, tokens)
            values.append(gaps)
            counts.append(tokens)
        elif kind == "extend":
            log.extend(gaps, tokens)
            values += gaps
            counts += [tokens] * len(gaps)
        elif kind == "merge":  # as sim.shards merges the workers' logs
            other = ItlLog()
            other.extend([0.5, 0.25], 7)
            log.values.extend(other.values)
            log.counts.extend(other.counts)
            values += [0.5, 0.25]
            counts += [7, 7]
        else:
            assert log.counts == array("q", counts)
    assert same(weighted_dist(log.values, *log.runs()), weighted_dist_reference(values, counts))
    assert log.values == array("d", values) and log.counts == array("q", counts)
    assert log.counts is log.counts  # one array, kept
    assert log.runs() == (log.counts, None)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 3))
def test_a_sorted_itl_log_holds_the_same_sample_and_merges_to_the_same_summary(evs, parts):
    """``ItlLog.sort`` (what a sharded run's processes do before handing their gaps over) keeps
    every (gap, tokens) pair, sorted by gap then tokens, and the merged logs' summary is the
    one of the unsorted logs."""
    from collections import Counter

    from sim.metrics.steplog import ItlLog

    logs, plain = [ItlLog() for _ in range(parts)], ItlLog()
    for i, (kind, gaps, tokens) in enumerate(evs):
        for log in (logs[i % parts], plain):
            if kind == "add":
                log.add(gaps, tokens)
            elif kind == "extend":
                log.extend(gaps, tokens)
    before = [Counter(zip(log.values, log.counts)) for log in logs]
    merged = ItlLog()
    for log, pairs in zip(logs, before):
        log.sort()
        got = list(zip(log.values, log.counts))
        assert got == sorted(got) and Counter(got) == pairs
        merged.values.extend(log.values)
        merged.counts.extend(log.counts)
    assert repr(weighted_dist(merged.values, *merged.runs())) == repr(weighted_dist(plain.values, *plain.runs()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(gaps, max_size=12), st.integers(0, 5000)), min_size=1, max_size=60),
       st.booleans())
def test_weighted_dist_of_runs_equals_the_spelled_out_counts(runs, odd):
    v = [g for gs, _ in runs for g in gs]
    if odd and v:  # a value outside the fast path
        v[len(v) // 2] = -0.0
    tokens, lengths = [t for _, t in runs], [len(gs) for gs, _ in runs]
    c = [t for gs, t in runs for _ in gs]
    assert same(weighted_dist(v, tokens, lengths), weighted_dist_reference(v, c))
