"""Columnar per-step records the engine fills (one entry per engine step), and running totals
that the summary reads, so a run can drop the rows (``output.step_records: false``) and keep its
memory bounded by the requests alone."""
from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import sub

from sim.types import COMPONENTS


class ItlLog:
    """The inter-token latencies, stored weighted: distinct gaps (s) in ``values`` with the
    number of tokens that had each in ``counts`` (the tokens of a step whose previous token came
    at the step's start share one gap).

    The counts are recorded as runs (``tokens`` for each of the next ``length`` values: a decode
    run's gaps all count its batch) and spelled out one per value when ``counts`` is read: a
    decode run costs one entry instead of one per step, and the engine's loop does not build a
    list of counts. ``counts`` is one array, kept: what is written to it stays. The summary reads
    the runs as they are (``runs``), without spelling them out."""

    __slots__ = ("values", "_counts", "_tokens", "_lengths")

    def __init__(self):
        self.values = array("d")
        self._counts = array("q")  # the counts of the first len(_counts) values,
        self._tokens = array("q")  # then runs: _lengths[i] values of _tokens[i] tokens each
        self._lengths = array("q")

    def add(self, gap: float, tokens: int) -> None:
        self.values.append(gap)
        self._tokens.append(tokens)
        self._lengths.append(1)

    def extend(self, gaps: list[float], tokens: int) -> None:
        """One entry of ``tokens`` tokens per gap."""
        self.values.fromlist(gaps)
        self._tokens.append(tokens)
        self._lengths.append(len(gaps))

    def extend_parts(self, gaps: list[float], first: int, alive: int, leaves) -> None:
        """A run's ITL gaps from ``gaps[first]`` on, each for the requests that took part in its
        step, grouped as ``lifecycle.complete_step`` groups them (one count per step): ``alive``
        requests take part in step ``first``; ``leaves`` (ascending) holds, for each request that
        finishes before the last step, the position in ``gaps`` before which it leaves. The same
        entries as one ``extend`` per part, with the values appended at once (``complete_run``
        and the flows' decode legs emit their gaps here)."""
        j, tokens, lengths = first, self._tokens, self._lengths
        for e in leaves:
            if e > j:
                tokens.append(alive)
                lengths.append(e - j)
                j = e
            alive -= 1
        if j < len(gaps):
            tokens.append(alive)
            lengths.append(len(gaps) - j)
        self.values.fromlist(gaps[first:] if first else gaps)

    def merge(self, other: "ItlLog") -> None:
        """Append ``other``'s gaps and counts (another process's log: ``sim.shards``)."""
        self.values.extend(other.values)
        self.counts.extend(other.counts)

    def sort(self) -> None:
        """Hold the gaps sorted by value, then count (``weighted.sorted_sample``), each with its
        count: a sample, read in any order. A process of a sharded run sorts its own before
        handing it over, so the summary's sort of every process's gaps merges sorted runs."""
        import numpy as np

        from sim.metrics.weighted import sorted_sample

        v, counts, _ = sorted_sample(self.values, *self.runs())
        self.values, self._counts = array("d"), array("q")
        self.values.frombytes(v.tobytes())
        self._counts.frombytes(counts.astype(np.int64).tobytes())
        self._tokens, self._lengths = array("q"), array("q")

    def runs(self) -> tuple[array, array | None]:
        """The counts as they are held: (tokens, lengths), ``lengths[i]`` values of ``tokens[i]``
        tokens each, or (counts, None), one per value (``weighted_dist`` takes either)."""
        if len(self._counts) and len(self._tokens):  # both kinds held: spelled out into one
            self._spell()
        return (self._counts, None) if len(self._counts) or not len(self._tokens) else (self._tokens, self._lengths)

    @property
    def counts(self) -> array:
        """The tokens of each value (``array("q")``, one entry per value)."""
        if len(self._tokens):
            self._spell()
        return self._counts

    def _spell(self) -> None:
        import numpy as np

        spelled = np.repeat(np.frombuffer(self._tokens, np.int64), np.frombuffer(self._lengths, np.int64))
        self._counts.frombytes(memoryview(spelled).cast("B"))
        self._tokens, self._lengths = array("q"), array("q")


