"""The summary of a streamed run (``output.stream``) at ten million requests: wall time and peak
resident memory of the summary step alone, read back from ``requests.parquet`` batch by batch
(``sim.metrics.columns.ParquetColumns``, the streamed path now) and, for comparison, the whole
table read into one DataFrame first (what the streamed path did before: 13 columns of every row in
file order, strings as dictionaries) and summarised in memory. Prints its figures; asserts nothing.

    python experiments/bench/bench_stream_summary.py                  # 10,000,000 rows
    python experiments/bench/bench_stream_summary.py --rows 1000000   # a quicker look

The file is synthetic, written with the engine's own writer (``ParquetSink``, the real schema)
in chunks of 200,000 rows as a streamed run writes it: rows in the order requests leave
(arrival + end-to-end latency), in admission order within a chunk. Arrivals are Poisson at
3,000/s; prompt and output lengths lognormal (median 1,000 and 200 tokens); 96% finished, 3%
rejected (two reasons), 1% lost to a fault; three tenants and two SLO classes; a prefix-cache hit
on a quarter of the prompts. The run object the summary also reads (config, step totals, ITL) is
a tiny real run's. Each summary runs in a fresh process; its peak RSS includes Python, the
imports and that tiny run (printed as the baseline).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CHUNK = 200_000
CONFIG = {"cost": {"model": "roofline"}, "workload": {"rate": 5.0, "num_requests": 20},
          "slo": {"classes": {"interactive": {"ttft_s": 0.5, "tpot_s": 0.05}, "batch": {"ttft_s": 30.0, "tpot_s": 0.5}}},
          "output": {"plots": False, "progress": False, "step_records": False}}


def write_requests(path: Path, rows: int, seed: int = 0) -> float:
    """A synthetic ``requests.parquet`` of ``rows`` requests; returns the last finish time."""
    from sim.metrics.records import ParquetSink
    from sim.metrics.requestlog import STATUS_CODE
    from sim.request import Status

    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 3000.0, rows))
    prompt = np.clip(rng.lognormal(np.log(1000), 0.9, rows), 1, 32_000).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(200), 1.0, rows), 1, 4_000).astype(np.int64)
    queue = rng.exponential(0.05, rows)
    prefill = prompt * 2e-5 + 0.005
    tpot = rng.gamma(4.0, 0.006, rows)
    u = rng.random(rows)
    status = np.full(rows, STATUS_CODE[Status.FINISHED], np.int32)
    status[u < 0.04] = STATUS_CODE[Status.LOST]
    status[u < 0.03] = STATUS_CODE[Status.REJECTED]
    done, rejected, lost = status == STATUS_CODE[Status.FINISHED], u < 0.03, (u >= 0.03) & (u < 0.04)
    gen = np.where(done, output, np.where(lost, output // 3, 0))
    sched = np.where(rejected, np.nan, arrival + queue)
    first = np.where(gen > 0, sched + prefill, np.nan)
    finish = np.where(gen > 0, first + np.maximum(gen - 1, 0) * tpot, np.nan)
    leave = np.where(np.isnan(finish), arrival, finish)
    order = np.argsort(leave, kind="stable")  # the order requests leave the simulation
    tenant_names = np.array(["chat", "api", "batch"], dtype=object)
    tenant = rng.choice(3, rows, p=[0.5, 0.3, 0.2])
    slo = np.array(["interactive", "interactive", "batch"], dtype=object)[tenant]
    reason = np.array([None, "exceeds_kv_capacity: prompt needs more KV blocks than the replica has",
                       "exceeds_context: prompt + output exceed the context", "replica_failed: replica 3 failed"],
                      dtype=object)
    why = np.where(rejected, np.where(u < 0.02, 1, 2), np.where(lost, 3, 0))
    cached = np.where(rng.random(rows) < 0.25, (prompt // 2 // 16) * 16, 0)
    sink = ParquetSink(path)
    for start in range(0, rows, CHUNK):
        ids = np.sort(order[start:start + CHUNK])
        sink({"request_id": ids, "replica": (ids % 8).astype(np.int32), "status": status[ids],
              "arrival_s": arrival[ids], "first_scheduled_s": sched[ids], "first_token_s": first[ids],
              "finish_s": finish[ids], "prompt_tokens": prompt[ids], "output_tokens": output[ids],
              "generated_tokens": gen[ids], "max_itl_s": np.where(gen[ids] > 1, tpot[ids] * 3, 0.0),
              "preemptions": (rng.random(ids.size) < 0.01).astype(np.int32), "cached_tokens": cached[ids],
              "priority": (tenant[ids] == 2).astype(np.int32), "slo_class": slo[tenant[ids]].tolist(),
              "tenant": tenant_names[tenant[ids]].tolist(), "session_id": [None] * ids.size,
              "reject_reason": reason[why[ids]].tolist()})
    sink.close()
    return float(np.nanmax(finish))


CHILD = r"""
import json, resource, sys, time
import pyarrow.parquet as pq
from sim.config import load_config
from sim.shards import run_engine
from sim.metrics.columns import ParquetColumns
from sim.metrics.summary import clean_json, summarize
mode, path, end, cfg = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
out = run_engine(load_config(cfg))  # a tiny real run: config, step totals, ITL
out.simulated_s = end
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
if mode == "streamed":
    req = ParquetColumns(path)
else:  # the old streamed path: the summary's columns of every row in one frame, then summarised
    cols = ["status", "arrival_s", "prompt_tokens", "generated_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s",
            "preemptions", "cached_tokens", "slo_class", "tenant", "reject_reason"]
    req = pq.read_table(path, columns=cols, read_dictionary=["status", "slo_class", "tenant", "reject_reason"]).to_pandas()
s = clean_json(summarize(out, req, None, 0.0))
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "baseline_rss_mib": base, "summary": s}))
"""


def child(*args: str) -> str:
    """The last line a fresh Python prints running ``args``. (The parent stays small: on Linux a
    child's peak RSS starts at its parent's, across fork and exec.)"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip().splitlines()[-1]


def summary_step(mode: str, path: Path, end: float) -> dict:
    return json.loads(child("-c", CHILD, mode, str(path), repr(end), json.dumps(CONFIG)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)  # the writer's own process
    a = ap.parse_args()
    if a.write:
        print(repr(write_requests(Path(a.write), a.rows)))
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "requests.parquet"
        t = time.perf_counter()
        end = float(child(__file__, "--rows", str(a.rows), "--write", str(path)))
        print(f"wrote {a.rows:,} rows ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t:.0f} s")
        res = {mode: summary_step(mode, path, end) for mode in ("streamed", "whole-table")}
    for mode, r in res.items():
        print(f"{mode:12s} summary: {r['wall_s']:6.1f} s, peak RSS {r['peak_rss_mib']:,.0f} MiB "
              f"(baseline before the summary {r['baseline_rss_mib']:,.0f} MiB)")
    a_, b_ = res["streamed"]["summary"], res["whole-table"]["summary"]
    for s in (a_, b_):
        s["sim"].pop("wall_s")
    # the whole-table frame is in file order, not admission order: its means may differ in the last bits
    diff = {k: (a_[k], b_[k]) for k in a_ if a_[k] != b_[k]}
    print("summaries identical" if not diff else f"summaries differ in: {json.dumps(diff)}")
    print(json.dumps({k: a_[k] for k in ("requests", "ttft_s", "e2e_s")}, indent=1))


if __name__ == "__main__":
    main()
