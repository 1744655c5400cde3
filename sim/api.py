"""The public Python API: ``from sim import simulate``."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sim.config import Config, load_config
from sim.metrics.records import requests_frame, steps_frame
from sim.metrics.summary import clean_json, summarize


@dataclass
class Results:
    """What one simulation returns: the summary as a dict, requests and steps as DataFrames."""

    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    config: Config
    itl_s: np.ndarray | None = None
    """Every inter-token gap of every request (seconds), pooled: the ITL distribution."""
    out_dir: Path | None = None


def _progress(cfg: Config, enabled: bool | None):
    if enabled is None:
        enabled = cfg.output.progress and sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    total = cfg.workload.num_requests if cfg.workload.trace is None else None
    return tqdm(total=total, unit="req", desc="simulating", leave=False, mininterval=0.5)


def simulate(config: str | Path | dict | Config | None = None, *, overrides: list[str] | None = None,
             out: str | Path | None = None, plots: bool | None = None, progress: bool | None = None) -> Results:
    """Run one simulation.

    ``config`` is a YAML path, a dict of sections, a Config, or None for the embedded default
    (Llama-3.1-8B on one H100-SXM, Poisson arrivals with conversation-like lengths).
    ``overrides`` are ``key.path=value`` strings. With ``out`` the results folder is written
    (summary.json, requests.parquet, steps.parquet, config.yaml, plots/).
    """
    from sim.engine import run_engine

    cfg = load_config(config, overrides)
    if cfg.workload.trace is not None and cfg.workload.trace.format == "auto":
        from sim.workload.traces import detect_format

        detect_format(cfg.workload.trace.path)  # a missing, empty, binary or unknown trace fails here, up front
    t0 = time.perf_counter()
    bar = _progress(cfg, progress)
    try:
        sim_out = run_engine(cfg, bar)
    finally:
        if bar is not None:
            bar.close()
    req = requests_frame(sim_out)
    steps = steps_frame(sim_out)
    wall = time.perf_counter() - t0
    summary = clean_json(summarize(sim_out, req, steps, wall))
    itl = np.repeat(np.asarray(sim_out.itl_values, float), np.asarray(sim_out.itl_counts, np.int64))
    res = Results(summary, req, steps, cfg, itl)
    if out is not None:
        write_results(res, Path(out), plots=cfg.output.plots if plots is None else plots)
    return res


def write_results(res: Results, out: Path, *, plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    res.requests.to_parquet(out / "requests.parquet", index=False)
    if res.config.output.step_records:
        res.steps.to_parquet(out / "steps.parquet", index=False)
    (out / "config.yaml").write_text(yaml.safe_dump(res.config.to_dict(), sort_keys=False))
    if plots:
        from sim.metrics.plots import plot_run

        title = f"{res.config.model} on {res.config.cluster.replicas}x{res.config.parallelism.tp} {res.config.hardware}, {res.config.scheduler.name}"
        plot_run(res.requests, res.steps, out / "plots", title=title, slo=res.config.slo)
    (out / "summary.json").write_text(json.dumps(res.summary, indent=2, sort_keys=False) + "\n")
    res.out_dir = out
