"""Rebuild the workload of a vLLM benchmark run as a generic trace CSV the simulator replays.

Lengths: the per-request ``input_lens`` / ``output_lens`` of the successful requests (a failed
request is excluded: its output length is unknown). A summary-only file has no lengths: each of
the ``completed`` requests gets the mean lengths (``total_input_tokens / completed``, rounded),
exact for fixed-length random datasets only.

Arrivals, first match wins:

1. ``arrivals`` given (the user's own trace, any format the trace reader knows, sorted): its
   arrival times, row i for request i (same count as requests sent). Its lengths are used when
   the result has no per-request detail.
2. ``start_times`` in the result (vLLM 0.10+): when each request was actually sent, re-zeroed.
   With ``--max-concurrency`` these are the times the server saw, after the client's queue.
3. ``request_rate`` ``inf``: every request at t = 0.
4. Otherwise vLLM's process: inter-arrival gaps drawn from a gamma distribution with shape =
   ``burstiness`` and mean 1 / ``request_rate`` (CV = 1/sqrt(burstiness); 1 is Poisson), summed
   and scaled so that request N arrives at N / rate (vLLM >= 0.10 does this), re-zeroed at the
   first request. vLLM's own draws cannot be replayed (its global numpy generator is consumed by
   dataset sampling first), so the seed is the result's ``seed`` metadata if present, else the
   config's ``seed``: the same process, not the same sample.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.compare.vllm_bench import BenchResult
from sim.errors import ServesimError


@dataclass
class Rebuilt:
    frame: pd.DataFrame        # arrival_s, prompt_tokens, output_tokens, request_index (sorted by arrival)
    arrivals: str              # how the arrival times were obtained
    lengths: str               # how the lengths were obtained
    notes: list[str]


def gamma_arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """vLLM's arrival process for ``n`` requests: times (s) from the first request (which is 0)."""
    if n <= 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if t[-1] > 0:
        t *= (n / rate) / t[-1]
    return t - t[0]


def _trace_arrivals(path: str) -> pd.DataFrame:
    from sim.workload.config import TraceConfig, WorkloadConfig
    from sim.workload.traces import read_trace_requests

    try:
        wc = WorkloadConfig(trace=TraceConfig(path=str(path), reorder_window_s=0.0))
    except ValueError as e:
        raise ServesimError(f"--arrivals {path}: {e}") from None
    rows = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in read_trace_requests(wc, {})]
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"])


def rebuild(res: BenchResult, *, seed: int, arrivals: str | None = None) -> Rebuilt:
    notes: list[str] = []
    m = res.meta
    n_sent = len(res.requests) if res.detailed else res.completed
    if arrivals is not None:
        tr = _trace_arrivals(arrivals)
        if res.detailed and len(tr) != n_sent:
            raise ServesimError(f"--arrivals {arrivals} has {len(tr)} requests but {res.path} records {n_sent}; "
                                "they must be the same requests in the same order")
        t = tr["arrival_s"].to_numpy(float)
        how = f"trace {Path(arrivals).name} (row i = request i)"
        if not res.detailed:
            n_sent = len(tr)
    elif res.detailed and m.get("has_start_times"):
        st = res.requests["start_s"].to_numpy(float)
        t = st - np.nanmin(st)
        how = "start_times recorded in the result (when each request was sent)"
    else:
        rate = m.get("request_rate")
        if rate is None:
            raise ServesimError(f"{res.path}: missing key 'request_rate' (needed to rebuild the arrivals; "
                                "or pass the arrival trace with --arrivals)")
        b = m.get("burstiness", 1.0)
        if not m.get("burstiness_in_file"):
            notes.append("no 'burstiness' in the file (vLLM before 0.6.4): Poisson arrivals assumed")
        if m.get("max_concurrency"):
            notes.append(f"the client capped concurrency at {m['max_concurrency']} and the file has no start_times: "
                         "servesim has no client-side cap, so arrivals follow the nominal process; queueing differs")
        t = gamma_arrivals(n_sent, rate, b, np.random.default_rng(seed))
        if math.isinf(rate):
            how = "request_rate inf: all requests at t = 0"
        else:
            how = f"gamma process, rate {rate:g}/s, burstiness {b:g} (CV {1 / math.sqrt(b):.3g}), seed {seed}"

    if res.detailed:
        ok = res.requests["ok"].to_numpy()
        frame = pd.DataFrame({"arrival_s": t[ok],
                              "prompt_tokens": res.requests["prompt_tokens"].to_numpy()[ok],
                              "output_tokens": res.requests["output_tokens"].to_numpy()[ok],
                              "request_index": res.requests["index"].to_numpy()[ok]})
        lengths = "per-request input_lens / output_lens of the successful requests"
        bad = int((frame["prompt_tokens"] < 1).sum())
        if bad:
            raise ServesimError(f"{res.path}: key 'input_lens': {bad} successful requests have a prompt of 0 tokens")
    elif arrivals is not None:
        frame = tr.assign(request_index=np.arange(len(tr)))
        lengths = f"lengths from the arrival trace {Path(arrivals).name} (the result has no per-request detail)"
    else:
        n = res.completed
        if res.total_input_tokens is None or res.total_output_tokens is None:
            key = "total_input_tokens" if res.total_input_tokens is None else "total_output_tokens"
            raise ServesimError(f"{res.path}: missing key '{key}' (a summary-only file needs it to rebuild the lengths)")
        p = max(1, round(res.total_input_tokens / n))
        o = max(1, round(res.total_output_tokens / n))
        frame = pd.DataFrame({"arrival_s": t[:n], "prompt_tokens": np.full(n, p), "output_tokens": np.full(n, o),
                              "request_index": np.arange(n)})
        lengths = f"summary-only file: {n} requests of the mean lengths, {p} prompt and {o} output tokens"
        notes.append("summary-only result (no --save-detailed): lengths are the means, so only the aggregate "
                     "metrics are compared; rerun vllm bench serve with --save-detailed for per-request detail")
    frame = frame.sort_values(["arrival_s", "request_index"], kind="stable").reset_index(drop=True)
    return Rebuilt(frame, how, lengths, notes)


def write_workload(rb: Rebuilt, path: Path) -> Path:
    """The generic trace CSV (``arrival_s,prompt_tokens,output_tokens`` + ``request_index``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = rb.frame
    with open(path, "w", newline="") as fh:
        fh.write("arrival_s,prompt_tokens,output_tokens,request_index\n")
        for a, p, o, i in zip(f["arrival_s"], f["prompt_tokens"], f["output_tokens"], f["request_index"]):
            fh.write(f"{float(a)!r},{int(p)},{int(o)},{int(i)}\n")
    return path
