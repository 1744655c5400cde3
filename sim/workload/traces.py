"""Streaming readers for public request-trace formats, exactly as published.

Formats (``trace.format``; ``auto`` detects it from the CSV header or the first JSON keys), one
entry each of the table ``FORMATS`` at the end of this module (a name, a detector and a reader):

- ``azure``: Azure LLM inference 2023 / 2024 CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  ``TIMESTAMP`` is a wall-clock string such as ``2023-11-16 18:17:03.9799600`` (any number of
  fractional digits, optional ``T`` separator and ``Z`` / ``+hh:mm`` suffix), parsed by slicing
  (dates are cached), not by ``datetime``, which takes only 6 fractional digits.
- ``burstgpt``: CSV ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type``. ``model_filter`` / ``log_type_filter`` keep matching rows
  (others counted in ``info["filtered_rows"]``). Rows with 0 response tokens are BurstGPT's
  failed requests: skipped and counted in ``info["skipped_failed_rows"]``.
- ``mooncake``: JSONL ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``; the
  hash ids become ``block_hashes`` with ``hash_block_tokens = 512``.
- ``sharegpt``: a JSON list (or JSONL) of ``{"id", "conversations": [{"from", "value"}]}``.
  Lengths only: tokens are estimated as ceil(characters / 4) (``estimate_tokens``). One request
  per user turn answered by an assistant turn; a conversation is a session whose later prompts
  hold the whole history, with hash-chained prefix blocks (``sim.workload.prefix``). Session
  starts follow the workload's arrival process and ``rate``; later turns follow after an
  exponential think time (``workload.sessions.think_time_s``, default 10 s).
- ``generic``: CSV or JSONL with ``arrival_s,prompt_tokens,output_tokens`` and optional
  ``session_id``, ``priority``, ``slo_class``, ``tenant``, ``max_output_tokens``.

Files are read line by line (a JSON list in 1 MiB chunks), so memory does not grow with the
file; ``.gz`` files are read through gzip. Errors name the file and the physical 1-based line
(the CSV header is line 1) and the bad column and value; with ``skip_bad`` the row is skipped
and counted in ``info["skipped_bad_rows"]`` (first lines in ``info["bad_row_lines"]``). A JSON
list that is not valid JSON cannot be resynchronised and always raises.

Timestamp disorder: a bounded reorder buffer. A row may be up to ``reorder_window_s`` (default
1 s) earlier than the latest timestamp seen; such rows are put back in order (counted in
``info["reordered_rows"]``). A row earlier than that is an error naming its line (or a bad row
under ``skip_bad``). ``reorder_window_s: 0`` demands non-decreasing timestamps.

Then, in this order: time window (``window_start_s`` / ``window_end_s`` in seconds after the
first arrival; arrivals are re-zeroed at the window start; reading stops at the window end),
sampling (``sample_fraction``, one uniform draw per row from the workload's generator), the
``num_requests`` cap (the first N requests left; reading stops there), and time scaling:
``rate_scale`` divides arrival times; ``rate`` rescales them so that count / (last - first
arrival) equals ``rate``, which costs a first counting pass over the file. Nothing is dropped
silently: every row that does not become a request is counted in ``info``, and a trace that
yields no request is an error.
"""
from __future__ import annotations

import copy
import csv
from array import array
import gzip
import heapq
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from sim.errors import TraceError
from sim.types import RequestSpec
from sim.workload.config import MAX_TOKENS, SessionConfig, TraceConfig, WorkloadConfig
from sim.workload.prefix import HASH_BLOCK_TOKENS, HashChain, own_key
from sim.workload.arrivals import Draws, arrival_times, in_time_order

MOONCAKE_BLOCK_TOKENS = 512
PREFIX_FORMATS = ("mooncake", "sharegpt")
"""Trace formats whose rows carry prefix hashes (Mooncake's ``hash_ids``; ShareGPT's history)."""
CHARS_PER_TOKEN = 4
MAX_BAD_LINES = 10
MAX_LINE_CHARS = 16 * 2**20
"""Longest line read from a trace (a Mooncake or generic row is under a few KiB); a longer one,
e.g. a multi-GB file without line breaks, is an error instead of a line held in memory."""
_USER, _ASSISTANT = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
GENERIC_OPTIONAL = ("session_id", "priority", "slo_class", "tenant", "max_output_tokens")

