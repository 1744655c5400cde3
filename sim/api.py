"""The public Python API: ``from sim import simulate``."""
from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from sim.config import Config, load_config
from sim.errors import ConfigError, ServesimWarning
from sim.workload import no_shared_prefix_warnings

# pandas, pyarrow and the metrics stage are imported when a run has ended, not before it starts
# (start-up time: docs/design-decisions.md, "Start-up")


@dataclass
class Results:
    """What one simulation returns: the summary as a dict, requests and steps as DataFrames."""

    summary: dict
    _requests: pd.DataFrame | None
    steps: pd.DataFrame
    config: Config
    itl: object = None
    """The ITL log (distinct gaps with their token counts); None for a streamed run."""
    out_dir: Path | None = None
    requests_path: Path | None = None
    """A streamed run's ``requests.parquet`` (``output.stream``), where its request rows are."""

    @property
    def requests(self) -> pd.DataFrame:
        """One row per arrived request, in arrival (admission) order.

        A streamed run (``output.stream``) does not hold its rows: each access reads all of
        ``requests_path`` into a new DataFrame, sorted into arrival order, and keeps nothing, so
        memory is used only while the caller holds the frame (bind it once: ``req = res.requests``).
        For millions of requests that frame takes gigabytes (about 200 bytes a row); read only the
        columns you need with ``pandas.read_parquet(res.requests_path, columns=[...])``, or by
        row group with pyarrow."""
        if self._requests is None and self.requests_path is not None:
            import pandas as pd

            return pd.read_parquet(self.requests_path).sort_values("request_id", kind="stable", ignore_index=True)
        return self._requests

    @requests.setter
    def requests(self, frame: pd.DataFrame) -> None:
        self._requests = frame

    @property
    def itl_s(self) -> np.ndarray | None:
        """Every inter-token gap of every request (seconds), pooled: the ITL distribution,
        expanded on demand (one value per output token: large for runs of millions)."""
        if self.itl is None:
            return None
        return np.repeat(np.asarray(self.itl.values, float), np.asarray(self.itl.counts, np.int64))


def _progress(cfg: Config, enabled: bool | None):
    if enabled is None:
        enabled = cfg.output.progress and sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    from sim.progress import bar_columns

    total = cfg.workload.num_requests if cfg.workload.trace is None else None
    return tqdm(total=total, unit="req", desc="simulating", leave=False, mininterval=0.5, ncols=bar_columns())


def simulate(config: str | Path | dict | Config | None = None, *, overrides: list[str] | None = None,
             out: str | Path | None = None, plots: bool | None = None, progress: bool | None = None) -> Results:
    """Run one simulation.

    ``config`` is a YAML path, a dict of sections, a Config, or None for the embedded default
    (Llama-3.1-8B on one H100-SXM, Poisson arrivals with conversation-like lengths).
    ``overrides`` are ``key.path=value`` strings. With ``out`` the results folder is written
    (summary.json, requests.parquet, steps.parquet, config.yaml, plots/).
    """
    from sim.shards import run_engine

    cfg = load_config(config, overrides)
    if cfg.workload.trace is not None and cfg.workload.trace.format == "auto":
        from sim.workload.traces import detect_format

        detect_format(cfg.workload.trace.path)  # a missing, empty, binary or unknown trace fails here, up front
    from sim.shards import shard_refusal

    why = shard_refusal(cfg)
    if why:
        raise ConfigError(why)
    stream_to = None
    if cfg.output.stream:  # checked before anything runs
        if out is None:
            raise ConfigError("output.stream: streaming writes requests.parquet as the run goes; give an output folder "
                              "(--out, or simulate(out=...))")
        Path(out).mkdir(parents=True, exist_ok=True)
        stream_to = Path(out) / "requests.parquet"
    t0 = time.perf_counter()
    bar = _progress(cfg, progress)
    try:
        sim_out = run_engine(cfg, bar, stream_to=stream_to)
    finally:
        if bar is not None:
            bar.close()
    sim_out.warnings += no_shared_prefix_warnings(cfg)
    for w in sim_out.warnings:  # each once per run
        warnings.warn(w, ServesimWarning, stacklevel=2)
    from sim.metrics.columns import ParquetColumns
    from sim.metrics.records import requests_frame, steps_frame
    from sim.metrics.summary import clean_json, summarize

    # a streamed run's summary reads requests.parquet a batch (and one latency column) at a time
    req = ParquetColumns(stream_to) if stream_to else requests_frame(sim_out)
    sim_out.requests.clear()  # the rows are in req now: their log goes before the summary's peak (the ITL sort)
    steps = steps_frame(sim_out)
    wall = time.perf_counter() - t0
    summary = summarize(sim_out, req, steps, wall)
    if stream_to:
        summary["sim"]["stream"] = stream_note(cfg)
    if sim_out.workers > 1:
        summary["sim"]["workers"] = (f"{sim_out.workers} processes, replica i in process i % {sim_out.workers} "
                                     "(replicas share no state: results identical to one process)")
    summary = clean_json(summary)
    res = Results(summary, None if stream_to else req, steps, cfg, None if stream_to else sim_out.itl,
                  requests_path=stream_to)
    if out is not None:
        write_results(res, Path(out), plots=cfg.output.plots if plots is None else plots)
    return res


