"""Profiled cost model: per-operator table lookups from fitted profiles (docs/architecture.md sections 6, 7).

A fitted folder ``<root>/<hardware>/<model>/`` (written by ``servesim fit``, see
docs/calibration.md) holds ``tables.npz`` (one table per (family, dtype, tp, op): sorted grid
axes and times in seconds), ``roofline_params.json`` (this device's fitted efficiency factors)
and, once ``servesim validate`` has run on the device, ``overhead.json`` (the measured host-side
overhead per step and per sequence). Loading needs numpy only.

Lookups interpolate piecewise linearly in log(time) over log(tokens) (1-D tables: GEMM,
elementwise, sampling, collectives) or bilinearly over two log axes (attention prefill:
chunk x context; attention decode: batch x longest context). A query outside the measured grid
is **never extrapolated from the table**: it is clamped to the nearest grid point and the
table's time there is scaled by the roofline's ratio between the query and that boundary point
(so a GEMM of twice the largest profiled token count costs about twice as much, as the
roofline says). Every such query is counted in ``_oor`` and reported as
``summary.json`` ``sim.out_of_range_queries``. An operator, tp or dtype without a table falls
back to the roofline with this device's fitted efficiency factors.

Decode attention is priced as the profile measured it: a paged-attention reference (block-table
gather, then attention; vLLM's KV layout) or ``scaled_dot_product_attention`` over a contiguous
cache (Hugging Face transformers' layout), as the fitted ``meta.json`` ``attention`` records
(``decode_attention`` on the model). Both are keyed by the longest context of the decode batch
because both pad a batch to its longest sequence. ``step_time`` records that length before
composing the step.
"""
from __future__ import annotations

import json
import math
from bisect import bisect_right
from dataclasses import fields
from pathlib import Path

import numpy as np

from sim.cost.roofline import RooflineCostModel, RooflineParams
from sim.data import shipped_fitted_root
from sim.kv.blocks import DEFAULT_BLOCK_SIZE


TABLES_FILE = "tables.npz"
SEP = "|"


def table_key(family: str, dtype: str, tp: int, op: str) -> str:
    return SEP.join((family, dtype, str(tp), op))


def _axis(v: float, log1p: bool) -> float:
    return math.log1p(v) if log1p else math.log(max(v, 1e-30))


def _bracket(xs: list[float], x: float) -> tuple[int, float]:
    """Index i and weight w so that x = (1-w) xs[i] + w xs[i+1]; x must lie inside xs."""
    if len(xs) == 1:
        return 0, 0.0
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    span = xs[i + 1] - xs[i]
    return i, (x - xs[i]) / span if span else 0.0


class Table:
    """A 1-D or 2-D table of log times over log axes (axis values as profiled)."""

    def __init__(self, x: np.ndarray, t: np.ndarray, y: np.ndarray | None = None,
                 x_log1p: bool = False, y_log1p: bool = False):
        self.x = [float(v) for v in x]
        self.y = None if y is None else [float(v) for v in y]
        self.x_log1p, self.y_log1p = x_log1p, y_log1p
        self.lx = [_axis(v, x_log1p) for v in self.x]
        self.ly = None if y is None else [_axis(v, y_log1p) for v in self.y]
        lt = np.log(np.asarray(t, dtype=float))
        self.lt = lt.tolist()

    def clamp(self, x: float, y: float | None = None) -> tuple[float, float | None, bool]:
        cx = min(max(x, self.x[0]), self.x[-1])
        out = cx != x
        cy = None
        if self.y is not None:
            cy = min(max(y, self.y[0]), self.y[-1])
            out = out or cy != y
        return cx, cy, out

    def __call__(self, x: float, y: float | None = None) -> float:
        """Seconds at an in-range point (callers clamp first)."""
        i, w = _bracket(self.lx, _axis(x, self.x_log1p))
        if self.y is None:
            lt = self.lt
            v = lt[i] if w == 0.0 else (1 - w) * lt[i] + w * lt[i + 1]
            return math.exp(v)
        j, u = _bracket(self.ly, _axis(y, self.y_log1p))
        lt = self.lt
        i2 = min(i + 1, len(self.lx) - 1)
        j2 = min(j + 1, len(self.ly) - 1)
        a = (1 - u) * lt[i][j] + u * lt[i][j2]
        b = (1 - u) * lt[i2][j] + u * lt[i2][j2]
        return math.exp((1 - w) * a + w * b)


def load_tables(path: str | Path) -> dict[str, Table]:
    """Every table of a fitted folder's ``tables.npz``, by ``table_key``."""
    out: dict[str, Table] = {}
    with np.load(Path(path) / TABLES_FILE) as z:
        names = {k.rsplit(SEP, 1)[0] for k in z.files}
        for name in names:
            g = lambda a: z[f"{name}{SEP}{a}"] if f"{name}{SEP}{a}" in z.files else None  # noqa: E731
            flags = g("log1p")
            xl, yl = (bool(flags[0]), bool(flags[1])) if flags is not None else (False, False)
            out[name] = Table(g("x"), g("t"), g("y"), xl, yl)
    return out


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


