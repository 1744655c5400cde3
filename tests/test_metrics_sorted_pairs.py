"""``sorted_pairs`` gives the pairs in ``np.lexsort`` order, to the bit, by either of its sorts:
the packed 64-bit keys where the pairs fit them, the complex numbers where they do not."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics.weighted import _sorted_complex, _sorted_packed, sorted_pairs


def lexsorted(v, c):
    order = np.lexsort((c, v))
    return v[order], c[order].astype(float)


def bits(a):
    return np.ascontiguousarray(a).view(np.int64).tolist()


# ITL-like values (a narrow span: the packed keys fit) with ties, or any non-negative float
narrow = st.one_of(st.sampled_from([0.0071, 0.0071000000000001, 0.0125, 0.03]), st.floats(1e-3, 0.5))
wide = st.one_of(narrow, st.sampled_from([0.0, 5e-324, 1e300]), st.floats(0.0, 1e308, allow_subnormal=True))
counts = st.one_of(st.integers(0, 40), st.integers(0, 70_000))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.one_of(narrow, wide), max_size=8), counts), min_size=1, max_size=50),
       st.booleans())
def test_sorted_pairs_is_the_lexsort_order(runs, spelled):
    v = np.array([g for gs, _ in runs for g in gs], float)
    if not v.size:
        return
    tokens = np.array([t for _, t in runs], np.int64)
    lengths = np.array([len(gs) for gs, _ in runs], np.int64)
    c = np.repeat(tokens, lengths)
    want_v, want_c = lexsorted(v, c)
    for got_v, got_c in (sorted_pairs(v, c) if spelled else sorted_pairs(v, tokens, lengths),
                         _sorted_complex(v, c, None)):
        assert bits(got_v) == bits(want_v) and bits(got_c) == bits(want_c)
        assert got_v.flags.c_contiguous and got_c.flags.c_contiguous


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(narrow, st.sampled_from([1, 2, 3, 7, 8, 9, 20, 256, 300, 65_535])), min_size=1,
                max_size=200))
def test_itl_like_pairs_take_the_packed_keys(pairs):
    v = np.array([g for g, _ in pairs])
    c = np.array([n for _, n in pairs], np.int64)
    got = _sorted_packed(v, c, None)
    assert got is not None
    want_v, want_c = lexsorted(v, c)
    assert bits(got[0]) == bits(want_v) and bits(got[1]) == bits(want_c)


def test_pairs_that_do_not_fit_the_keys_take_the_complex_sort():
    v = np.array([0.25, 0.125, 0.25])
    assert _sorted_packed(v, np.array([1, 1 << 16, 3]), None) is None  # a count past 16 bits
    wide = np.array([0.0, 1e300, 1e300])  # values 2**62.98 apart in their bits
    assert _sorted_packed(wide, np.array([1, 2, 3]), None) is None  # and two bits of ranks: too many
    assert _sorted_packed(wide, np.array([5, 6, 5]), None) is not None  # one bit fits
    got_v, got_c = sorted_pairs(v, np.array([1, 1 << 16, 3]))
    assert got_v.tolist() == [0.125, 0.25, 0.25] and got_c.tolist() == [1 << 16, 1.0, 3.0]


def test_runs_of_no_values_are_skipped():
    v = np.array([0.5, 0.25, 0.75])
    got_v, got_c = sorted_pairs(v, np.array([4, 9, 2, 6], np.int64), np.array([1, 0, 2, 0], np.int64))
    assert got_v.tolist() == [0.25, 0.5, 0.75] and got_c.tolist() == [2.0, 4.0, 2.0]