class ItlSketch:
    """The ITL distribution in bounded memory (``output.stream``): gaps are buffered, then folded
    into log-spaced buckets of relative width ``alpha`` (a mergeable histogram, as in
    DDSketch, Masson et al., VLDB 2019). A quantile is the geometric middle of its bucket,
    within ``alpha / 2`` relative error of the exact value (gaps below 1 ns share one bucket);
    count, max and min are exact, the mean up to float rounding."""

    FLOOR = 1e-9

    def __init__(self, alpha: float = 0.001, buffer: int = 1 << 20):
        import numpy as np

        self.alpha, self.buffer = alpha, buffer
        self.values, self.counts = array("d"), array("q")
        self.log_base = float(np.log1p(alpha))
        self.hist: dict[int, int] = {}
        self.n, self.total, self.max, self.min = 0, 0.0, float("-inf"), float("inf")

    def add(self, gap: float, tokens: int) -> None:
        self.values.append(gap)
        self.counts.append(tokens)
        if len(self.values) >= self.buffer:
            self.fold()

    def extend(self, gaps: list[float], tokens: int) -> None:
        self.values.fromlist(gaps)
        self.counts.fromlist([tokens] * len(gaps))
        if len(self.values) >= self.buffer:
            self.fold()

    def extend_parts(self, gaps: list[float], first: int, alive: int, leaves) -> None:
        """As ``ItlLog.extend_parts``."""
        j = first
        for e in leaves:
            if e > j:
                self.extend(gaps[j:e], alive)
                j = e
            alive -= 1
        if j < len(gaps):
            self.extend(gaps[j:] if j else gaps, alive)

    def fold(self) -> None:
        import numpy as np

        if not len(self.values):
            return
        v = np.frombuffer(self.values, float)
        c = np.frombuffer(self.counts, np.int64)
        self.n += int(c.sum())
        self.total += float(np.dot(v, c))
        self.max, self.min = max(self.max, float(v.max())), min(self.min, float(v.min()))
        keys = np.floor(np.log(np.maximum(v, self.FLOOR)) / self.log_base).astype(np.int64)
        uk, inv = np.unique(keys, return_inverse=True)
        for k, cnt in zip(uk.tolist(), np.bincount(inv, weights=c).tolist()):
            self.hist[k] = self.hist.get(k, 0) + int(cnt)
        self.values, self.counts = array("d"), array("q")

    def dist(self) -> dict:
        """mean, p50, p90, p99, max as ``summary.weighted_dist`` gives them (percentiles
        interpolated linearly between order statistics), each order statistic from its bucket."""
        import numpy as np

        self.fold()
        if not self.n:
            return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
        keys = np.array(sorted(self.hist), dtype=np.int64)
        cum = np.cumsum([self.hist[k] for k in keys.tolist()])
        mid = np.clip(np.exp((keys + 0.5) * self.log_base), self.min, self.max)

        def at(i: int) -> float:
            return float(mid[np.searchsorted(cum, i, side="right")])

        out = {"mean": self.total / self.n}
        for p in (50, 90, 99):
            h = (self.n - 1) * p / 100.0
            lo = int(np.floor(h))
            a, b = at(lo), at(min(lo + 1, self.n - 1))
            out[f"p{p}"] = a + (h - lo) * (b - a)
        out["max"] = self.max
        return out


