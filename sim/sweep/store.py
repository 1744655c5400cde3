"""The run store: one folder per finished run, keyed by a hash of its fully resolved config.

    DIR/runs/<key>/summary.json   the run's summary (present only once the run finished)
    DIR/runs/<key>/config.yaml    the resolved config (what `servesim run` would take)
    DIR/runs/<key>/latency.parquet  per finished request: ttft_s, tpot_s, e2e_s (for CDFs)
    DIR/runs/<key>/error.txt      instead of summary.json when the run raised

The key is the first 16 hex digits of SHA-256 over the resolved config (``Config.to_dict()``
with figures and progress bars off) dumped as canonical JSON (sorted keys, no spaces). Every
file is written to a temporary name and renamed, and ``summary.json`` is written last, so a
killed sweep leaves either a finished run or nothing that counts as one.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd
import yaml

from sim.config import Config, load_config

QUIET = {"plots": False, "progress": False}


def resolve(cfg: dict | Config) -> dict:
    """The fully resolved config as a plain dict, with figures and progress bars off."""
    data = cfg.to_dict() if isinstance(cfg, Config) else load_config(cfg).to_dict()
    data["output"] = dict(QUIET)
    return data


def canonical_json(data: dict) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def config_key(resolved: dict) -> str:
    """The store key of a resolved config dict."""
    return hashlib.sha256(canonical_json(resolved).encode()).hexdigest()[:16]


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# What a stored summary must hold to count as a finished run (docs/architecture.md section 4).
REQUIRED = {
    "requests": ("arrived", "completed", "rejected"),
    "ttft_s": ("p50", "p99"), "tpot_s": ("p50", "p99"), "e2e_s": ("p50", "p99"),
    "throughput": ("requests_per_s", "output_tokens_per_s"),
    "goodput": ("requests_per_s", "slo_attainment"),
    "cost": ("gpu_hours", "usd"),
    "sim": ("steps", "simulated_s", "seed"),
}


def complete_summary(summary) -> bool:
    """Whether a loaded summary.json has every section and key a finished run writes."""
    if not isinstance(summary, dict):
        return False
    for sec, keys in REQUIRED.items():
        node = summary.get(sec)
        if not isinstance(node, dict) or any(k not in node for k in keys):
            return False
    r = summary["requests"]
    return all(isinstance(r[k], int) and r[k] >= 0 for k in ("arrived", "completed", "rejected"))


class RunStore:
    """Finished runs under ``root/runs``; ``get`` returns a stored result or None."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs = self.root / "runs"

    def path(self, key: str) -> Path:
        return self.runs / key

    def get(self, key: str) -> dict | None:
        """A finished run as ``{"key", "status": "ok", "summary"}``; None when absent, failed
        or incomplete (a corrupt, empty or partial ``summary.json`` does not count as done):
        such a run is redone on the next pass."""
        p = self.path(key) / "summary.json"
        if not p.is_file():
            return None
        try:
            summary = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        if not complete_summary(summary):
            return None
        return {"key": key, "status": "ok", "summary": summary, "error": None}

    def put(self, key: str, config: dict, result: dict) -> None:
        d = self.path(key)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "config.yaml", yaml.safe_dump(config, sort_keys=False).encode())
        if result["status"] == "ok":
            lat = result.get("latency")
            if lat is not None:
                tmp = d / f".latency.parquet.tmp{os.getpid()}"
                pd.DataFrame(lat).to_parquet(tmp, index=False)
                os.replace(tmp, d / "latency.parquet")
            (d / "error.txt").unlink(missing_ok=True)
            _atomic_write(d / "summary.json", (json.dumps(result["summary"], indent=1) + "\n").encode())
        else:
            _atomic_write(d / "error.txt", (result["error"] or "unknown error").encode())

    def latency(self, key: str) -> pd.DataFrame | None:
        p = self.path(key) / "latency.parquet"
        return pd.read_parquet(p) if p.is_file() else None


# Sections of summary.json flattened into table columns ("ttft_s.p99", "cost.usd", ...).
TABLE_SECTIONS = ("requests", "ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "throughput", "goodput", "cost", "sim",
                  "verdict")


def flatten_summary(summary: dict | None) -> dict:
    """Scalar leaves of the summary's metric sections as dotted column names."""
    out: dict = {}
    if not summary:
        return out

    def walk(prefix: str, node) -> None:
        for k, v in node.items():
            name = f"{prefix}.{k}"
            if isinstance(v, dict):
                if k in ("rejected_by_reason", "steps_by_cost_source"):
                    continue
                walk(name, v)
            elif isinstance(v, (int, float, str, bool)) or v is None:
                out[name] = v

    for sec in TABLE_SECTIONS:
        if isinstance(summary.get(sec), dict):
            walk(sec, summary[sec])
    return out