Row = tuple  # (time_s, line, prompt_tokens, output_tokens, extra RequestSpec fields or None)


class _Bad(ValueError):
    """One row is malformed; the message names the column and the value."""


def estimate_tokens(text: str) -> int:
    """Token count estimated from text: ceil(characters / 4), OpenAI's rule of thumb for
    English with BPE tokenizers; 0 for an empty string."""
    return -(-len(text) // CHARS_PER_TOKEN)


def read_trace_requests(cfg: WorkloadConfig, info: dict, rng: np.random.Generator | None = None) -> Iterator[RequestSpec]:
    """Requests of ``cfg.trace`` in arrival order, ids 0, 1, 2, ...; counts go to ``info``.
    ``rng`` drives sampling and ShareGPT arrivals (default: a generator seeded with 0), and with
    ``arrivals: poisson`` the re-drawn arrival times (exponential gaps of mean span / count,
    from a generator of their own seeded by one draw of ``rng``; ``constant``: every gap span / count)."""
    tc = cfg.trace
    rng = np.random.default_rng(0) if rng is None else rng
    factor = 1.0 / tc.rate_scale
    redraw = tc.arrivals != "recorded"
    if tc.rate is not None or redraw:
        count, first, last = 0, 0.0, 0.0
        for a, *_ in _selected(cfg, {}, copy.deepcopy(rng)):
            first, last, count = (a if count == 0 else first), a, count + 1
        if count < 2 or last <= first:
            what = f"rescale to rate {tc.rate}/s" if tc.rate is not None else "re-draw its arrivals at its rate"
            raise TraceError(f"{tc.path}: cannot {what}: {count} requests over {last - first:g} s")
        if tc.rate is not None:
            factor = count / (tc.rate * (last - first))
    times = None
    if redraw:  # the same mean rate (count / span, as ``rate`` defines it), times from the seed
        gap = (last - first) * factor / count
        own = np.random.default_rng([int(rng.integers(0, 2**63)), 1])
        times = Draws((lambda k: own.exponential(gap, k)) if tc.arrivals == "poisson" else (lambda k: np.full(k, gap)))
    t = 0.0
    for n, (a, _, p, o, extra) in enumerate(_selected(cfg, info, rng)):
        if times is None:
            t = a * factor
        elif n:
            t += times.next()
        if extra is None:
            yield RequestSpec(id=n, arrival_s=t, prompt_tokens=p, output_tokens=o)
        else:
            yield RequestSpec(id=n, arrival_s=t, prompt_tokens=p, output_tokens=o, **extra)


def _selected(cfg: WorkloadConfig, info: dict, rng: np.random.Generator) -> Iterator[Row]:
    """Rows in time order after window, sampling and cap; time re-zeroed (s, unscaled)."""
    tc = cfg.trace
    for k in ("skipped_bad_rows", "rows", "outside_window", "sampled_out", "requests"):
        info.setdefault(k, 0)
    ws, we = tc.window_start_s or 0.0, tc.window_end_s
    frac = tc.sample_fraction
    u = Draws(rng.random) if frac is not None and frac < 1 else None
    t0, n = None, 0
    for t, line, p, o, extra in _ordered(raw_rows(cfg, info, rng), tc, info):
        if t0 is None:
            t0 = t
        rel = t - t0
        if we is not None and rel >= we:
            info["stopped_early"] = f"window end reached at line {line}"
            break
        if rel < ws:
            info["outside_window"] += 1
            continue
        if u is not None and u.next() >= frac:
            info["sampled_out"] += 1
            continue
        yield rel - ws, line, p, o, extra
        n += 1
        info["requests"] = n
        if tc.num_requests is not None and n >= tc.num_requests:
            info["stopped_early"] = f"num_requests {n} reached at line {line}"
            return
    if n == 0:
        counts = ", ".join(f"{k} {v}" for k, v in info.items() if isinstance(v, int) and v)
        raise TraceError(f"{tc.path}: no requests left ({counts or 'no data rows'})")


def _ordered(rows: Iterator[Row], tc: TraceConfig, info: dict) -> Iterator[Row]:
    """``rows`` in time order (ties by line), through a reorder buffer of ``reorder_window_s``."""
    w = tc.reorder_window_s
    heap: list = []
    hi = last_out = -math.inf
    info.setdefault("reordered_rows", 0)
    for row in rows:
        t = row[0]
        if t < hi - w or t < last_out:
            _bad_row(tc, info, row[1], f"timestamp {t - (last_out if t < last_out else hi):+.6g} s behind an earlier "
                     f"row, more than reorder_window_s = {w:g} s (sort the file or raise trace.reorder_window_s)")
            continue
        if t < hi:
            info["reordered_rows"] += 1
        hi = max(hi, t)
        if w == 0:
            last_out = t
            yield row
            continue
        heapq.heappush(heap, row)
        while heap[0][0] < hi - w:
            last_out = heap[0][0]
            yield heapq.heappop(heap)
    while heap:
        yield heapq.heappop(heap)


def _bad_row(tc: TraceConfig, info: dict, line: int, msg: str) -> None:
    if not tc.skip_bad:
        raise TraceError(f"{tc.path}, line {line}: {msg}")
    info["skipped_bad_rows"] = info.get("skipped_bad_rows", 0) + 1
    lines = info.setdefault("bad_row_lines", [])
    if len(lines) < MAX_BAD_LINES:
        lines.append(line)


class _TraceText:
    """A trace opened as text whose reads turn a binary, undecodable or truncated (.gz) file
    into a TraceError, and whose lines are bounded by ``MAX_LINE_CHARS`` (memory stays bounded
    whatever the file holds)."""

    def __init__(self, f, path: str):
        self.f, self.path, self.line = f, path, 0

    def _guard(self, fn, *a):
        import zlib

        try:
            return fn(*a)
        except UnicodeDecodeError:
            raise TraceError(f"{self.path}, line {self.line + 1}: not a text trace (bytes that are not UTF-8)") from None
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise TraceError(f"{self.path}: not a readable .gz file ({type(e).__name__}: {e}); truncated or corrupt?") from None
        except OSError as e:
            raise TraceError(f"{self.path}: cannot read ({e})") from None

    def readline(self) -> str:
        s = self._guard(self.f.readline, MAX_LINE_CHARS + 1)
        if len(s) > MAX_LINE_CHARS:
            raise TraceError(f"{self.path}, line {self.line + 1}: longer than {MAX_LINE_CHARS:,} characters; "
                             "not a trace with one request per line")
        self.line += 1
        return s

    def __iter__(self):
        return self

    def __next__(self) -> str:
        s = self.readline()
        if not s:
            raise StopIteration
        return s

    def read(self, n: int) -> str:
        return self._guard(self.f.read, n)

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, pos: int) -> None:
        self.f.seek(pos)
        self.line = 0 if pos == 0 else self.line

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_text(path: str) -> _TraceText:
    """Open a trace as text (``.gz`` through gzip); a missing file is a TraceError."""
    p = Path(path)
    if not p.is_file():
        what = ("is a folder; give a trace file in it" if p.is_dir() else
                "is not a regular file (a device, a pipe or a socket)" if p.exists() else "no such trace file")
        raise TraceError(f"{path}: {what}")
    if p.suffix == ".gz":
        f = gzip.open(p, "rt", encoding="utf-8-sig", newline="")
    else:
        f = open(p, encoding="utf-8-sig", newline="")
    return _TraceText(f, str(path))


