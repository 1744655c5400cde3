"""Running an engine to completion (``run_engine``), and replicas that share no state,
simulated in several processes (``engine.workers``).

With a router that reads no replica load and knows its turns in advance (``round_robin``), no
prefill/decode disaggregation and open-loop arrivals, what happens on one replica depends only on
the arrivals routed to it. Each process then runs the whole arrival stream through the router but
simulates only its share of the replicas (replica i goes to process i % workers); the outputs
are merged into exactly what one process gives: request rows by admission order, step rows
sorted by start time and replica as always, ITL gaps as a weighted sample whose summary does not
depend on their order, counters summed, the clock the latest of the processes' clocks.
"""
from __future__ import annotations

import multiprocessing as mp

from sim.cluster import ROUTERS
from sim.engine import Engine, SimOutput
from sim.errors import ConfigError
from sim.metrics.requestlog import RequestLog
from sim.metrics.steplog import ItlLog, StepLog


def shard_refusal(cfg) -> str | None:
    """Why ``cfg`` cannot be split over processes (None when it can)."""
    if cfg.engine.workers <= 1:
        return None
    route = ROUTERS[cfg.cluster.router]
    if route.reads_load or route.turns is None:
        return (f"engine.workers: router {cfg.cluster.router!r} reads the replicas' state, so they cannot run apart; "
                "use cluster.router=round_robin or engine.workers=1")
    if cfg.cluster.prefill_replicas:
        return "engine.workers: disaggregated replicas hand requests to each other; use engine.workers=1"
    if cfg.workload.closed_loop is not None:
        return "engine.workers: closed-loop clients wait on every replica; use engine.workers=1"
    if cfg.faults.events or cfg.cluster.autoscale.enabled:
        return "engine.workers: faults and autoscaling move requests between replicas; use engine.workers=1"
    if cfg.output.stream:
        return "engine.workers cannot be combined with output.stream yet; use one of them"
    return None


def run_engine(cfg, progress=None, stream_to=None) -> SimOutput:
    """Build the pipeline for ``cfg`` and run it to completion (``stream_to``: the Parquet file
    request rows are streamed to, with ``output.stream``). With ``engine.workers`` > 1 the
    replicas are shared out over processes (``run_sharded``)."""
    workers = min(cfg.engine.workers, cfg.cluster.replicas)
    if workers > 1:
        return run_sharded(cfg, workers, progress)
    return Engine(cfg, progress, stream_to=stream_to).run()


def run_shard(cfg, shard: tuple[int, int]) -> SimOutput:
    """One process's part of a sharded run: the replicas i with i % n == w for ``shard`` (w, n)
    (no progress bar, no streaming)."""
    out = Engine(cfg, shard=shard).run()
    out.itl.sort()  # here, in parallel: the parent's summary then merges the processes' sorted gaps
    return out


def _run(args):
    cfg, shard = args
    return run_shard(cfg, shard)


def _quiet_worker() -> None:
    """Ctrl-C is the parent's to handle and SIGTERM (the pool's terminate) ends a worker
    silently: a forked worker would otherwise inherit the command line's handlers and print a
    traceback each."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_sharded(cfg, workers: int, progress=None):
    """Run ``cfg`` over ``workers`` processes (this one and ``workers - 1`` workers) and merge
    their outputs."""
    why = shard_refusal(cfg)
    if why:
        raise ConfigError(why)
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers - 1, initializer=_quiet_worker) as pool:  # this process runs shard 0 meanwhile:
        others = pool.map_async(_run, [(cfg, (w, workers)) for w in range(1, workers)])  # its output is not
        parts = [run_shard(cfg, (0, workers))] + others.get()  # pickled and sent back, one process fewer to start
    if progress is not None:
        progress.update(sum(len(p.requests) for p in parts))
    return merge(parts, workers)


def merge(parts: list, workers: int):
    first = parts[0]
    requests, steps, itl = RequestLog(), StepLog(keep_rows=first.steps.keep_rows), ItlLog()
    for p in parts:
        requests.merge(p.requests)
        steps.merge(p.steps)
        itl.merge(p.itl)
    out = first
    out.requests, out.steps, out.itl = requests, steps, itl
    out.simulated_s = max(p.simulated_s for p in parts)
    out.out_of_range = sum(p.out_of_range for p in parts)
    out.workers = workers
    if out.kv_tiers is not None:  # a tiered cache's counts: every process's
        out.kv_tiers = {k: v if k.endswith(("_blocks", "_gib")) else sum(p.kv_tiers[k] for p in parts)
                        for k, v in out.kv_tiers.items()}
    if out.cost_info and "extrapolated" in out.cost_info:  # every process's, not the first one's
        out.cost_info = {**out.cost_info,
                         "extrapolated": merge_extrapolated([(p.cost_info or {}).get("extrapolated") or [] for p in parts])}
    return out


def merge_extrapolated(parts: list[list[dict]]) -> list[dict]:
    """The per-operator extrapolation entries of several processes as one list: queries and GPU
    seconds summed, query ranges widened, in the order the operators first appear."""
    out: dict[str, dict] = {}
    for entries in parts:
        for e in entries:
            m = out.get(e["operator"])
            if m is None:
                out[e["operator"]] = {**e, "query_range": [list(r) for r in e["query_range"]]}
                continue
            m["queries"] += e["queries"]
            m["gpu_s"] = (round(m["gpu_s"] * 1e9) + round(e["gpu_s"] * 1e9)) / 1e9  # (whole ns, as each process counts them)
            m["query_range"] = [[min(a[0], b[0]), max(a[1], b[1])] for a, b in zip(m["query_range"], e["query_range"])]
    return list(out.values())