def stream_note(cfg: Config) -> str:
    return (f"requests streamed to requests.parquet in chunks of {cfg.output.stream_chunk_rows:,} rows (rows in the "
            "order requests left, by arrival within a chunk); the summary reads the file back in batches, one latency "
            "column at a time: every figure as without streaming except the ITL quantiles, from a log-bucket sketch "
            "within 0.05% relative error; no figures")


def write_results(res: Results, out: Path, *, plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    streamed = res.config.output.stream
    plots = plots and not streamed
    # matplotlib is imported on another thread while the Parquet files are written (pyarrow
    # encodes them without holding the GIL): the import overlaps them on a second core
    ready = threading.Thread(target=_import_plots, daemon=True) if plots else None
    if ready is not None:
        ready.start()
    if not streamed:  # a streamed run wrote its rows as it went
        res.requests.to_parquet(out / "requests.parquet", index=False)
    if res.config.output.step_records:
        res.steps.to_parquet(out / "steps.parquet", index=False)
    auto = res.summary.get("autoscale")
    if auto:  # the fleet over time: replicas provisioned and serving, cumulative cost
        import pandas as pd

        pd.DataFrame(auto["series"]).to_parquet(out / "fleet.parquet", index=False)
    (out / "config.yaml").write_text(yaml.safe_dump(res.config.to_dict(), sort_keys=False))
    if plots:
        ready.join()
        from sim.metrics.plots import plot_run

        c = res.config
        fleet = (" + ".join(f"{p.replicas}x{(p.parallelism or c.parallelism).tp} {p.hardware} {p.role}" for p in c.cluster.pools)
                 if c.cluster.pools else f"{c.cluster.replicas}x{c.parallelism.tp} {c.hardware}")
        title = f"{c.model} on {fleet}, {c.scheduler.name}"
        plot_run(res.requests, res.steps, out / "plots", title=title, slo=res.config.slo,
                 band=res.summary.get("error_band"))
    (out / "summary.json").write_text(json.dumps(res.summary, indent=2, sort_keys=False) + "\n")
    _drop_stale(out, steps=res.config.output.step_records, fleet=bool(auto), plots=plots)
    res.out_dir = out


def _import_plots() -> None:
    """Import the figures' modules (``write_results``' thread; a failure here is raised again,
    with its message, where the figures are drawn)."""
    try:
        from sim.metrics.plots import _plt

        _plt()
    except Exception:  # noqa: BLE001 - reported by the drawing thread's own import
        pass


def _drop_stale(out: Path, *, steps: bool, fleet: bool, plots: bool) -> None:
    """Remove what a previous run left in ``out`` and this one did not write (its steps, fleet
    or figures), so that a results folder never mixes two runs."""
    import shutil

    for name, written in (("steps.parquet", steps), ("fleet.parquet", fleet)):
        if not written:
            (out / name).unlink(missing_ok=True)
    if not plots and (out / "plots").is_dir():
        shutil.rmtree(out / "plots")