ENGINE_OVERHEAD_FILE = "engine_overhead.json"
"""Host overhead fitted from the user's own engine (``servesim calibrate-engine``)."""

OVERHEAD_FILES = ("overhead.json", ENGINE_OVERHEAD_FILE)
"""Overhead files in rising precedence: the replay probe of ``servesim validate``, then the fit
to the user's engine, which describes the engine being predicted."""

CPU_KEYS = ("cpu_step_s", "cpu_per_seq_s", "cpu_per_token_s", "cpu_per_seq_ctx_s")


def fitted_params(folder: Path, base: RooflineParams | None = None, dtype: str | None = None,
                  user: tuple[str, ...] = (), overhead_files: tuple[str, ...] = OVERHEAD_FILES
                  ) -> tuple[RooflineParams, dict]:
    """The device's roofline factors and where each came from: the factors fitted for ``dtype``
    (else the folder's main ones), the overhead of ``overhead.json`` then ``engine_overhead.json``,
    else ``base``; a field named in ``user`` (set by the user, ``cost.roofline``) always keeps
    ``base``'s value. Returns (params, {field: source}) for the fields not from ``base``, plus
    ``overridden``: the fitted values the user's replaced."""
    base = base or RooflineParams()
    names = {f.name for f in fields(RooflineParams)}
    vals = base.as_dict()
    src: dict = {}
    overridden: dict = {}
    rp = _read_json(folder / "roofline_params.json")
    layers = [("roofline_params.json", (rp.get("by_dtype", {}).get(dtype) or {}).get("params") or rp.get("params", rp))]
    layers += [(f, _read_json(folder / f).get("params", {})) for f in overhead_files]
    for fname, data in layers:
        for k, v in data.items():
            if k not in names or v is None:
                continue
            if k in user:
                overridden[k] = {"fitted": float(v), "file": fname, "used": vals[k]}
                continue
            vals[k] = float(v)
            src[k] = fname
    if overridden:
        src["overridden"] = overridden
    return RooflineParams(**vals), src