@dataclass(frozen=True)
class Head:
    """What format detection sees: the file's shape (``list`` for a JSON list, ``object`` for
    JSON lines, ``csv``) and the keys of its first object or the columns of its header."""

    kind: str
    keys: frozenset


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: ``read(f, cfg, info, bad, rng)`` yields its rows (time s, line, prompt,
    output, extra fields) in file order. A file is in this format when its shape is one of
    ``shapes`` and its keys include ``columns`` (or when ``detect(head)`` says so, if given);
    ``title`` and ``columns`` also name it in error messages."""

    name: str
    title: str
    shapes: tuple[str, ...]
    columns: tuple[str, ...]
    read: Callable
    detect: Callable[[Head], bool] | None = None

    def accepts(self, head: Head) -> bool:
        if self.detect is not None:
            return self.detect(head)
        return head.kind in self.shapes and set(self.columns) <= head.keys


def _head(path: str) -> tuple[Head, int, str]:
    """(head, its physical line, the line's text) of a trace file."""
    with open_text(path) as f:
        text = f.read(4096)
        while text.isspace():  # keep only what follows leading blank space (bounded memory)
            more = f.read(4096)
            if not more:
                break
            text = more
    if "\x00" in text:
        raise TraceError(f"{path}: binary data (NUL bytes); not a text trace")
    if not text.strip():
        raise TraceError(f"{path}: the file is empty")
    if text.lstrip()[0] == "[":
        with open_text(path) as f:  # its first item must be a JSON object (else a TraceError here, up front)
            line, first = next(_json_items(f, path), (1, _EMPTY))
        if first is _EMPTY:
            raise TraceError(f"{path}: the JSON list is empty (no requests)")
        if not isinstance(first, dict):
            raise TraceError(f"{path}, line {line}: expected a JSON object in the list, found {type(first).__name__}")
        return Head("list", frozenset()), 1, "["
    with open_text(path) as f:
        for line_no, s in enumerate(f, 1):
            if s.strip():
                break
    s = s.strip()
    if s.startswith("{"):
        try:
            keys = json.loads(s)
        except (ValueError, TypeError):
            raise TraceError(f"{path}, line {line_no}: not a JSON object") from None
        return Head("object", frozenset(keys)), line_no, s
    return Head("csv", frozenset(c.strip() for c in next(csv.reader([s])))), line_no, s


def detect_format(path: str) -> str:
    """The trace format, from the CSV header or the first JSON object's keys: the first entry of
    ``FORMATS`` whose detector accepts the file."""
    head, line_no, s = _head(path)
    for fmt in FORMATS.values():
        if fmt.accepts(head):
            return fmt.name
    known = " or ".join(f"{f.title} ({', '.join(f.columns)})" for f in FORMATS.values() if head.kind in f.shapes)
    what = f"JSON keys {sorted(head.keys)}" if head.kind == "object" else f"header {s[:120]!r}"
    raise TraceError(f"{path}, line {line_no}: unrecognised {what}; expected {known}")


def trace_format(name: str) -> TraceFormat:
    """The table entry of ``name``; an unknown name is a TraceError listing the known ones."""
    if name not in FORMATS:
        raise TraceError(f"unknown trace format {name!r} (known: auto, {', '.join(sorted(FORMATS))})")
    return FORMATS[name]


def raw_rows(cfg: WorkloadConfig, info: dict, rng: np.random.Generator) -> Iterator[Row]:
    """Rows in file order (ShareGPT: in synthesized time order), absolute times in seconds."""
    tc = cfg.trace
    fmt = trace_format(detect_format(tc.path) if tc.format == "auto" else tc.format)
    info["format"], info["source"] = fmt.name, f"{fmt.name} trace {tc.path}"

    def bad(line: int, msg: str) -> None:
        _bad_row(tc, info, line, msg)

    if tc.acceptance_column is not None and fmt.name == "sharegpt":
        raise TraceError(f"{tc.path}: a ShareGPT trace has no per-request column to read acceptance rates from "
                         "(speculative.acceptance: trace)")
    with open_text(tc.path) as f:
        yield from fmt.read(f, cfg, info, bad, rng)


def _first_char(f) -> str:
    pos = f.tell()
    for s in f:
        if s.strip():
            f.seek(pos)
            return s.lstrip()[0]
    f.seek(pos)
    return ""


# ---- values -------------------------------------------------------------------------------

def _length(v, col: str) -> int:
    """A token count >= 1 from a CSV string or a JSON number."""
    if type(v) is int:
        x = v
    else:
        try:
            x = int(v)
            if isinstance(v, float) and v != x:
                raise ValueError
        except (TypeError, ValueError):
            try:
                f = float(v)
            except (TypeError, ValueError):
                f = math.nan
            if isinstance(v, bool) or not f.is_integer():
                raise _Bad(f"{col} {v!r} is not an integer") from None
            x = int(f)
    if x < 1:
        raise _Bad(f"{col} {v!r} must be at least 1")
    if x > MAX_TOKENS:
        raise _Bad(f"{col} {v!r} is more than {MAX_TOKENS:,} tokens (no model holds that many)")
    return x


def _seconds(v, col: str, scale: float = 1.0) -> float:
    try:
        x = float(v) * scale
    except (TypeError, ValueError):
        raise _Bad(f"{col} {v!r} is not a number") from None
    if isinstance(v, bool) or not math.isfinite(x):
        raise _Bad(f"{col} {v!r} is not a finite number")
    return x


_EPOCH = date(1970, 1, 1).toordinal()


def _wallclock(s: str, days: dict) -> float:
    """Seconds since midnight of the file's first date, for ``YYYY-MM-DD hh:mm:ss[.f*]`` with an
    optional ``T`` separator and ``Z`` / ``+hh:mm`` suffix. ``days`` caches dates per file."""
    try:
        d, tm = s.strip().replace("T", " ", 1).split(" ", 1)
        base = days.get(d)
        if base is None:
            ref = days.setdefault(None, date.fromisoformat(d).toordinal())
            base = days[d] = (date.fromisoformat(d).toordinal() - ref) * 86400.0
        tz = 0.0
        if tm.endswith("Z"):
            tm = tm[:-1]
        elif len(tm) > 8 and tm[-6] in "+-" and tm[-3] == ":":
            tz = (int(tm[-5:-3]) * 3600 + int(tm[-2:]) * 60) * (1 if tm[-6] == "+" else -1)
            tm = tm[:-6]
        if len(tm) < 8 or tm[2] != ":" or tm[5] != ":":
            raise ValueError
        h, m, sec = int(tm[:2]), int(tm[3:5]), float(tm[6:])
        if not (0 <= h < 24 and 0 <= m < 60 and 0 <= sec < 61):
            raise ValueError
    except ValueError:
        raise _Bad(f"TIMESTAMP {s!r} is not a date and time like '2023-11-16 18:17:03.9799600'") from None
    return base + h * 3600 + m * 60 + sec - tz


# ---- CSV formats: a maker takes the header's column index and returns a row parser -------

def _azure(col: dict, tc: TraceConfig, info: dict) -> Callable:
    it, ip, io, days = col["TIMESTAMP"], col["ContextTokens"], col["GeneratedTokens"], {}
    return lambda r: (_wallclock(r[it], days), _length(r[ip], "ContextTokens"), _length(r[io], "GeneratedTokens"), None)


def _burstgpt(col: dict, tc: TraceConfig, info: dict) -> Callable:
    it, ip, io = col["Timestamp"], col["Request tokens"], col["Response tokens"]
    models = set(tc.model_filter) if tc.model_filter is not None else None
    logs = set(tc.log_type_filter) if tc.log_type_filter is not None else None
    for name, want in (("Model", models), ("Log Type", logs)):
        if want is not None and name not in col:
            raise TraceError(f"{tc.path}, line 1: filtering on {name} but the header has no {name!r} column")
    im, il = col.get("Model"), col.get("Log Type")
    info.setdefault("filtered_rows", 0)
    info.setdefault("skipped_failed_rows", 0)

    def parse(r):
        if (models is not None and r[im].strip() not in models) or (logs is not None and r[il].strip() not in logs):
            info["filtered_rows"] += 1
            return None
        t = _seconds(r[it], "Timestamp")
        if r[io].strip() in ("0", "0.0"):  # BurstGPT logs failed requests with 0 response tokens
            info["skipped_failed_rows"] += 1
            return None
        return t, _length(r[ip], "Request tokens"), _length(r[io], "Response tokens"), None

    return parse


def _generic_csv(col: dict, tc: TraceConfig, info: dict) -> Callable:
    it, ip, io = col["arrival_s"], col["prompt_tokens"], col["output_tokens"]
    opt = {k: col[k] for k in GENERIC_OPTIONAL if k in col}

    def parse(r):
        extra = _generic_extra({k: r[i] for k, i in opt.items() if r[i].strip() != ""}) if opt else None
        return _seconds(r[it], "arrival_s"), _length(r[ip], "prompt_tokens"), _length(r[io], "output_tokens"), extra

    return parse


def _csv(f, tc: TraceConfig, info: dict, bad: Callable, maker: Callable, fmt: str) -> Iterator[Row]:
    reader = csv.reader(f)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{tc.path}: the file is empty") from None
    col = {name.strip(): i for i, name in enumerate(header)}
    missing = [c for c in FORMATS[fmt].columns if c not in col]
    if missing:
        raise TraceError(f"{tc.path}, line 1: the header lacks column(s) {', '.join(missing)} of the {fmt} format")
    parse, width = _accepting_csv(maker, tc)(col, tc, info), len(header)
    while True:
        try:
            r = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceError(f"{tc.path}, line {reader.line_num}: {e}") from None
        if not r or (len(r) == 1 and not r[0].strip()):
            continue
        info["rows"] += 1
        line = reader.line_num
        if len(r) != width:
            bad(line, f"{len(r)} fields where the header has {width}")
            continue
        try:
            out = parse(r)
        except _Bad as e:
            bad(line, str(e))
            continue
        if out is not None:
            yield out[0], line, out[1], out[2], out[3]


def _acceptance(v, col: str) -> float:
    """A measured draft acceptance rate in [0, 1] (column ``col``)."""
    try:
        a = float(v)
        if isinstance(v, bool) or not 0.0 <= a <= 1.0:
            raise ValueError
    except (TypeError, ValueError):
        raise _Bad(f"{col} {v!r} is not an acceptance rate in [0, 1]") from None
    return a


def _with_acceptance(out, a: float):
    """Row ``out`` (a parser's) with its request's acceptance rate among the extra fields."""
    if out is None:
        return None
    return out[0], out[1], out[2], {**(out[3] or {}), "acceptance": a}


def _accepting_csv(maker: Callable, tc: TraceConfig) -> Callable:
    """``maker`` whose rows also read ``tc.acceptance_column`` (any CSV format)."""
    name = tc.acceptance_column
    if name is None:
        return maker

    def make(col, tc, info):
        if name not in col:
            raise TraceError(f"{tc.path}, line 1: the header lacks column {name} (speculative.acceptance)")
        parse, i = maker(col, tc, info), col[name]
        return lambda r: _with_acceptance(parse(r), _acceptance(r[i], name))

    return make


def _accepting(parse: Callable, tc: TraceConfig) -> Callable:
    """``parse`` (a JSON object's) also reading ``tc.acceptance_column``."""
    name = tc.acceptance_column
    if name is None:
        return parse
    return lambda obj: _with_acceptance(parse(obj), _acceptance(_get(obj, name), name))


# ---- JSON formats -------------------------------------------------------------------------

def _get(obj: dict, key: str):
    if key not in obj:
        raise _Bad(f"missing key {key!r}")
    return obj[key]


def _mooncake(obj: dict):
    hashes = _get(obj, "hash_ids")
    if not isinstance(hashes, list) or not all(type(h) is int for h in hashes):
        raise _Bad(f"hash_ids {str(hashes)[:60]!r} is not a list of integers")
    extra = {"block_hashes": tuple(hashes), "hash_block_tokens": MOONCAKE_BLOCK_TOKENS}
    return (_seconds(_get(obj, "timestamp"), "timestamp", 1e-3), _length(_get(obj, "input_length"), "input_length"),
            _length(_get(obj, "output_length"), "output_length"), extra)


def _generic_obj(obj: dict):
    extra = _generic_extra({k: obj[k] for k in GENERIC_OPTIONAL if obj.get(k) is not None})
    return (_seconds(_get(obj, "arrival_s"), "arrival_s"), _length(_get(obj, "prompt_tokens"), "prompt_tokens"),
            _length(_get(obj, "output_tokens"), "output_tokens"), extra)


def _generic_extra(vals: dict) -> dict | None:
    out = {}
    for k, v in vals.items():
        if k == "max_output_tokens":
            out[k] = _length(v, k)
        elif k == "priority":
            try:
                out[k] = int(v)
                if isinstance(v, (bool, float)):
                    raise ValueError
            except (TypeError, ValueError):
                raise _Bad(f"priority {v!r} is not an integer") from None
        else:
            out[k] = str(v).strip()
    return out or None


def _jsonl(f, info: dict, bad: Callable, parse: Callable) -> Iterator[Row]:
    for line, s in enumerate(f, 1):
        if not s.strip():
            continue
        info["rows"] += 1
        try:
            obj = json.loads(s)
        except ValueError as e:
            bad(line, f"not valid JSON ({e.msg})")
            continue
        try:
            if not isinstance(obj, dict):
                raise _Bad(f"expected a JSON object, found {type(obj).__name__}")
            t, p, o, extra = parse(obj)
        except _Bad as e:
            bad(line, str(e))
            continue
        yield t, line, p, o, extra


_WS = re.compile(r"[ \t\r\n]*")
_EMPTY = object()  # ``_head``: a JSON list without items
_CHUNK, _MAX_ITEM = 1 << 20, 64 << 20


def _json_items(f, path: str) -> Iterator[tuple[int, object]]:
    """(line, value) for each element of a JSON list (read in chunks), or each line of JSONL."""
    if _first_char(f) != "[":
        for line, s in enumerate(f, 1):
            if s.strip():
                try:
                    yield line, json.loads(s)
                except ValueError as e:
                    yield line, _Bad(f"not valid JSON ({e.msg})")
        return
    dec = json.JSONDecoder()
    buf, pos, line, eof = "", 0, 1, False

    def skip_ws():
        nonlocal buf, pos, line, eof
        while True:
            end = _WS.match(buf, pos).end()
            line += buf.count("\n", pos, end)
            pos = end
            if pos < len(buf) or eof:
                return
            chunk = f.read(_CHUNK)
            eof = not chunk
            buf, pos = buf[pos:] + chunk, 0

    def fail(msg: str):
        raise TraceError(f"{path}, line {line}: {msg} (a JSON list cannot skip bad rows)")

    skip_ws()
    if buf[pos:pos + 1] != "[":
        fail("expected '['")
    pos += 1
    first = True
    while True:
        skip_ws()
        if buf[pos:pos + 1] == "]":
            return
        if not first:
            if buf[pos:pos + 1] != ",":
                fail("expected ',' or ']' between list items" if pos < len(buf) else "the JSON list is not closed")
            pos += 1
            skip_ws()
        first = False
        while True:
            try:
                obj, end = dec.raw_decode(buf, pos)
                break
            except ValueError as e:
                if eof or len(buf) - pos > _MAX_ITEM:
                    fail(f"not valid JSON ({e.msg})")
                chunk = f.read(_CHUNK)
                eof = not chunk
                buf, pos = buf[pos:] + chunk, 0
        yield line, obj
        line += buf.count("\n", pos, end)
        pos = end


def _conversation(obj, info: dict) -> list[tuple[int, int]]:
    """(new prompt tokens, output tokens) per answered user turn of one ShareGPT conversation.
    Everything said (system text, unanswered or empty-answer turns) stays in the history."""
    if isinstance(obj, _Bad):
        raise obj
    conv = obj.get("conversations") if isinstance(obj, dict) else None
    if not isinstance(conv, list):
        raise _Bad("no 'conversations' list")
    turns, carry, pending = [], 0, 0
    for i, m in enumerate(conv):
        role, text = (m.get("from"), m.get("value")) if isinstance(m, dict) else (None, None)
        if not isinstance(text, str):
            raise _Bad(f"conversations[{i}] has no text 'value'")
        n = estimate_tokens(text)
        if role in _USER:
            pending += n
        elif role in _ASSISTANT:
            if pending and n:
                turns.append((carry + pending, n))
                carry = pending = 0
            else:
                if pending:
                    info["skipped_empty_answers"] = info.get("skipped_empty_answers", 0) + 1
                carry, pending = carry + pending + n, 0
        elif role == "system":
            carry += n
        else:
            raise _Bad(f"conversations[{i}] has unknown speaker 'from' {role!r}")
    if pending:
        info["unanswered_turns"] = info.get("unanswered_turns", 0) + 1
    return turns


def _sharegpt(f, cfg: WorkloadConfig, info: dict, bad: Callable, rng: np.random.Generator) -> Iterator[Row]:
    ses = cfg.sessions or SessionConfig()
    think = Draws(lambda n: rng.exponential(ses.think_time_s, n))
    starts = arrival_times(cfg, rng)

    def plans():
        for idx, (line, obj) in enumerate(_json_items(f, cfg.trace.path)):
            info["rows"] += 1
            try:
                turns = _conversation(obj, info)
            except _Bad as e:
                bad(line, str(e))
                continue
            if not turns:
                info["conversations_without_answer"] = info.get("conversations_without_answer", 0) + 1
                continue
            t, chain, hist, items = next(starts), HashChain(own_key(idx)), 0, []
            sid = str(obj.get("id", idx))
            for j, (u, o) in enumerate(turns):
                if j:
                    t += think.next()
                p = hist + u
                extra = {"session_id": sid, "block_hashes": chain.hashes(p), "hash_block_tokens": HASH_BLOCK_TOKENS}
                items.append((t, (line, p, o, extra)))
                hist = p + o
            yield items

    for t, _, _, (line, p, o, extra) in in_time_order(plans()):
        yield t, line, p, o, extra


def trace_lengths(path: str, fmt: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths, output lengths) of every request of a trace, as int32 arrays."""
    p, o = array("i"), array("i")
    for r in read_trace_requests(WorkloadConfig(trace=TraceConfig(path=str(path), format=fmt)), {}, np.random.default_rng(0)):
        p.append(r.prompt_tokens)
        o.append(r.output_tokens)
    return np.frombuffer(p, dtype=np.int32), np.frombuffer(o, dtype=np.int32)


# ---- the table: a new format is one entry (detection tries them in this order) ------------

def _read_generic(f, cfg, info, bad, rng):
    if _first_char(f) == "{":
        return _jsonl(f, info, bad, _accepting(_generic_obj, cfg.trace))
    return _csv(f, cfg.trace, info, bad, _generic_csv, "generic")


FORMATS: dict[str, TraceFormat] = {t.name: t for t in (
    TraceFormat("sharegpt", "ShareGPT", ("list", "object"), ("conversations",), _sharegpt,
                detect=lambda h: h.kind == "list" or (h.kind == "object" and "conversations" in h.keys)),
    TraceFormat("mooncake", "Mooncake", ("object",), ("timestamp", "input_length", "output_length"),
                lambda f, cfg, info, bad, rng: _jsonl(f, info, bad, _accepting(_mooncake, cfg.trace))),
    TraceFormat("azure", "Azure", ("csv",), ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
                lambda f, cfg, info, bad, rng: _csv(f, cfg.trace, info, bad, _azure, "azure")),
    TraceFormat("burstgpt", "BurstGPT", ("csv",), ("Timestamp", "Request tokens", "Response tokens"),
                lambda f, cfg, info, bad, rng: _csv(f, cfg.trace, info, bad, _burstgpt, "burstgpt")),
    TraceFormat("generic", "generic", ("object", "csv"), ("arrival_s", "prompt_tokens", "output_tokens"), _read_generic),
)}
