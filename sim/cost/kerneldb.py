"""Kernel-database cost model: every GPU operator of a step priced from measured CUDA kernel
latencies of the aiconfigurator-core database (a dependency, pinned in pyproject.toml; data read from the
installed package by ``sim.cost.kerneldb_data``), per framework (vLLM, SGLang, TRT-LLM) and version.

Per decoder layer on one GPU (shapes from ``sim.cost.ops``; tensor parallelism shards n or k):
- GEMMs qkv, o, gate_up, down (and the LM head once per step, in bf16) by (m, n, k) in the weight
  dtype's table (bf16, fp8, fp8_block, nvfp4): trilinear interpolation of log latency over
  log m, log n, log k inside the measured grid.
- Prefill attention of chunks (q new tokens over c cached) from the context-attention table of
  the model's per-GPU shape (q heads, kv heads, head dim, kv dtype), by (batch, sequence length):
  the chunks of a step form one batch of their root-mean-square length L, and a chunk costs
  the fraction q (c + (q+1)/2) / (L (L+1)/2) of a full causal pass over its L = c + q tokens
  (FLOP share; the table holds whole sequences without cached prefix).
- Decode attention from the generation-attention table by (batch, mean kv length).
- All-reduce after attention and after the MLP from the framework's custom all-reduce table by
  message size (elements, bf16 activations: fp8 weights do not make activations 1-byte) and
  GPU count; the logits all-gather, norms, activation, rotary, embedding, KV write and sampling
  from the roofline (the database has no tables for them; they are a few percent of a step).
- MoE layers from the fused-MoE table when it holds the model's (hidden, intermediate, top-k,
  experts, tp, dtype), else the roofline's expert GEMMs. (``load_kerneldb_cost_model`` gives MoE
  and MLA models to ``sim.cost.kerneldb_moe``, which prices their layouts; dense models stay here.)
- TRT-LLM runs other kernels than the tables' generic composition (``ENGINE_KERNELS``):
  its per-tensor fp8 linears use the checkpoint's static input scale (ModelOpt checkpoints; the
  PyTorch flow has no dynamic per-tensor path), so the dynamic-scale kernel timed in the fp8 GEMM
  table (``quant|compute_scale``) is subtracted; the inputs of o_proj (attention writes fp8
  output) and down_proj (SwiGLU fused with the quantisation), and with TP > 1 of qkv and
  gate_up (the all-reduce + residual + RMSNorm + fp8-quant fusion), arrive in fp8, so the scaling
  kernel (``quant|scale_matrix``) is subtracted too. Its attention op applies the rotary
  embedding and appends to the KV cache inside the measured kernel, and with TP > 1 the
  residual add + RMSNorm run inside the all-reduce kernel: those are not priced again.
- Engine overhead: ``cpu_step_s`` (per step, by TP; ``cpu_per_seq_s`` is 0 in the committed
  fit) fitted per framework from measured serving runs (``engine_overhead.json``, written by
  ``experiments/fit_engine_overhead.py``; docs/kernel_database.md).

A head shape the attention tables lack is derived from measured shapes of the same head dim,
kv dtype and grouping as a fixed part (the launch floor) plus a part per head: q heads for
prefill (compute-bound), kv heads for decode (memory-bound); see ``_attn_grid``. Outside the
measured grid a query is priced at the nearest grid point, scaled by the roofline's ratio between
the query and that point, and counted, per operator with the GPU time it carries
(``out_of_range_total``, ``extrapolated``; ``Extrapolation``).
"""
from __future__ import annotations

import json
import math
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

import numpy as np

from sim.cost import kerneldb_data as kd
from sim.cost.ops import expert_tokens
from sim.cost.roofline import COUNT_MASK, FIELD, RooflineCostModel

SOURCE = "aiconfigurator-core kernel database"
OVERHEAD_FILE = Path(__file__).with_name("engine_overhead.json")

FP8_INPUT_OPS = frozenset({"o", "down"})
"""GEMMs whose fp8 input TRT-LLM's producing kernel writes (attention output, fused SwiGLU-quant)."""
FP8_INPUT_OPS_TP = frozenset({"qkv", "gate_up"})
"""GEMMs whose fp8 input comes from the fused all-reduce + residual + RMSNorm + quant kernel (TP > 1)."""


def engine_kernels(framework: str, tp: int) -> dict:
    """What the framework's engine fuses, as far as the per-operator tables are concerned:
    ``static_fp8`` (per-tensor fp8 linears use a static input scale), ``fp8_input`` (GEMMs fed
    fp8 by their producer), ``fused`` (elementwise operators priced inside another kernel's time).
    vLLM and SGLang: the tables' own composition (nothing fused beyond what they measure)."""
    if framework != "trtllm":
        return {"static_fp8": False, "fp8_input": frozenset(), "fused": frozenset()}
    fused = {"rotary", "kv_write"} | ({"rmsnorm"} if tp > 1 else set())
    return {"static_fp8": True, "fp8_input": FP8_INPUT_OPS | (FP8_INPUT_OPS_TP if tp > 1 else frozenset()),
            "fused": frozenset(fused)}


