"""Reader for the result JSON of ``vllm bench serve --save-result [--save-detailed]``.

Schema (learnt from vLLM's ``vllm/benchmarks/serve.py`` and the older
``benchmarks/benchmark_serving.py``; the file is one JSON object):

- setup: ``date``, ``backend``, ``model_id``, ``tokenizer_id``, ``num_prompts``, ``request_rate``
  (a number, or the string ``"inf"``), ``burstiness`` (absent before vLLM 0.6.4: 1.0),
  ``max_concurrency``, plus any ``--metadata KEY=VALUE`` pairs (e.g. ``seed``);
- aggregates: ``duration`` (s), ``completed``, ``failed`` (newer versions), ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``output_throughput``, ``total_token_throughput``,
  and for each selected metric ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms``, ``p<P>_<m>_ms``
  with m in ttft, tpot, itl, e2el (``--percentile-metrics``, default ttft,tpot,itl) and P from
  ``--metric-percentiles`` (default 99);
- per request, in the order the requests were sent, only with ``--save-detailed``: ``input_lens``,
  ``output_lens`` (0 for a failed request), ``ttfts`` (s), ``itls`` (list per request of gaps in s
  between consecutive streamed chunks), ``generated_texts``, ``errors`` ("" when it succeeded);
  newer versions also ``start_times`` (client clock, s), ``latencies`` (s) and ``queue_times``.

vLLM's definitions (client side): TTFT = first streamed chunk - request sent; E2EL ("latency") =
last chunk - request sent (= TTFT + sum of the request's ITLs); TPOT = (E2EL - TTFT) /
(output_len - 1) for requests with output_len > 1, averaged over requests; ITL = every gap between
consecutive chunks, pooled over requests; percentiles by ``numpy.percentile`` (linear).

A request failed when its error is non-empty or its output length is 0: it is excluded from the
latency metrics and counted. Every format problem raises ``BenchFileError`` naming the file and
the key (and the item index for per-request lists).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ServesimError

DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls")
OPTIONAL_LISTS = ("errors", "latencies", "start_times", "queue_times", "generated_texts")
METRICS = ("ttft", "tpot", "itl", "e2el")


class BenchFileError(ServesimError):
    """A vLLM benchmark result file is missing a key or has a value of the wrong type."""


@dataclass
class BenchResult:
    """One ``vllm bench serve`` result. Times are in seconds.

    ``requests`` (only with per-request detail) has one row per request sent, in send order:
    ``index, ok, error, prompt_tokens, output_tokens, ttft_s, e2e_s, tpot_s, chunks, start_s``.
    ``itl_s`` pools the chunk gaps of the successful requests. ``file_metrics`` holds the file's
    own aggregates as ``{"ttft_s": {"mean", "p50", "p99", ...}, ...}`` (seconds).
    """

    path: Path
    meta: dict
    duration_s: float
    completed: int
    failed: int
    total_input_tokens: int | None
    total_output_tokens: int | None
    request_throughput: float | None
    output_throughput: float | None
    file_metrics: dict
    requests: pd.DataFrame | None = None
    itl_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def detailed(self) -> bool:
        return self.requests is not None

    @property
    def ok(self) -> pd.DataFrame:
        """The successful requests (detail only)."""
        return self.requests[self.requests["ok"]]


def _err(path: Path, key: str, msg: str) -> BenchFileError:
    return BenchFileError(f"{path}: key '{key}': {msg}")


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(path: Path, data: dict, key: str, *, required: bool, positive: bool = False, integer: bool = False):
    if key not in data or data[key] is None:
        if required:
            raise BenchFileError(f"{path}: missing key '{key}' (not a `vllm bench serve --save-result` file?)")
        return None
    v = data[key]
    if not _is_num(v) or (isinstance(v, float) and math.isnan(v)):
        raise _err(path, key, f"expected a number, got {v!r}")
    if integer and float(v) != int(v):
        raise _err(path, key, f"expected an integer, got {v!r}")
    if v < 0 or (positive and v == 0):
        raise _err(path, key, f"must be {'positive' if positive else 'non-negative'}, got {v!r}")
    return int(v) if integer else float(v)


def _rate(path: Path, data: dict, key: str, default):
    """``request_rate`` / ``burstiness``: a positive number, or ``"inf"``."""
    if key not in data or data[key] is None:
        return default
    v = data[key]
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if not _is_num(v) or not v > 0:
        raise _err(path, key, f"expected a positive number or \"inf\", got {v!r}")
    return float(v)


def _list(path: Path, data: dict, key: str, n: int | None, check) -> list:
    v = data[key]
    if not isinstance(v, list):
        raise _err(path, key, f"expected a list (one item per request), got {type(v).__name__}")
    if n is not None and len(v) != n:
        raise _err(path, key, f"has {len(v)} items but '{DETAIL_KEYS[0]}' has {n}")
    for i, item in enumerate(v):
        problem = check(item)
        if problem:
            raise _err(path, key, f"item {i}: {problem}, got {item!r}")
    return v


def _count(x):
    return None if _is_num(x) and float(x) == int(x) and x >= 0 else "expected a non-negative integer"


def _seconds(x):
    return None if _is_num(x) and math.isfinite(x) and x >= 0 else "expected a non-negative number of seconds"


def _clock(x):
    return None if _is_num(x) and math.isfinite(x) else "expected a number"


def _gaps(x):
    if not isinstance(x, list):
        return "expected a list of inter-token gaps (seconds)"
    bad = next((g for g in x if _seconds(g)), None) if x else None
    return None if bad is None else f"gap {bad!r} is not a non-negative number"


def _text(x):
    return None if x is None or isinstance(x, str) else "expected a string or null"


def _file_metrics(path: Path, data: dict) -> dict:
    """The file's own aggregates in seconds: mean, p50 (median) and every pNN it has."""
    out: dict = {}
    for m in METRICS:
        d: dict = {}
        for key in [k for k in data if isinstance(k, str) and k.endswith(f"_{m}_ms")]:
            stat = key[: -len(f"_{m}_ms")]
            if stat == "median":
                stat = "p50"
            elif stat not in ("mean", "std") and not (stat.startswith("p") and _is_pct(stat[1:])):
                continue
            v = _number(path, data, key, required=False)
            if v is not None:
                d[stat] = v / 1e3
        out["e2e_s" if m == "e2el" else f"{m}_s"] = d
    return out


