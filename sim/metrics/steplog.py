"""Columnar per-step records the engine fills (one entry per engine step), and running totals
that the summary reads, so a run can drop the rows (``output.step_records: false``) and keep its
memory bounded by the requests alone."""
from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field

from sim.types import COMPONENTS


class ItlLog:
    """The inter-token latencies, stored weighted: distinct gaps (s) in ``values`` with the
    number of tokens that had each in ``counts`` (the tokens of a step whose previous token came
    at the step's start share one gap)."""

    __slots__ = ("values", "counts")

    def __init__(self):
        self.values = array("d")
        self.counts = array("q")

    def add(self, gap: float, tokens: int) -> None:
        self.values.append(gap)
        self.counts.append(tokens)

    def extend(self, gaps: list[float], tokens: int) -> None:
        """One entry of ``tokens`` tokens per gap."""
        self.values.extend(gaps)
        self.counts.extend([tokens] * len(gaps))


@dataclass
class StepLog:
    """Columnar per-step records (one entry per engine step)."""

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
    sources: Counter = field(default_factory=Counter)

    def add(self, replica: int, start: float, st, batch: int, prefill: int, decode: int, preempted: int,
            kv_used: int, waiting: int) -> None:
        self.count += 1
        if kv_used > self.peak_kv_blocks:
            self.peak_kv_blocks = kv_used
        self.sources[st.source] += 1
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

    def add_run(self, replica: int, run, waiting: int, waiting_end: int, used_end: int) -> None:
        """Rows of a decode run: identical to what ``add`` would log step by step (the last
        row sees the arrivals and finishes of the run's last step)."""
        k, n = run.steps, len(run.reqs)
        used = run.used
        used[-1] = used_end
        self.count += k
        self.peak_kv_blocks = max(self.peak_kv_blocks, max(used))
        self.sources[run.source] += k
        if not self.keep_rows:
            return
        self.replica.extend([replica] * k)
        self.start_s.extend(run.times[:k])
        self.duration_s.extend(run.columns["total"])
        self.batch_size.extend([n] * k)
        self.num_tokens.extend([n] * k)
        self.prefill_tokens.extend([0] * k)
        self.decode_tokens.extend([n] * k)
        self.preempted.extend([0] * k)
        self.kv_blocks_used.extend(used)
        self.waiting.extend([waiting] * (k - 1) + [waiting_end])
        self.source.extend([run.source] * k)
        for c in COMPONENTS:
            self.components[c].extend(run.columns[c])