class Grid:
    """Multilinear interpolation of log time over log axes (1 to 3 axes); values in seconds.
    Two-axis grids (attention by batch and length, priced at every decode step) and three-axis
    grids (GEMMs by m, n, k, priced at every step of a new token count) of two or more points
    per axis take unrolled paths with the same floating-point operations as the general one
    (tests hold them bit-identical)."""

    def __init__(self, axes: list[np.ndarray], t: np.ndarray):
        self.lo = [float(a[0]) for a in axes]
        self.hi = [float(a[-1]) for a in axes]
        self.la = [np.log(np.asarray(a, dtype=float)).tolist() for a in axes]
        self.lt = np.log(np.asarray(t, dtype=float))
        self._rows = (None, None)  # (the lt they were read from, lt as nested lists)
        self._finite = True  # every log time finite (set with the rows, by ``_table``)
        self._first: dict[float, tuple[int, float]] = {}  # along's x0 -> its cell on the first axis (batch sizes)
        self._dims = len(axes) if len(axes) in (2, 3) and all(len(a) > 1 for a in self.la) else 0  # unrolled

    def clamp(self, x: tuple[float, ...]) -> tuple[tuple[float, ...], bool]:
        if len(x) == 2:
            lo, hi = self.lo, self.hi
            c = (min(max(x[0], lo[0]), hi[0]), min(max(x[1], lo[1]), hi[1]))
        else:
            c = tuple(min(max(v, lo), hi) for v, lo, hi in zip(x, self.lo, self.hi))
        return c, c != tuple(x)

    def __call__(self, x: tuple[float, ...]) -> float:
        """Seconds at an in-range point (callers clamp first)."""
        if self._dims == 2:
            return self._bilinear(x[0], x[1])
        if self._dims == 3:
            return self._trilinear(x[0], x[1], x[2])
        return self._multilinear(x)

    def _multilinear(self, x: tuple[float, ...]) -> float:
        idx, wts = [], []
        for v, la in zip(x, self.la):
            if len(la) == 1:
                idx.append(0), wts.append(0.0)
                continue
            i, w = _cell(la, v)
            idx.append(i), wts.append(w)
        acc = 0.0
        for corner in range(1 << len(x)):
            w, pos = 1.0, []
            for d in range(len(x)):
                up = (corner >> d) & 1
                w *= wts[d] if up else 1.0 - wts[d]
                pos.append(idx[d] + up if len(self.la[d]) > 1 else 0)
            if w:
                acc += w * self.lt[tuple(pos)]
        return math.exp(acc)

    def _bilinear(self, x0: float, x1: float) -> float:
        """``_multilinear`` of two axes of two or more points each, unrolled: the same
        operations in the same order (``along`` of one point)."""
        return self.along(x0, (x1,))[0]

    def _trilinear(self, x0: float, x1: float, x2: float) -> float:
        """``_multilinear`` of three axes of two or more points each, unrolled: the same
        operations in the same order (corners with the first axis varying fastest; 1.0 times a
        weight is exact, so it is left out)."""
        a, b, c = self.la
        i, wi = _cell(a, x0)
        j, wj = _cell(b, x1)
        k, wk = _cell(c, x2)
        rows = self._table()
        p, q = rows[i], rows[i + 1]
        p0, p1, q0, q1 = p[j], p[j + 1], q[j], q[j + 1]  # (i, j), (i, j+1), (i+1, j), (i+1, j+1)
        ui, uj, uk = 1.0 - wi, 1.0 - wj, 1.0 - wk
        k1 = k + 1
        return math.exp(_blend(((ui * uj * uk, p0[k]), (wi * uj * uk, q0[k]), (ui * wj * uk, p1[k]), (wi * wj * uk, q1[k]),
                                (ui * uj * wk, p0[k1]), (wi * uj * wk, q0[k1]), (ui * wj * wk, p1[k1]),
                                (wi * wj * wk, q1[k1]))))

    def _table(self) -> list:
        """``lt`` as nested lists (read again when a subclass replaced ``lt`` after construction)."""
        src, rows = self._rows
        if src is not self.lt:
            rows = self.lt.tolist()
            self._rows = (self.lt, rows)
            self._finite = bool(np.isfinite(self.lt).all())
        return rows

    def along(self, x0: float, xs: list[float]) -> list[float]:
        """``self((x0, x))`` for each ``x`` of ``xs`` on a two-axis grid of two or more points per
        axis, every point in range: ``_bilinear`` with the first axis' cell and weight found
        once, the same operations otherwise (a run of decode steps at one batch size).

        The second axis' cell is searched only when a point leaves the cell of the one before
        (decode runs ask growing lengths, so a run crosses a few cells); and with every log time
        finite, the corners of weight 0 are added instead of skipped (adding 0 to a finite sum
        leaves it unchanged but for the sign of a zero sum, which ``exp`` does not see), and an
        ``x0`` on a grid line (weight 0 or 1) reads that row alone (its products by 1.0 exact)."""
        a, b = self.la
        cell = self._first.get(x0)
        if cell is None:
            cell = self._first[x0] = _cell(a, x0)
        i, w0 = cell
        u0 = 1.0 - w0
        rows = self._table()
        lo, hi = rows[i], rows[i + 1]
        last, log, exp = len(b) - 2, math.log, math.exp
        out = []
        if not self._finite:
            for x in xs:
                lv = log(x)
                j = bisect_right(b, lv) - 1
                j = 0 if j < 0 else (last if j > last else j)
                span = b[j + 1] - b[j]
                w1 = (lv - b[j]) / span if span else 0.0
                u1 = 1.0 - w1
                acc = 0.0
                w = u0 * u1
                if w:
                    acc += w * lo[j]
                w = w0 * u1
                if w:
                    acc += w * hi[j]
                w = u0 * w1
                if w:
                    acc += w * lo[j + 1]
                w = w0 * w1
                if w:
                    acc += w * hi[j + 1]
                out.append(exp(acc))
            return out
        one = lo if w0 == 0.0 else (hi if u0 == 0.0 else None)  # x0 on a grid line: one row
        append, inf = out.append, math.inf
        floor = ceil = 0.0  # the current cell j holds log x in [floor, ceil)
        bj = span = r0 = r1 = l0 = l1 = h0 = h1 = 0.0
        for x in xs:
            lv = log(x)
            if not floor <= lv < ceil:
                j = bisect_right(b, lv) - 1
                j = 0 if j < 0 else (last if j > last else j)
                floor = b[j] if j > 0 else -inf
                ceil = b[j + 1] if j < last else inf
                bj, span = b[j], b[j + 1] - b[j]
                if one is not None:
                    r0, r1 = one[j], one[j + 1]
                else:
                    l0, l1, h0, h1 = lo[j], lo[j + 1], hi[j], hi[j + 1]
            w1 = (lv - bj) / span if span else 0.0
            u1 = 1.0 - w1
            if one is not None:
                append(exp(u1 * r0 + w1 * r1))
            else:
                append(exp(u0 * u1 * l0 + w0 * u1 * h0 + u0 * w1 * l1 + w0 * w1 * h1))
        return out

    @property
    def two_axes(self) -> bool:
        """True for two axes of two or more points each (the grids ``along`` serves)."""
        return self._dims == 2


def _blend(corners) -> float:
    """The sum of weight x log time over a cell's (weight, log time) corners, in their order,
    corners of weight 0 left out (``_multilinear``'s accumulation)."""
    acc = 0.0
    for w, v in corners:
        if w:
            acc += w * v
    return acc


def _cell(axis: list[float], x: float) -> tuple[int, float]:
    """The cell of ``axis`` (log values, two or more) that log ``x`` falls in, the end cells
    taking what lies beyond them, and the weight of the cell's upper end."""
    lv = math.log(x)
    i = min(max(bisect_right(axis, lv) - 1, 0), len(axis) - 2)
    span = axis[i + 1] - axis[i]
    return i, ((lv - axis[i]) / span if span else 0.0)