@dataclass
class StepLog:
    """Columnar per-step records (one entry per engine step), and running totals: ``count``,
    ``peak_kv_blocks`` and ``sources`` (steps per cost source)."""

    replica: array = field(default_factory=lambda: array("i"))
    start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    batch_size: array = field(default_factory=lambda: array("i"))
    num_tokens: array = field(default_factory=lambda: array("i"))
    prefill_tokens: array = field(default_factory=lambda: array("i"))
    decode_tokens: array = field(default_factory=lambda: array("i"))
    preempted: array = field(default_factory=lambda: array("i"))
    kv_blocks_used: array = field(default_factory=lambda: array("i"))
    waiting: array = field(default_factory=lambda: array("i"))
    source: list = field(default_factory=list)
    components: dict = field(default_factory=lambda: {c: array("d") for c in COMPONENTS})
    keep_rows: bool = True
    count: int = 0  # running totals, kept with or without rows
    peak_kv_blocks: int = 0
    _busy: int = field(default=0, init=False, repr=False)  # busy_ns, less what _pending holds
    track_busy: bool = True
    by_replica: dict | None = None
    """Busy nanoseconds per replica (as ``busy_ns``, which it needs), when a dict is given
    (pools: each pool's busy share); read it after ``fold_busy``."""
    _pending: dict = field(default_factory=dict, init=False, repr=False)
    # by replica, the step times of decode runs not yet rounded and summed (``fold_busy``): a
    # run's steps are appended at C speed and rounded with numpy, PENDING_STEPS at a time
    _sources: Counter = field(default_factory=Counter, init=False, repr=False)
    # the steps counted since ``sources`` was last read: a Counter's item assignment dispatches
    # through Python (it defines __delitem__), about three times a plain dict's
    _recent: defaultdict = field(default_factory=lambda: defaultdict(int), init=False, repr=False)

    @property
    def busy_ns(self) -> int:
        """Step time summed over every step of every replica, each step rounded to whole
        nanoseconds (an integer: the same sum in any order, so with ``engine.workers`` too); kept
        only with ``track_busy`` (what the share of extrapolated time needs: a cost model that
        can leave its measured grid), else 0."""
        self.fold_busy()
        return self._busy

    def fold_busy(self, replica: int | None = None) -> None:
        """Round and add the pending step times (of ``replica``, or of every replica) to
        ``busy_ns`` and ``by_replica``: ``floor(t * 1e9 + 0.5)`` of each, as ``add`` rounds one
        step (numpy's products and sums of doubles are IEEE's, element by element)."""
        import numpy as np

        for r in ([replica] if replica is not None else list(self._pending)):
            times = self._pending.pop(r, None)
            if not times:
                continue
            ns = int(np.floor(np.frombuffer(times, float) * 1e9 + 0.5).astype(np.int64).sum())
            self._busy += ns
            if self.by_replica is not None:
                self.by_replica[r] = self.by_replica.get(r, 0) + ns

    @property
    def sources(self) -> Counter:
        """Steps per cost source (the one object: what is added to it stays)."""
        if self._recent:
            self._sources.update(self._recent)
            self._recent.clear()
        return self._sources

    def add(self, replica: int, start: float, st, batch: int, prefill: int, decode: int, preempted: int,
            kv_used: int, waiting: int) -> None:
        self.count += 1
        if self.track_busy:
            ns = int(st.total * 1e9 + 0.5)
            self._busy += ns
            if self.by_replica is not None:
                self.by_replica[replica] = self.by_replica.get(replica, 0) + ns
        if kv_used > self.peak_kv_blocks:
            self.peak_kv_blocks = kv_used
        self._recent[st.source] += 1
        if not self.keep_rows:
            return
        self.replica.append(replica)
        self.start_s.append(start)
        self.duration_s.append(st.total)
        self.batch_size.append(batch)
        self.num_tokens.append(prefill + decode)
        self.prefill_tokens.append(prefill)
        self.decode_tokens.append(decode)
        self.preempted.append(preempted)
        self.kv_blocks_used.append(kv_used)
        self.waiting.append(waiting)
        self.source.append(st.source)
        c = self.components
        c["gemm"].append(st.gemm)
        c["attn_prefill"].append(st.attn_prefill)
        c["attn_decode"].append(st.attn_decode)
        c["comm"].append(st.comm)
        c["other_gpu"].append(st.other_gpu)
        c["cpu"].append(st.cpu)
        c["swap"].append(st.swap)

    def merge(self, other: "StepLog") -> None:
        """Add ``other``'s totals and rows (another process's log of other replicas: ``sim.shards``;
        rows are kept only if this log keeps them)."""
        self.count += other.count
        self.fold_busy()
        self._busy += other.busy_ns  # (folds other's)
        if self.by_replica is not None and other.by_replica:
            for i, ns in other.by_replica.items():
                self.by_replica[i] = self.by_replica.get(i, 0) + ns
        self.peak_kv_blocks = max(self.peak_kv_blocks, other.peak_kv_blocks)
        self.sources.update(other.sources)
        if self.keep_rows:
            for name in ("replica", "start_s", "duration_s", "batch_size", "num_tokens", "prefill_tokens",
                         "decode_tokens", "preempted", "kv_blocks_used", "waiting", "source"):
                getattr(self, name).extend(getattr(other, name))
            for c in COMPONENTS:
                self.components[c].extend(other.components[c])

    def add_run(self, replica: int, run, waiting: int, waiting_end: int, used_end: int) -> None:
        """Rows of a decode run: identical to what ``add`` would log step by step (the last
        row sees the arrivals and finishes of the run's last step; a run that went on past
        finishes has each step's batch size in ``run.sizes``)."""
        k = run.steps
        self.count += k
        if self.track_busy and k > 0:
            times = self._pending.get(replica)
            if times is None:
                times = self._pending[replica] = array("d")
            if run.columns is not None:  # (the priced totals, else the steps' spans)
                times.extend(run.columns["total"][:k])
            elif run.gaps is not None:
                times.fromlist(run.gaps)
            else:
                t = run.times
                times.extend(map(sub, t[1:k + 1], t))
            if len(times) >= PENDING_STEPS:
                self.fold_busy(replica)
        if used_end > self.peak_kv_blocks or run.most_used() > self.peak_kv_blocks:  # (else no step can raise it)
            peak = run.peak_used(used_end)
            if peak > self.peak_kv_blocks:
                self.peak_kv_blocks = peak
        self._recent[run.source] += k
        if not self.keep_rows:
            return
        used = run.used
        used[-1] = used_end
        self.replica.extend(array("i", (replica,)) * k)  # (repeated values as arrays: copied, not converted)
        self.start_s.extend(run.times[:k])
        self.duration_s.extend(run.columns["total"])
        nk, zeros = array("i", (len(run.reqs),)) * k if run.sizes is None else run.sizes, array("i", (0,)) * k
        self.batch_size.extend(nk)
        self.num_tokens.extend(nk)
        self.prefill_tokens.extend(zeros)
        self.decode_tokens.extend(nk)
        self.preempted.extend(zeros)
        self.kv_blocks_used.extend(used)
        self.waiting.extend(array("i", (waiting,)) * (k - 1))
        self.waiting.append(waiting_end)
        self.source.extend([run.source] * k)
        for c in COMPONENTS:
            self.components[c].extend(run.columns[c])


PENDING_STEPS = 1 << 16
"""Decode-run step times a step log holds per replica before rounding and summing them."""

