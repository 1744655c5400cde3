"""Distributions of a sample: ``dist`` (plain values) and ``weighted_dist`` (distinct values
with repeat counts, the ITLs), exactly as the summary reports them. Needs only numpy, so a
process of a sharded run sorts its gaps (``ItlLog.sort``) without the summary's imports."""
from __future__ import annotations

from array import array

import numpy as np

PCTS = (50, 90, 99)


def dist(values) -> dict:
    """mean, p50, p90, p99 (and max) of finite values; nulls when there are none."""
    v = np.asarray(values, dtype=float)
    finite = np.isfinite(v)
    if not finite.all():  # (no copy when all are: ten million latencies are 80 MB)
        v = v[finite]
    del finite
    if v.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p = np.percentile(v, PCTS)
    return {"mean": float(v.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "max": float(v.max())}


def weighted_dist(values, counts, lengths=None) -> dict:
    """``dist`` of a sample stored as distinct values with repeat counts (the ITLs): the same
    numbers ``dist`` gives on the expanded sample (linear-interpolated percentiles), computed in
    sorted order so the result does not depend on the order the values were recorded in.
    With ``lengths``, the counts come as runs: ``counts[i]`` for each of the next ``lengths[i]``
    values (as ``ItlLog.runs`` gives them)."""
    v, cum, total = sorted_sample(values, counts, lengths)
    if v.size == 0 or total == 0:
        return dist([])
    mean = float(np.dot(v, cum))  # (the counts as floats: what np.dot makes of int64 counts)
    cum = np.cumsum(cum, out=cum)  # in place: the counts are not needed again (exact: below 2**53)
    n = int(cum[-1])

    def at(i: int) -> float:  # the i-th smallest of the expanded sample
        return float(v[np.searchsorted(cum, i, side="right")])

    out = {"mean": mean / n}
    for p in PCTS:
        h = (n - 1) * p / 100.0
        lo = int(np.floor(h))
        a, b = at(lo), at(min(lo + 1, n - 1))
        out[f"p{p}"] = a + (h - lo) * (b - a)
    out["max"] = float(v[-1])
    return out


def sorted_sample(values, counts, lengths=None) -> tuple[np.ndarray, np.ndarray, int]:
    """The (value, count) pairs of a sample as ``weighted_dist`` takes them, in ``np.lexsort((count,
    value))`` order, counts as floats (``sorted_pairs`` where it is exact, else the lexsort), and
    the sample's size (its tokens)."""
    # views of the recorded buffers (no copies: a million-request run records tens of millions)
    v = np.frombuffer(values, float) if isinstance(values, array) else np.asarray(values, dtype=float)
    c, r = _int64(counts), None if lengths is None else _int64(lengths)
    total = int(c.sum()) if r is None else int(np.dot(c, r))
    if v.size == 0:
        return v, np.zeros(0), total
    if _pairs_sort_exactly(v, c, total):
        return (*sorted_pairs(v, c, r), total)
    c = c if r is None else np.repeat(c, r)
    order = np.lexsort((c, v))
    return v[order], c[order].astype(float), total


def _int64(a) -> np.ndarray:
    return np.frombuffer(a, np.int64) if isinstance(a, array) and a.typecode == "q" else np.asarray(a, dtype=np.int64)


def _pairs_sort_exactly(v: np.ndarray, c: np.ndarray, total: int) -> bool:
    """Whether ``sorted_pairs`` gives the (value, count) order of ``np.lexsort((c, v))`` to the
    bit: values finite and none of them -0.0 (which compares equal to 0.0 and could swap with it),
    counts and their ``total`` exact as floats."""
    return bool(np.isfinite(v).all() and not np.signbit(v).any() and c.min() >= 0 and total < 2**53)


def sorted_pairs(v: np.ndarray, c: np.ndarray, lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``v`` and ``c`` (as floats; ``c`` given as runs with ``lengths``) sorted by value, then
    count: the pairs in the order ``np.lexsort((c, v))`` puts them (equal pairs are
    interchangeable), as two contiguous arrays. For values and counts as ``_pairs_sort_exactly``
    admits them.

    One direct sort instead of lexsort's two indirect sorts and gathers: of one integer key per
    pair (``_sorted_packed``) where the pairs fit 64 bits, else of complex numbers
    (``_sorted_complex``)."""
    packed = _sorted_packed(v, c, lengths)
    return packed if packed is not None else _sorted_complex(v, c, lengths)


def _sorted_packed(v: np.ndarray, c: np.ndarray, lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """``sorted_pairs`` by sorting one unsigned 64-bit key per pair: the value's bits less the
    smallest value's (a non-negative float's bits order as the float does, and only equal floats
    share them), shifted left past the rank of the pair's count among the distinct counts. None
    when the keys do not fit: counts of 2**16 or more, or too wide a span of values for the
    ranks' bits (the ITLs of a run span a few binades and a few dozen batch sizes: some 60 bits).

    Sorting the keys is cheaper than sorting complex numbers, the ranks are spelled out a byte
    or two per value instead of eight, and the values are read back from the sorted keys in
    place: the peak is the keys and the counts returned, 16 bytes a value besides the values
    given (the complex sort's is 24). The keys are sorted by timsort (``kind="stable"``; equal keys
    are equal pairs, so any sort gives the same array): they come in ascending runs, a decode
    run's gaps growing with its context, which it merges: 40% less CPU than quicksort on a
    million-request run's 27 million gaps. Its merge buffer, at most half the keys, stays below
    that peak."""
    top = int(c.max())
    if top >> 16:
        return None
    present = np.zeros(top + 1, bool)
    present[c] = True
    distinct = np.flatnonzero(present)  # the counts that occur, ascending
    shift = (distinct.size - 1).bit_length()
    bits = v.view(np.int64)
    lo, hi = int(bits.min()), int(bits.max())
    if (hi - lo) >> (64 - shift):
        return None
    small = np.uint8 if shift <= 8 else np.uint16
    rank = (np.cumsum(present, dtype=np.int64) - 1)[c].astype(small)  # of each count among the distinct ones
    if lengths is not None:
        rank = np.repeat(rank, lengths)
    key = np.subtract(bits, lo).view(np.uint64)  # (non-negative: no wrap)
    key <<= np.uint64(shift)
    key |= rank
    del rank
    key.sort(kind="stable")
    counts, table, mask = np.empty(key.size), distinct.astype(float), np.uint64((1 << shift) - 1)
    for a in range(0, key.size, 1 << 20):  # in chunks: no index as long as the keys
        counts[a:a + (1 << 20)] = table[(key[a:a + (1 << 20)] & mask).view(np.intp)]
    key >>= np.uint64(shift)
    key += np.uint64(lo)
    return key.view(np.float64), counts


def _sorted_complex(v: np.ndarray, c: np.ndarray, lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``sorted_pairs`` by sorting complex numbers (value + 1j * count: numpy orders complex
    numbers by real part, then imaginary part). The values are then packed into the front of the
    sorted buffer in place, so the peak is that buffer plus the counts (counts given as runs are
    spelled out once, into the buffer returned)."""
    n = v.size
    spelled = c if lengths is None else np.repeat(c, lengths)
    z = np.empty(n, np.complex128)
    z.real = v
    z.imag = spelled
    z.sort()
    f = z.view(np.float64)  # value, count, value, count, ...
    counts = np.empty(n) if lengths is None else spelled.view(np.float64)  # (our own spelled-out counts: reused)
    np.copyto(counts, f[1::2])
    a = 1  # f[:n] = f[0::2], forward, in chunks that never overwrite a value not yet moved
    while a < n:
        b = min(2 * a, n)
        f[a:b] = f[2 * a:2 * b:2]
        a = b
    return f[:n], counts