def _attn_grid(rows: np.ndarray, heads: int, kv_heads: int, head_dim: int, kv_fp8: bool,
               scale_by: str) -> tuple[Grid, str] | None:
    """The (batch, length) table of one attention shape, or one derived from measured shapes.
    Returns (grid, note) or None without any row of this head dim.

    A shape the database lacks is priced from measured shapes of the same head dim and the
    same grouping (query heads per KV head), as a fixed part plus a part per head
    (``scale_by``: KV heads for decode, which reads the cache of every KV head; query heads for
    prefill): each cell of the two measured head counts nearest the target gives the line
    through them (``_heads_line``), so the launch floor the kernels share is counted once, not
    multiplied by the head ratio. Without two such shapes, the nearest shape's time is split into
    its smallest cell (the floor) and the rest, and only the rest is scaled by the head ratio
    (of KV heads for decode where they differ, else of query heads)."""
    r = rows[(rows[:, 4] == head_dim) & (rows[:, 5] == float(kv_fp8))]
    if not len(r):
        r = rows[rows[:, 4] == head_dim]
        if not len(r):
            return None
    shapes = np.unique(r[:, 2:4], axis=0)
    dist = np.abs(np.log(shapes[:, 0] / heads)) + np.abs(np.log(shapes[:, 1] / kv_heads))
    h, kvh = shapes[int(np.argmin(dist))]

    def table(hq, hk):
        sel = r[(r[:, 2] == hq) & (r[:, 3] == hk)]
        return kd.min_grid(sel[:, 0], sel[:, 1], sel[:, 6])

    b, s, t = table(h, kvh)
    if (h, kvh) == (heads, kv_heads):
        return Grid([b, s], t), ""
    col = 1 if scale_by == "kv" else 0
    target = kv_heads if scale_by == "kv" else heads
    group = shapes[shapes[:, 0] * kv_heads == shapes[:, 1] * heads]  # same query heads per KV head
    counts = sorted(group[:, col], key=lambda n: (abs(np.log(n / target)), -n))[:2]
    if len(counts) == 2:
        tables = [table(*group[group[:, col] == n][0]) for n in counts]
        b, s = tables[0][0], tables[0][1]
        at = [_on_axes(tb, b, s) for tb in tables]
        t = _heads_line(counts[0], at[0], counts[1], at[1], target)
        note = (f"shape ({heads} q, {kv_heads} kv heads) from measured {_shape(group, col, counts[0])} and "
                f"{_shape(group, col, counts[1])}: fixed part + part per {'KV' if col else 'query'} head")
        return Grid([b, s], t), note
    n = float(kv_heads / kvh) if (scale_by == "kv" and kvh != kv_heads) else float(heads / h)
    floor = float(t.min())
    t = floor + (t - floor) * n
    note = (f"shape ({heads} q, {kv_heads} kv heads) from measured ({int(h)}, {int(kvh)}): its smallest time "
            f"{floor * 1e3:.4g} ms kept, the rest x {n:.3g}")
    return Grid([b, s], t), note


def _shape(group: np.ndarray, col: int, n: float) -> str:
    hq, hk = group[group[:, col] == n][0]
    return f"({int(hq)}, {int(hk)})"