def _is_pct(s: str) -> bool:
    try:
        return 0 <= float(s) <= 100
    except ValueError:
        return False


def load_vllm_bench(path: str | Path) -> BenchResult:
    """Read and check one result file. Raises ``BenchFileError`` naming the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise BenchFileError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise BenchFileError(f"{path}: empty file (expected the JSON object that `vllm bench serve --save-result` writes)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BenchFileError(f"{path}: not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not isinstance(data, dict):
        raise BenchFileError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")

    meta = {k: data.get(k) for k in ("date", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "max_concurrency", "seed")}
    meta["request_rate"] = _rate(path, data, "request_rate", None)
    meta["burstiness"] = _rate(path, data, "burstiness", 1.0)
    meta["burstiness_in_file"] = "burstiness" in data
    for k in ("num_prompts", "max_concurrency"):
        meta[k] = _number(path, data, k, required=False, integer=True)
    if meta["seed"] is not None:
        try:
            meta["seed"] = int(meta["seed"])
        except (TypeError, ValueError):
            raise _err(path, "seed", f"expected an integer, got {meta['seed']!r}") from None
    if meta.get("model_id") is not None and not isinstance(meta["model_id"], str):
        raise _err(path, "model_id", f"expected a string, got {meta['model_id']!r}")

    res = BenchResult(
        path=path, meta=meta,
        duration_s=_number(path, data, "duration", required=True, positive=True),
        completed=_number(path, data, "completed", required=True, integer=True),
        failed=_number(path, data, "failed", required=False, integer=True) or 0,
        total_input_tokens=_number(path, data, "total_input_tokens", required=False, integer=True),
        total_output_tokens=_number(path, data, "total_output_tokens", required=False, integer=True),
        request_throughput=_number(path, data, "request_throughput", required=False),
        output_throughput=_number(path, data, "output_throughput", required=False),
        file_metrics=_file_metrics(path, data),
    )
    present = [k for k in DETAIL_KEYS if k in data]
    if present:
        missing = [k for k in DETAIL_KEYS if k not in data]
        if missing:
            raise BenchFileError(f"{path}: missing key '{missing[0]}' (per-request detail has {', '.join(present)}; "
                                 f"all of {', '.join(DETAIL_KEYS)} are needed)")
        _read_detail(res, data)
    elif res.completed == 0:
        raise _err(path, "completed", "is 0: no request succeeded, nothing to compare")
    return res


def _read_detail(res: BenchResult, data: dict) -> None:
    path = res.path
    if not isinstance(data["input_lens"], list):
        raise _err(path, "input_lens", f"expected a list (one item per request), got {type(data['input_lens']).__name__}")
    n = len(data["input_lens"])
    if n == 0:
        raise _err(path, "input_lens", "is empty: the file records no request")
    inp = _list(path, data, "input_lens", n, _count)
    out = _list(path, data, "output_lens", n, _count)
    ttft = _list(path, data, "ttfts", n, lambda x: None if x is None else _seconds(x))
    itls = _list(path, data, "itls", n, _gaps)
    checks = {"errors": _text, "latencies": lambda x: None if x is None else _seconds(x),
              "start_times": lambda x: None if x is None else _clock(x), "queue_times": lambda x: None if x is None else _clock(x),
              "generated_texts": _text}
    opt = {k: _list(path, data, k, n, checks[k]) for k in OPTIONAL_LISTS if data.get(k) is not None}

    errors = opt.get("errors", [None] * n)
    ok = np.array([not (errors[i] or "") and int(out[i]) > 0 and ttft[i] is not None for i in range(n)])
    ttft_a = np.array([np.nan if t is None else float(t) for t in ttft])
    sum_itl = np.array([float(sum(g)) for g in itls])
    if "latencies" in opt:
        e2e = np.array([np.nan if x is None else float(x) for x in opt["latencies"]])
    else:
        e2e = ttft_a + sum_itl
    out_a = np.array([int(x) for x in out], dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_a > 1, (e2e - ttft_a) / (out_a - 1), np.nan)
    start = np.array([np.nan if x is None else float(x) for x in opt["start_times"]]) if "start_times" in opt else np.full(n, np.nan)
    res.requests = pd.DataFrame({
        "index": np.arange(n), "ok": ok, "error": [e or "" for e in errors],
        "prompt_tokens": np.array([int(x) for x in inp], dtype=np.int64), "output_tokens": out_a,
        "ttft_s": np.where(ok, ttft_a, np.nan), "e2e_s": np.where(ok, e2e, np.nan), "tpot_s": np.where(ok, tpot, np.nan),
        "chunks": np.array([len(g) + 1 for g in itls], dtype=np.int64), "start_s": start,
    })
    res.itl_s = np.array([float(g) for i in np.flatnonzero(ok) for g in itls[i]], dtype=float)
    res.meta["has_start_times"] = bool("start_times" in opt and np.isfinite(start[ok]).all())
    res.meta["has_latencies"] = "latencies" in opt
    res.meta["failed_in_detail"] = int((~ok).sum())
    if not ok.any():
        raise _err(path, "errors" if "errors" in opt else "output_lens", f"all {n} requests failed: nothing to compare")