class ProfiledCostModel(RooflineCostModel):
    """The roofline with each profiled operator replaced by a table lookup (see module doc)."""

    source = "profiled"
    decode_attention = "paged"
    """The decode attention the ``attn_decode`` tables measured (``paged`` or ``contiguous``)."""

    def __init__(self, model, hw, tables: dict[str, Table], **kw):
        super().__init__(model, hw, **kw)
        self.tables = tables
        self._attn_cache: dict = {}

    # ------------------------------------------------------------------ lookup core
    def _table(self, family: str, op: str, tp: int | None = None) -> Table | None:
        return self.tables.get(table_key(family, self.dtype, self.tp if tp is None else tp, op))

    def _lookup(self, tab: Table, roof, x: float, y: float | None = None) -> float:
        """Table time at (x, y); outside the grid, boundary time x roofline(query)/roofline(boundary)."""
        cx, cy, out = tab.clamp(x, y)
        t = tab(cx, cy)
        if out:
            self._oor += 1
            rb = roof(cx, cy)
            if rb > 0:
                t *= roof(x, y) / rb
        return t

    # ------------------------------------------------------------------ operators
    def gemm(self, op: str, m: int) -> float:
        tab = self._table("gemm", op)
        if tab is None or m <= 0:
            return super().gemm(op, m)
        return self._lookup(tab, lambda a, _b: RooflineCostModel.gemm(self, op, max(1, round(a))), m)

    def moe(self, tokens: int) -> float:
        up, down = self._table("gemm", "expert_gate_up"), self._table("gemm", "expert_down")
        if up is None or down is None:
            return super().moe(tokens)  # per-expert gemm() lookups would mis-key the grouped rows
        roof = lambda a, _b: RooflineCostModel.moe(self, max(1, round(a)))  # noqa: E731
        return self._lookup(up, roof, tokens) + self._lookup(down, roof, tokens)

    def attn_prefill(self, chunks: list[tuple[int, int]]) -> float:
        tab = self._table("attn_prefill", "")
        if tab is None:
            return super().attn_prefill(chunks)
        total = 0.0
        cache = self._attn_cache
        for q, c in chunks:
            hit = cache.get((q, c))
            if hit is None:
                oor0 = self._oor
                roof = lambda a, b: RooflineCostModel.attn_prefill(self, [(max(1, round(a)), round(b))])  # noqa: E731
                hit = (self._lookup(tab, roof, q, c), self._oor - oor0)
                cache[(q, c)] = hit
            else:
                self._oor += hit[1]
            total += hit[0]
        return total

    def attn_decode(self, num_seqs: int, kv_tokens: int, longest: int = 0) -> float:
        tab = self._table("attn_decode", "")
        if tab is None or not num_seqs:
            return super().attn_decode(num_seqs, kv_tokens)
        longest = longest or -(-kv_tokens // num_seqs)
        roof = lambda a, b: RooflineCostModel.attn_decode(self, max(1, round(a)), max(1, round(a)) * b)  # noqa: E731
        return self._lookup(tab, roof, num_seqs, longest)

    def elementwise(self, op: str, tokens: int) -> float:
        tab = self._table("elementwise", op)
        if tab is None or tokens <= 0:
            return super().elementwise(op, tokens)
        return self._lookup(tab, lambda a, _b: RooflineCostModel.elementwise(self, op, max(1, round(a))), tokens)

    def sampling(self, num_seqs: int) -> float:
        tab = self._table("sampling", self.sampling_op)  # the profile's rows of this method
        if tab is None or num_seqs <= 0:
            return super().sampling(num_seqs)
        return self._lookup(tab, lambda a, _b: RooflineCostModel.sampling(self, max(1, round(a))), num_seqs)

    def collective(self, op: str, nbytes: float, world: int) -> float:
        tab = self._table("collective", op, tp=world)
        if tab is None or world <= 1 or nbytes <= 0:
            return super().collective(op, nbytes, world)
        return self._lookup(tab, lambda a, _b: RooflineCostModel.collective(self, op, a, world), nbytes)


# ---------------------------------------------------------------------- discovery

def fitted_gpu_average(profiles_dir: str | Path | None = None) -> tuple[Path, dict] | None:
    """The roofline factors averaged over profiled GPUs (``<fitted root>/roofline_params.json``,
    written by ``servesim fit`` over a root holding GPU profiles), or None."""
    root = Path(profiles_dir) if profiles_dir else shipped_fitted_root()
    if root is None:
        return None
    data = _read_json(root / "roofline_params.json")
    names = {f.name for f in fields(RooflineParams)}
    values = {k: float(v) for k, v in data.get("params", {}).items() if k in names and v is not None}
    return (root / "roofline_params.json", values) if values else None


def find_fitted(hardware_id: str, model_id: str, profiles_dir: str | Path | None = None) -> Path | None:
    """The fitted folder for (hardware, model): under ``profiles_dir`` (a fitted root, or the
    (hardware, model) folder itself) when given, else the shipped ``calibration/fitted``."""
    roots = [Path(profiles_dir)] if profiles_dir else []
    if not profiles_dir:
        r = shipped_fitted_root()
        if r is not None:
            roots.append(r)
    for root in roots:
        for cand in (root / hardware_id / model_id, root):
            if (cand / TABLES_FILE).is_file():
                meta = _read_json(cand / "meta.json")
                if cand == root and (meta.get("hardware_id"), meta.get("model")) != (hardware_id, model_id):
                    continue
                return cand
    return None


def load_profiled_cost_model(model, hw, *, params: RooflineParams | None = None, profiles_dir=None,
                             required: bool = False, tp: int = 1, pp: int = 1, dtype: str = "bf16",
                             kv_dtype: str | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                             user_params: tuple[str, ...] = (), overhead_files: tuple[str, ...] = OVERHEAD_FILES,
                             **precision) -> ProfiledCostModel | None:
    """A ProfiledCostModel when fitted tables for (hardware, model, dtype) exist, else None.

    The device's fitted efficiency factors and measured overhead replace ``params`` (they describe
    this device); they price the operators the profile lacks and the out-of-range scaling. A field
    named in ``user_params`` (set by the user) keeps its value from ``params``, and the model's
    ``params_source`` says so. ``overhead_files``: the overhead files read (``OVERHEAD_FILES``).
    """
    folder = find_fitted(hw.id, model.id, profiles_dir)
    if folder is None:
        return None
    tables = load_tables(folder)
    if not any(k.split(SEP)[1] == dtype for k in tables):
        return None
    p, src = fitted_params(folder, params, dtype, user_params, overhead_files)
    cm = ProfiledCostModel(model, hw, tables, tp=tp, pp=pp, dtype=dtype, kv_dtype=kv_dtype,
                           block_size=block_size, params=p, **precision)
    cm.decode_attention = _read_json(folder / "meta.json").get("attention") or "paged"
    cm.params_source = f"fitted for this device ({folder})"
    files = sorted({v for k, v in src.items() if k in CPU_KEYS})
    if files:
        cm.params_source += f"; host overhead from {' and '.join(files)}"
    over = src.get("overridden", {})
    cm.user_note = ""
    if over:
        cm.user_note = "set by the user (cost.roofline), replacing fitted values: " + ", ".join(
            f"{k}={o['used']:.4g} (fitted {o['fitted']:.4g} in {o['file']})" for k, o in sorted(over.items()))
        cm.params_source += "; " + cm.user_note
    cm.profile_warnings = [f"the profile behind {folder}: {w}"
                           for w in (_read_json(folder / "meta.json").get("profile") or {}).get("warnings") or []]
    return cm