def _on_axes(tb: tuple[np.ndarray, np.ndarray, np.ndarray], b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A measured (batch, length) table read at the cells of axes ``b`` x ``s`` (clamped to its
    own range: the shapes of one database share their grid)."""
    g = Grid([tb[0], tb[1]], tb[2])
    return np.array([[g(g.clamp((float(x), float(y)))[0]) for y in s] for x in b])


def _heads_line(n1: float, t1: np.ndarray, n2: float, t2: np.ndarray, n: float) -> np.ndarray:
    """Per cell, the time at ``n`` heads on the line through (n1, t1) and (n2, t2): a fixed part
    plus a part per head. The part per head is never negative (a measured time that falls with
    more heads is noise: the larger count's time is kept); above the larger count the result is
    never below its time, below the smaller count never below its time scaled in proportion."""
    (n1, t1), (n2, t2) = sorted(((float(n1), t1), (float(n2), t2)), key=lambda p: p[0])
    per_head = np.maximum((t2 - t1) / (n2 - n1), 0.0)
    if n >= n2:
        return np.maximum(t2 + per_head * (n - n2), t2)
    if n <= n1:
        return np.maximum(t1 - per_head * (n1 - n), t1 * (n / n1))  # at least the time scaled in proportion
    return t1 + per_head * (n - n1)


def load_overhead(framework: str, tp: int) -> tuple[float, float, str] | None:
    """(per-step s, per-sequence s, provenance) fitted for this framework, interpolated in TP."""
    try:
        data = json.loads(OVERHEAD_FILE.read_text())
    except (OSError, ValueError):
        return None
    fw = data.get("frameworks", {}).get(framework)
    if not fw:
        return None
    steps = {int(k): float(v) for k, v in fw["step_s_by_tp"].items()}
    tps = sorted(steps)
    if tp in steps:
        step = steps[tp]
    elif tp < tps[0] or tp > tps[-1]:
        step = steps[tps[0] if tp < tps[0] else tps[-1]]
    else:
        hi = next(t for t in tps if t > tp)
        lo = max(t for t in tps if t < tp)
        step = steps[lo] + (steps[hi] - steps[lo]) * (tp - lo) / (hi - lo)
    return step, float(fw["per_seq_s"]), str(data.get("provenance", OVERHEAD_FILE.name))


class Extrapolation:
    """Which operators were priced outside their measured grid, how often, and how much simulated
    GPU time they carry, kept in the cost model's out-of-range count itself.

    The count (``_oor``) is an int that every fast path adds, subtracts and multiplies as a count
    of queries: memoised prices replay the difference it made, decode runs multiply it by their
    steps. A query outside a grid adds one to the low ``FIELD`` bits (the total count, what
    ``out_of_range_total`` reports) and, in two fields of its own operator, one query and its
    nanoseconds of GPU time per step (the operator's time times the layers it runs in). Being
    linear, the packed value is carried by every path exactly as the count is, in native ints
    (an in-range step adds 0), and ``unpack`` splits it at the end. ``ranges`` keeps the shape
    range of the distinct queries per operator (first pricings only: a memo hit adds no shape)."""

    def __init__(self):
        self.slots: dict[str, int] = {}
        self.ranges: dict[str, list] = {}  # operator -> [query lows, query highs, grid lows, grid highs]

    def record(self, op: str, x: tuple, grid, seconds: float) -> int:
        i = self.slots.setdefault(op, len(self.slots))
        r = self.ranges.get(op)
        if r is None:
            self.ranges[op] = [list(x), list(x), list(grid.lo), list(grid.hi)]
        else:
            r[0] = [min(a, b) for a, b in zip(r[0], x)]
            r[1] = [max(a, b) for a, b in zip(r[1], x)]
        return 1 + (1 << (FIELD * (2 * i + 1))) + (int(seconds * 1e9 + 0.5) << (FIELD * (2 * i + 2)))

    def unpack(self, packed: int) -> list[dict]:
        """Per operator: queries outside the grid, the GPU seconds they carried, the queries'
        shape range and the grid's."""
        out = []
        for op, i in self.slots.items():
            n = (packed >> (FIELD * (2 * i + 1))) & COUNT_MASK
            if not n:
                continue
            ns = (packed >> (FIELD * (2 * i + 2))) & COUNT_MASK
            qlo, qhi, glo, ghi = self.ranges[op]
            out.append({"operator": op, "queries": int(n), "gpu_s": ns / 1e9,
                        "query_range": [[a, b] for a, b in zip(qlo, qhi)], "grid_range": [[a, b] for a, b in zip(glo, ghi)]})
        return out


MEMO_ENTRIES = 1 << 20
"""Most attention prices a kernel-database model memoises (about 150 MB at this size)."""

RUN_SIZES = 16
"""Batch sizes whose last decode run ``_decode_attn`` keeps (see there)."""
RUN_STEPS = MEMO_ENTRIES // RUN_SIZES
"""Steps kept of each such run (all of them together: at most ``MEMO_ENTRIES``)."""
TOTALS_ENTRIES = 1 << 23
"""Most places ``decode_totals``' memo holds, each a decode-step total or None (at most 64 MB of
list, 24 bytes more per total kept; 100,000 requests of ``bench_scale.py``'s workload use about
0.9 M places)."""


def memo_slot(n: int, kv_tokens: int) -> tuple[int, int]:
    """Where the decode-step memo keeps the step of ``n`` sequences over ``kv_tokens`` KV tokens:
    (the key of its list, by n and kv_tokens modulo n; its place, kv_tokens // n). A run's KV
    tokens grow by n a step, so its steps are one contiguous slice of one list. (``decode_totals``
    and ``attn_decode``, the hottest readers, inline it.)"""
    q, r = divmod(kv_tokens, n)
    return n << 32 | r, q


class KernelDbCostModel(RooflineCostModel):
    """The roofline with GEMMs, attention, all-reduce and MoE priced from the kernel database."""

    source = "kerneldb"
    _grid_decode = False  # decode attention priced from the decode table alone (set by __init__)
    _totals = None  # decode_totals' memo (set by __init__ where it holds)

    def __init__(self, model, hw, *, framework: str, version: str, system: str, arrays: dict, **kw):
        super().__init__(model, hw, **kw)
        self._start_tables(framework, version, system, arrays)
        self.gemm_dtype = kd.GEMM_DTYPE[self.dtype]
        self.engine = engine_kernels(framework, self.tp)
        self._quant = {name: Grid([arrays[f"quant|{name}|m"], arrays[f"quant|{name}|k"]], arrays[f"quant|{name}|t"])
                       for name in ("compute_scale", "scale_matrix")
                       if f"quant|{name}|t" in arrays and self.gemm_dtype == "fp8" and self.engine["static_fp8"]}
        if self.gemm_dtype == "fp8" and self.engine["static_fp8"] and len(self._quant) < 2:
            self.engine = {**self.engine, "static_fp8": False, "fp8_input": frozenset()}
            self.notes.append("fp8 GEMMs: dynamic activation quantisation kept (no quantisation tables)")
        self._load_gemms(arrays, ("bfloat16", self.gemm_dtype))
        self._load_attention(arrays)
        self._load_allreduce(arrays)
        self._moe = self._moe_grid(arrays.get("moe|rows"))
        if self.shapes.num_experts and self._moe is None:
            self.notes.append("MoE experts: roofline (shape not in the database)")
        cls = type(self)
        self._grid_decode = (cls.attn_decode is KernelDbCostModel.attn_decode and not self.layers_window
                             and cls._decode_attn is KernelDbCostModel._decode_attn
                             and cls._decode_attn_priced is KernelDbCostModel._decode_attn_priced
                             and cls._attn_decode_run is KernelDbCostModel._attn_decode_run
                             and cls._grid_decode_run is KernelDbCostModel._grid_decode_run
                             and self._gen.two_axes)  # decode attention from the table alone (count_decode_run)
        # decode_totals' memo, where a step's total is a function of (batch, KV tokens): (the p and
        # decode table it was computed with, {batch: [total or None by KV tokens]}, places in all)
        self._totals = [None, None, {}, 0] if self._grid_decode and type(self).decode_totals is KernelDbCostModel.decode_totals \
            and cls._decode_parts is KernelDbCostModel._decode_parts and cls._dense_part is RooflineCostModel._dense_part \
            and cls._dense_terms is KernelDbCostModel._dense_terms else None
        if (cls.attn_prefill is KernelDbCostModel.attn_prefill and cls.attn_prefill_window is RooflineCostModel.attn_prefill_window
                and cls._dense_part is RooflineCostModel._dense_part and cls._dense_terms is KernelDbCostModel._dense_terms
                and cls._fixed_part is RooflineCostModel._fixed_part):
            self._step_memo = {}  # _price's fixed parts of one-chunk steps, their counts replayed (_fixed_part)

    # ------------------------------------------------------------------ tables
    def _start_tables(self, framework: str, version: str, system: str, arrays: dict) -> None:
        """What every database model holds: its source, its KV dtype, the tables' provenance
        (``meta``), the notes on what is not from a table, and the empty caches."""
        self.framework, self.version, self.system = framework, version, system
        self.kv_fp8 = kd.KV_DTYPE.get(self.kv_dtype, "bfloat16") == "fp8"
        self.meta = dict(s.split("=", 1) for s in arrays["meta"].tolist())
        self.notes: list[str] = []
        self._gemms: dict[str, Grid] = {}
        self._attn_p: dict = {}
        self._attn_d: dict = {}
        # by batch size, the last run asked: (kv tokens, longest, attention per step, its queries out of range)
        self._runs: dict[int, tuple] = {}
        self._extrap = Extrapolation()

    def _load_gemms(self, arrays: dict, dtypes) -> None:
        """The GEMM tables of ``dtypes`` (by m, n, k); a missing one is a ``KernelDbUnavailable``."""
        for dt in dict.fromkeys(dtypes):
            key = f"gemm|{dt}|t"
            if key not in arrays:
                raise kd.KernelDbUnavailable(f"the kernel database has no {dt} GEMMs for {self.system} "
                                             f"{self.framework} {self.version}")
            self._gemms[dt] = Grid([arrays[f"gemm|{dt}|{a}"] for a in "mnk"], arrays[key])

    def _load_attention(self, arrays: dict) -> None:
        """Prefill and decode attention of the model's (q heads, kv heads, head dim), or the
        nearest measured shape scaled (named in ``notes``)."""
        s = self.shapes
        ctx = _attn_grid(arrays["ctx|rows"], s.q_heads, s.kv_heads, s.head_dim, self.kv_fp8, "q")
        gen = _attn_grid(arrays["gen|rows"], s.q_heads, s.kv_heads, s.head_dim, self.kv_fp8, "kv")
        if ctx is None or gen is None:
            raise kd.KernelDbUnavailable(f"the kernel database has no attention of head dim {s.head_dim} "
                                         f"for {self.system} {self.framework} {self.version}")
        (self._ctx, n1), (self._gen, n2) = ctx, gen
        self.notes += [f"prefill attention {n}" for n in (n1,) if n] + [f"decode attention {n}" for n in (n2,) if n]

    def _load_allreduce(self, arrays: dict) -> None:
        """The all-reduce tables by GPU count (bf16: the only one measured)."""
        self._ar = {int(k.split("|")[1]): Grid([arrays[k]], arrays[k[:-1] + "t"])
                    for k in arrays if k.startswith("ar|") and k.endswith("|x")}
        if self.tp > 1 and getattr(self, "comm_dtype", "bf16") not in ("bf16", "fp16"):
            self.notes.append(f"all-reduce in {self.comm_dtype}: priced from the bf16 table (the only one measured)")
        if self.tp > 1 and self.tp not in self._ar:
            self.notes.append(f"all-reduce over {self.tp} GPUs: roofline (not in the database)")

    # ------------------------------------------------------------------ lookup core
    def _lookup(self, grid: Grid, roof, x: tuple[float, ...], op: str = "other", weight: float = 1.0) -> float:
        """The grid's time at ``x``; outside the grid, at the nearest grid point scaled by the
        roofline, and recorded for operator ``op`` (``weight``: the times it runs per step)."""
        c, out = grid.clamp(x)
        t = grid(c)
        if out:
            rb = roof(c)
            if rb > 0:
                t *= roof(x) / rb
            self._oor += self._extrap.record(op, x, grid, t * weight)
        return t

    def _gemm_weight(self, op: str) -> int:
        """Times a GEMM runs per step (as ``_layer_gemms`` composes them)."""
        s = self.shapes
        if op == "lm_head":
            return 1
        if op in s.attn_gemms:
            return self.model.num_layers
        if op in ("gate_up", "down"):
            return s.dense_layers or (0 if s.moe_layers else self.model.num_layers)
        return s.moe_layers or self.model.num_layers

    def out_of_range_total(self) -> int:
        return self._oor & COUNT_MASK

    def extrapolated(self) -> list[dict]:
        """Per operator, the queries priced outside the measured grid so far (``Extrapolation``)."""
        return self._extrap.unpack(self._oor)

    def _gemm_roof(self, b: float):
        return lambda x: self._roof(2.0 * x[0] * x[1] * x[2], b * (x[0] * x[2] + x[1] * x[2]) + 2 * x[0] * x[1],
                                    self.p.gemm_eff)

    def _gemm_mnk(self, m: int, n: int, k: int, dt: str, op: str = "GEMM", weight: float = 1.0) -> float:
        b = 2.0 if dt == "bfloat16" else (0.5 if dt == "nvfp4" else 1.0)
        return self._lookup(self._gemms[dt], self._gemm_roof(b), (float(m), float(n), float(k)), op, weight)

    def _moe_grid(self, rows) -> Grid | None:
        s, m = self.shapes, self.model
        if not s.num_experts or rows is None:
            return None
        inter = getattr(m, "moe_intermediate_size", None) or m.intermediate_size
        code = {"bfloat16": 0, "fp8": 1, "fp8_block": 2, "nvfp4": 3}.get(self.gemm_dtype)
        sel = rows[(rows[:, 1] == m.hidden_size) & (rows[:, 2] == inter) & (rows[:, 3] == s.top_k)
                   & (rows[:, 4] == s.num_experts) & (rows[:, 5] == self.tp) & (rows[:, 6] == code)]
        if len(sel) < 2:
            return None
        x = np.unique(sel[:, 0])
        t = np.array([sel[sel[:, 0] == v, 7].min() for v in x])
        return Grid([x], t)

    # ------------------------------------------------------------------ operators
    def gemm(self, op: str, m: int) -> float:
        if m <= 0:
            return 0.0
        n, k = self.shapes.gemms[op]
        dt = "bfloat16" if op == "lm_head" else self.gemm_dtype
        t = self._gemm_mnk(m, n, k, dt, f"{op} GEMM, {dt} (m x n x k)", self._gemm_weight(op))
        if dt == "fp8" and self.engine["static_fp8"]:
            t = self._static_fp8(t, m, k, op in self.engine["fp8_input"])
        return t

    def _quant_s(self, name: str, m: int, k: int) -> float:
        g = self._quant[name]
        c, _ = g.clamp((float(m), float(k)))
        return g(c) * (m / c[0] if m > c[0] else 1.0)

    def _static_fp8(self, t: float, m: int, k: int, fp8_input: bool) -> float:
        """A table fp8 GEMM (dynamic scale + scaling + GEMM) as the engine runs it: without the
        dynamic-scale kernel, and without the scaling kernel when the input arrives in fp8.
        Never below half the table time (the GEMM itself dominates at large m)."""
        q = self._quant_s("compute_scale", m, k)
        if fp8_input:
            q += self._quant_s("scale_matrix", m, k)
        return max(t - q, 0.5 * t)

    def moe(self, tokens: int) -> float:
        if self._moe is None:
            return super().moe(tokens)
        roof = lambda x: RooflineCostModel.moe(self, max(1, round(x[0])))  # noqa: E731
        return self._lookup(self._moe, roof, (float(tokens),), "MoE experts (tokens)", self.shapes.moe_layers)

    def _memo(self, cache: dict, key, price) -> float:
        """``price()`` once per ``key``; a hit counts the out-of-range queries the first pricing
        counted. A memo that reaches ``MEMO_ENTRIES`` starts again empty, so a long run's memory
        stays bounded (a value priced again is the same value, with the same count)."""
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= MEMO_ENTRIES:
                cache.clear()
            oor0 = self._oor
            t = price()
            hit = cache[key] = (t, self._oor - oor0)
        else:
            self._oor += hit[1]
        return hit[0]

    def _prefill_lookup(self, grid, chunks) -> tuple[float, float]:
        """(table time at (batch, RMS length) scaled by the chunks' share of the causal work of
        whole sequences, the keys the chunks attend)."""
        sq = work = full = keys = 0.0
        for q, c in chunks:
            L = q + c
            sq += L * L
            work += q * (c + (q + 1) / 2.0)
            full += L * (L + 1) / 2.0
            keys += L
        b = len(chunks)
        roof = lambda x: RooflineCostModel.attn_prefill(  # noqa: E731
            self, [(max(1, round(x[1])), 0)] * max(1, round(x[0])))
        share = work / full
        return self._lookup(grid, roof, (float(b), math.sqrt(sq / b)), "prefill attention (batch x RMS length)",
                            self.layers_full * share) * share, keys

    def _decode_lookup(self, grid, num_seqs: int, kv_tokens: int) -> float:
        """The table at (batch, mean KV length)."""
        roof = lambda x: RooflineCostModel.attn_decode(  # noqa: E731
            self, max(1, round(x[0])), max(1, round(x[0])) * x[1])
        return self._lookup(grid, roof, (float(num_seqs), kv_tokens / num_seqs), "decode attention (batch x mean KV length)",
                            self.layers_full)

    def attn_prefill(self, chunks) -> float:
        if not chunks:
            return 0.0
        return self._memo(self._attn_p, tuple(chunks), lambda: self._prefill_lookup(self._ctx, chunks)[0])

    def attn_decode(self, num_seqs: int, kv_tokens: int, longest: int = 0) -> float:
        if not num_seqs:
            return 0.0
        q, r = divmod(kv_tokens, num_seqs)  # memo_slot and _kept, inlined (a flow's every admission asks)
        memo = self._totals
        pts = memo[2].get(-(num_seqs << 32 | r)) if memo is not None and memo[0] is self.p and memo[1] is self._gen.lt \
            else None  # (a value a decode run priced in range: the lookup's, counting nothing)
        if pts is not None and q < len(pts):
            v = pts[q]
            if v is not None:
                return v
        return self._memo(self._attn_d, (num_seqs, kv_tokens), lambda: self._decode_lookup(self._gen, num_seqs, kv_tokens))

    def all_reduce(self, elements: int) -> float:
        g = self._ar.get(self.tp)
        if self.tp <= 1:
            return 0.0
        if g is None:
            return RooflineCostModel.collective(self, "all_reduce", 2.0 * elements, self.tp)
        roof = lambda x: RooflineCostModel.collective(self, "all_reduce", 2.0 * x[0], self.tp)  # noqa: E731
        return self._lookup(g, roof, (float(elements),), "all-reduce (elements)", 2 * self.model.num_layers)

    # ------------------------------------------------------------------ composition
    def _dense_terms(self, tokens: int, num_seqs: int) -> tuple[float, float, float]:
        """As the roofline's, with the all-reduce from the database (bf16 activations) and the
        GQA/dense-or-MoE layout it composes (MoE and MLA models: ``sim.cost.kerneldb_moe``).
        The parts that depend on the tokens only and those that depend on the sequences only are
        each kept (with the out-of-range queries pricing them counted, counted again on a hit),
        since a step's tokens and sequences pair in many ways; a first pricing asks the tables
        in the order of pricing the step at once (the layer GEMMs, the LM head, the all-reduce),
        so the operators out of range are met in the same order."""
        tok = self._token_cache.get(tokens)
        if tok is None:
            s, L = self.shapes, self.model.num_layers
            oor0 = self._oor
            mlp = self.moe(tokens) if s.num_experts else self.gemm("gate_up", tokens) + self.gemm("down", tokens)
            gemm_l = L * (self.gemm("qkv", tokens) + self.gemm("o", tokens) + mlp)
            oor1 = self._oor
            seq = self._counted(self._seq_cache, num_seqs, self._seq_parts)
            oor2 = self._oor
            tok = self._token_cache[tokens] = (gemm_l, *self._token_other(tokens), (oor1 - oor0) + (self._oor - oor2))
        else:
            self._oor += tok[-1]
            seq = self._counted(self._seq_cache, num_seqs, self._seq_parts)
        gemm_l, other_l, embed, comm_l, pp, _ = tok
        lm_head, norm, sampling, gather, _ = seq
        other = other_l + (embed + norm + sampling)
        comm = comm_l + gather
        if self.pp > 1:
            comm += pp
        return gemm_l + lm_head, other, comm

    def _seq_parts(self, num_seqs: int) -> tuple[float, float, float, float]:
        """(LM head, final norm, sampling, logits all-gather): the parts of ``_dense_terms`` that
        depend on the sequences only."""
        return (self.gemm("lm_head", num_seqs), *self._seq_other(num_seqs))

    def _memo_fixed(self, tokens: int, n: int, chunks) -> tuple:
        """The roofline's step-memo entry (``_fixed_part`` and the out-of-range queries a hit
        counts besides the dense part's, which ``_price`` adds): here the prefill attention's,
        which its own memo counts at every asking; they are taken back from the count now, as
        ``_price`` adds them on this asking too (the dense part's count is the entry's own: its
        pricing counts nothing by itself). So a step is counted the same whether its fixed part
        is priced or replayed (pure functions of tokens, sequences and chunk: the database's
        lookups are memoised by the same keys)."""
        oor0 = self._oor
        fixed = self._fixed_part(tokens, n, chunks)
        again = self._oor - oor0
        self._oor -= again
        return (*fixed, again)

    def _other_and_comm(self, tokens: int, num_seqs: int) -> tuple[float, float]:
        """(other_gpu, comm) of a step: the elementwise operators the engine does not fuse into
        another kernel (roofline), the all-reduce from the database, the logits all-gather and
        the pipeline sends (roofline)."""
        other, embed, comm, pp = self._token_other(tokens)
        norm, sampling, gather = self._seq_other(num_seqs)
        other += embed + norm + sampling
        comm += gather
        if self.pp > 1:
            comm += pp
        return other, comm

    def _token_other(self, tokens: int) -> tuple[float, float, float, float]:
        """(layer elementwise operators, embedding, all-reduces, pipeline sends) of
        ``_other_and_comm``: its parts that depend on the tokens only."""
        s, L = self.shapes, self.model.num_layers
        fused = self.engine["fused"]
        norms = (("q_norm", 1), ("k_norm", 1)) if s.qk_norm else ()
        other = L * sum(mult * self.elementwise(op, tokens) for op, mult in
                        (("rmsnorm", 2), ("silu_mul", 1), ("rotary", 1), ("kv_write", 1), *norms) if op not in fused)
        comm = L * 2 * self.all_reduce(tokens * s.hidden)
        pp = (self.pp - 1) * (tokens * s.hidden * 2 / self.hw.link_bw + self.p.allreduce_latency_s) if self.pp > 1 else 0.0
        return other, self.elementwise("embedding", tokens), comm, pp

    def _seq_other(self, num_seqs: int) -> tuple[float, float, float]:
        """(final norm, sampling, logits all-gather) of ``_other_and_comm``: its parts that
        depend on the sequences only."""
        return (self.elementwise("rmsnorm", num_seqs), self.sampling(num_seqs),
                RooflineCostModel.collective(self, "all_gather", num_seqs * self.shapes.vocab * 4, self.tp))

    # ------------------------------------------------------------------ decode runs
    def decode_totals(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> list[float]:
        """The ``total`` of ``decode_step`` for ``steps`` consecutive steps (kv_tokens grows by
        num_seqs, longest by 1 each step), as a list: the same floating-point operations, so the
        same values. Counts nothing: the fast-forward may price more steps than a run keeps, and
        counts the out-of-range queries of the steps kept with ``count_decode_run``.

        With decode attention from the table alone (``_grid_decode``), a step's total depends on
        the batch size and the KV tokens only, and runs of one replica ask the same (batch, KV)
        points again and again (about 95% of them on the benchmark workload): each total computed
        is kept in a list by batch size n and KV tokens modulo n, indexed by KV tokens // n (a
        run's KV tokens grow by n a step, so its steps are one contiguous slice of one list; None
        where not computed), at most ``TOTALS_ENTRIES`` places in all (dropped together
        when full; kept while ``p`` and the decode table are the ones they were computed with),
        and a run whose every step is kept is read, not priced."""
        q, r = divmod(kv_tokens, num_seqs)  # memo_slot, inlined (the fast-forward's hottest call)
        key, end = num_seqs << 32 | r, q + steps
        memo = self._totals  # (_kept, inlined)
        pts = memo[2].get(key) if memo is not None and memo[0] is self.p and memo[1] is self._gen.lt else None
        if pts is None or end > len(pts):
            pts = self._points(key, end) if self._totals is not None else None  # (grown, or started again)
        if pts is not None:
            out = pts[q:end]
            if None not in out:
                return out
        gemm, other, comm, cpu, ad = self._decode_parts(num_seqs, kv_tokens, longest, steps)
        g0 = gemm + 0.0  # (the first addition of _price's total; the rest in its order)
        out = [g0 + x + comm + other + cpu + 0.0 for x in ad]
        if pts is not None:
            pts[q:end] = out
        return out

    def _kept_run(self, n: int, kv_tokens: int, steps: int) -> tuple[list, list] | None:
        """(totals, decode attention of every layer) of a run's steps as ``_decode_parts``
        composes them (``layers_full`` times the table's value: ``_points`` is kept only without
        window layers), when ``_points`` holds both at every step; else None."""
        key, q = memo_slot(n, kv_tokens)
        end = q + steps
        tot, att = self._kept(key), self._kept(-key)
        if not steps or tot is None or att is None or end > len(tot) or end > len(att):
            return None
        total, a = tot[q:end], att[q:end]
        if None in total or None in a:
            return None
        full = self.layers_full
        return total, [full * x for x in a]

    def _kept(self, key: int) -> list | None:
        """The memo list of ``key`` as it stands (see ``_points``), or None: no such list, no memo,
        or one computed with another ``p`` or decode table."""
        memo = self._totals
        if memo is None or memo[0] is not self.p or memo[1] is not self._gen.lt:
            return None
        return memo[2].get(key)

    def _points(self, key: int, end: int) -> list | None:
        """The memo list of ``key`` (``memo_slot``'s, for a batch size and its KV tokens modulo it:
        ``decode_totals``' totals, indexed by KV tokens // n; its negative: the decode attention
        ``_attn_decode_run`` priced in range, read by ``attn_decode``), at least ``end`` places long, or None when ``end`` is beyond the memo's bound. Every list is
        dropped when ``p`` or the decode table changed, or when growing one would pass
        ``TOTALS_ENTRIES`` places in all."""
        memo = self._totals
        if memo[0] is not self.p or memo[1] is not self._gen.lt:
            memo = self._totals = [self.p, self._gen.lt, {}, 0]
        pts = memo[2].get(key)
        if pts is None:
            pts = memo[2][key] = []
        if end > len(pts):
            grow = end + (end >> 2) - len(pts)  # (a quarter more: runs go on growing)
            if memo[3] + grow > TOTALS_ENTRIES:
                memo = self._totals = [self.p, self._gen.lt, {}, 0]
                grow = end + (end >> 2)
                if grow > TOTALS_ENTRIES:
                    return None  # (a run beyond the memo's bound: priced, not kept)
                pts = memo[2][key] = []
            pts += [None] * grow
            memo[3] += grow
        return pts

    def decode_series(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> dict:
        """``decode_step`` for ``steps`` consecutive steps as columns (``total`` and each
        component: lists of the same values, typed arrays for the components the same at every
        step); counts nothing (as ``decode_totals``). A run whose
        totals and attention ``_points`` holds at every step is read from there."""
        kept = self._kept_run(num_seqs, kv_tokens, steps)
        if kept is not None:
            total, ad = kept
            gemm, other, comm, _ = self._dense_part(num_seqs, num_seqs)
            cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * num_seqs
        else:
            gemm, other, comm, cpu, ad = self._decode_parts(num_seqs, kv_tokens, longest, steps)
            g0 = gemm + 0.0
            total = [g0 + x + comm + other + cpu + 0.0 for x in ad]
        same = lambda v: array("d", (v,)) * steps  # noqa: E731  (a component the same every step)
        return {"total": total, "gemm": same(gemm), "attn_prefill": same(0.0), "attn_decode": ad, "comm": same(comm),
                "other_gpu": same(other), "cpu": same(cpu), "swap": same(0.0), "source": self.source}

    def count_decode_run(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> None:
        """Count the out-of-range queries of ``steps`` consecutive decode steps as ``decode_step``
        one step after another would: each step's dense part and attention."""
        if steps <= 0:
            return
        dense = self._dense_part(num_seqs, num_seqs)[3]
        g, n = self._gen if self._grid_decode else None, num_seqs
        if (g is not None and g.lo[0] <= n <= g.hi[0] and g.lo[1] <= kv_tokens / n
                and (kv_tokens + (steps - 1) * n) / n <= g.hi[1]):
            # every step's (batch, mean KV length) inside the decode table (the lengths only
            # grow): no query out of range, so nothing to price again (a leg's runs are counted
            # after all of them were priced, when the last run's memo holds only the last)
            self._oor += dense * steps
            return
        self._oor += dense * steps + sum(self._decode_attn(num_seqs, kv_tokens, longest, steps)[1])

    def _decode_parts(self, n: int, kv_tokens: int, longest: int, steps: int):
        """(gemm, other_gpu, comm, cpu, attention of each step) of a decode run, as ``_price``
        composes them, counting nothing."""
        gemm, other, comm, _ = self._dense_part(n, n)
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n
        return gemm, other, comm, cpu, self._decode_attn(n, kv_tokens, longest, steps)[0]

    def _decode_attn(self, n: int, kv_tokens: int, longest: int, steps: int) -> tuple[list[float], list[int]]:
        """The decode attention of every layer at each step of a run, as ``_price`` composes it,
        and the out-of-range queries of each (not counted). A run that continues the one asked
        last (the fast-forward prices a run in goes, then its columns and its counts) reads and
        extends that one's values; at most ``RUN_STEPS`` steps are kept. One such run is kept
        per batch size, for the last ``RUN_SIZES`` sizes asked: a run that goes on past finishes
        is priced in parts of falling sizes, then its step rows ask those parts again."""
        runs = self._runs
        run = runs.get(n)
        if run is not None and longest >= run[1] and kv_tokens == run[0] + (longest - run[1]) * n:
            off, ad, outs = longest - run[1], run[2], run[3]
            if off <= len(ad) and off + steps <= RUN_STEPS:
                if off + steps > len(ad):
                    k = len(ad)
                    more = self._decode_attn_priced(n, run[0] + k * n, run[1] + k, off + steps - k)
                    ad += more[0]
                    outs += more[1]
                return ad[off: off + steps], outs[off: off + steps]
        ad, outs = self._decode_attn_priced(n, kv_tokens, longest, steps)
        if steps <= RUN_STEPS:
            if n not in runs and len(runs) >= RUN_SIZES:
                del runs[next(iter(runs))]  # (the size asked first of those kept)
            runs[n] = (kv_tokens, longest, ad, outs)
        else:
            runs.pop(n, None)
        return ad[:], outs[:]

    def _decode_attn_priced(self, n: int, kv_tokens: int, longest: int, steps: int) -> tuple[list[float], list[int]]:
        """``_decode_attn`` priced: ``full * attn_decode`` of each step, plus the sliding-window
        layers' (at min(KV, n W) tokens), and the out-of-range queries of each."""
        full, win = self.layers_full, self.layers_window
        a, outs = self._attn_decode_run(n, kv_tokens, longest, steps)
        ad = [full * x for x in a]
        if win:
            W = self.shapes.window
            aw, ow = self._quiet_attn_decode(n, [(min(kv_tokens + j * n, n * W), min(longest + j, W))
                                                 for j in range(steps)])
            ad = [x + win * y for x, y in zip(ad, aw)]
            outs = [x + y for x, y in zip(outs, ow)]
        return ad, outs

    def _attn_decode_run(self, n: int, kv_tokens: int, longest: int, steps: int) -> tuple[list[float], list[int]]:
        """``attn_decode`` of each step of a run (kv_tokens + j n, longest + j) and the
        out-of-range queries of each, counting none (``_decode_lookup`` of the decode table,
        batched; a subclass that prices decode attention otherwise: one query at a time). The
        steps in the table's range are kept for ``attn_decode`` (``_points``): the step an arrival
        joins, priced by ``attn_decode``, is mostly one a run priced."""
        if type(self).attn_decode is not KernelDbCostModel.attn_decode:
            return self._quiet_attn_decode(n, [(kv_tokens + j * n, longest + j) for j in range(steps)])
        vals, outs = self._grid_decode_run(self._gen, n, kv_tokens, steps)
        if self._totals is not None and steps:
            key, q = memo_slot(n, kv_tokens)
            pts = self._points(-key, q + steps)
            if pts is not None:  # (only values in range: one out of range also counts its query)
                pts[q:q + steps] = [None if o else v for v, o in zip(vals, outs)] if any(outs) else vals
        return vals, outs

    def _quiet_attn_decode(self, n: int, queries) -> tuple[list[float], list[int]]:
        """``attn_decode(n, kv, longest)`` for each (kv, longest) of ``queries`` and the
        out-of-range queries of each, counting none (its memo counts nothing by itself)."""
        vals, outs, attn = [], [], self.attn_decode
        for kv, longest in queries:
            oor0 = self._oor
            vals.append(attn(n, kv, longest))
            outs.append(self._oor - oor0)
            self._oor = oor0
        return vals, outs

    def _grid_decode_run(self, grid: Grid, n: int, kv_tokens: int, steps: int) -> tuple[list[float], list[int]]:
        """``_decode_lookup(grid, n, kv)`` for kv = kv_tokens + j n (j < steps) and the
        out-of-range queries of each (not counted): the steps inside the grid in one ``along``,
        those outside one at a time."""
        xs = [kv / n for kv in range(kv_tokens, kv_tokens + steps * n, n)]
        lo = hi = 0  # the steps in [lo, hi) are inside the grid (mean lengths only grow)
        if grid.two_axes and grid.lo[0] <= n <= grid.hi[0]:
            lo, hi = bisect_left(xs, grid.lo[1]), bisect_right(xs, grid.hi[1])
        vals = grid.along(float(n), xs[lo:hi]) if hi > lo else []
        outs = [0] * steps
        if hi - lo < steps:
            edge = [j for j in range(steps) if not lo <= j < hi]
            ends = []
            for j in edge:
                oor0 = self._oor
                ends.append(self._decode_lookup(grid, n, kv_tokens + j * n))
                outs[j] = self._oor - oor0
                self._oor = oor0
            vals = ends[:lo] + vals + ends[lo:] if hi > lo else ends
        return vals, outs

    def describe(self) -> dict:
        """What priced the run, for summary.json."""
        return {"source": SOURCE, "package_version": kd.package_version(), "framework": self.framework,
                "framework_version": self.version, "system": self.system, "gemm_dtype": self.gemm_dtype,
                "kv_cache_dtype": "fp8" if self.kv_fp8 else "bfloat16",
                "kernels": self.meta, "engine_fusions": {"static_fp8_scale": self.engine["static_fp8"],
                                                         "fp8_input_gemms": sorted(self.engine["fp8_input"]),
                                                         "fused_elementwise": sorted(self.engine["fused"])},
                "engine_overhead": {"cpu_step_s": self.p.cpu_step_s,
                                                          "cpu_per_seq_s": self.p.cpu_per_seq_s,
                                                          "source": self.overhead_source},
                "notes": list(self.notes) + self.standing_notes(), "extrapolated": self.extrapolated()}

    def standing_notes(self) -> list[str]:
        """The operators every step prices by the roofline (no table), and the dtypes priced with
        another dtype's tables."""
        fused = self.engine["fused"]
        names = {"rmsnorm": "RMSNorm", "silu_mul": "SiLU x mul", "rotary": "rotary", "kv_write": "KV write"}
        ops = [names[op] for op in names if op not in fused] + ["embedding", "final norm", "sampling"]
        if self.tp > 1:
            ops.append("logits all-gather")
        if self.pp > 1:
            ops.append("pipeline send/recv")
        notes = [f"roofline (no table): {', '.join(ops)}"]
        for what, dt in (("weights", self.dtype), ("activations", self.act_dtype), ("KV cache", self.kv_dtype)):
            if dt == "fp16":
                notes.append(f"fp16 {what}: priced with the bf16 tables (the database measures bf16; same width "
                             "and tensor-core rate)")
        return notes

    overhead_source = "roofline defaults"


def load_kerneldb_cost_model(model, hw, *, framework: str, version: str | None = None, params=None,
                             tp: int = 1, pp: int = 1, dtype: str = "bf16", kv_dtype: str | None = None,
                             block_size: int = 16, use_cache: bool = True, moe_table: str | None = None,
                             **precision) -> KernelDbCostModel:
    """The database model for (GPU, framework, version); raises KernelDbUnavailable with the reason
    when the package is missing or does not cover the request. ``moe_table``: another framework
    whose collection on this GPU prices the routed experts (its newest version; MoE models)."""
    from dataclasses import replace

    from sim.cost.roofline import RooflineParams

    if dtype not in kd.GEMM_DTYPE:
        raise kd.KernelDbUnavailable(f"the kernel database has no {dtype} GEMMs")
    system, version = kd.resolve(hw.id, framework, version)
    arrays = kd.load(system, framework, version, use_cache=use_cache)
    cls = KernelDbCostModel
    from sim.cost import kerneldb_moe  # MoE / MLA layouts (a module of their own)

    if kerneldb_moe.handles(model):
        arrays, cls = {**arrays, **kerneldb_moe.load(system, framework, version, use_cache=use_cache)}, \
            kerneldb_moe.KernelDbMoeCostModel
        if moe_table is not None:
            arrays = kerneldb_moe.with_moe_rows_of(arrays, system, moe_table, hw.id, use_cache=use_cache)
    params = params or RooflineParams()
    ov = load_overhead(framework, tp)
    src = "roofline defaults (no fitted overhead for this framework)"
    if ov is not None:
        params = replace(params, cpu_step_s=ov[0], cpu_per_seq_s=ov[1])
        src = ov[2]
    cm = cls(model, hw, framework=framework, version=version, system=system, arrays=arrays, tp=tp,
                           pp=pp, dtype=dtype, kv_dtype=kv_dtype, block_size=block_size, params=params,
                           **precision)
    cm.overhead_source = src
    cm.params_source = f"{SOURCE} {kd.package_version()} ({system}, {framework} {version}); overhead: {src}"
    return cm
