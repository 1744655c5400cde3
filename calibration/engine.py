"""Fit the host overhead of the user's own engine from its measurements (docs/calibration.md).

    servesim calibrate-engine --fitted F/cpu/llama-tiny --static times.csv [--holdout 2:128,8:32]
    servesim calibrate-engine --fitted F/h200-sxm/llama-3.1-8b --vllm-bench run1.json run2.json \\
        --set hardware=h200-sxm --set model=llama-3.1-8b

A kernel profile prices the operators; an engine also spends time per step that is in no kernel
profile (its scheduler, input preparation, the Python around the forward pass, a generate loop,
masks or caches rebuilt every step). This command fits that time from the engine being predicted,
in the form the cost model adds to every step (``sim.cost.roofline``):

    host(step) = cpu_step_s + cpu_per_seq_s * n + cpu_per_token_s * T + cpu_per_seq_ctx_s * kv

(``n``: sequences in the step; ``T``: its tokens; ``kv``: its sequences' context tokens after
the step, summed), by
non-negative least squares on relative error over the training rows, and reports the error on
the held-out rows. Measurements, one of:

- ``--static CSV``: static batches, one row per shape, columns ``batch, prompt_tokens,
  output_tokens, first_token_s, per_token_s``: ``batch`` identical-length prompts of
  ``prompt_tokens`` run together for ``output_tokens`` tokens each; ``first_token_s`` is the time
  to the first token (one prefill step), ``per_token_s`` the mean time per later token (the
  decode steps: (total - first) / (output_tokens - 1)). The predicted step times come from the
  fitted tables directly: the prefill step of ``batch`` chunks, and every decode step.
- ``--vllm-bench JSON...``: ``vllm bench serve --save-result`` files, one row each, scored on mean
  TTFT and mean TPOT; the prediction is a simulation of the file's workload (``servesim compare``'s
  rebuild) with the fitted tables, and the terms' effect on each metric is measured by simulating
  with each term alone (the metrics are close to linear in them below saturation); the fitted
  terms are then simulated as they are for the reported errors.

Writes ``engine_overhead.json`` (the terms, their provenance: input files with SHA-256, the rows
fitted and held out, errors before and after) into the fitted folder (or ``--out``), where the
profiled cost model reads it ahead of ``servesim validate``'s replay probe (``overhead.json``);
``--set cost.roofline.cpu_step_s=...`` still wins, with a note. Needs numpy and the simulator; no
torch.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import math
import shutil
import sys
import tempfile
from itertools import combinations
from pathlib import Path

import numpy as np

from sim.cost.profiled import CPU_KEYS, ENGINE_OVERHEAD_FILE, TABLES_FILE
from sim.cost.roofline import RooflineParams

NO_OVERHEAD = RooflineParams(cpu_step_s=0.0, cpu_per_seq_s=0.0, cpu_per_token_s=0.0, cpu_per_seq_ctx_s=0.0)
"""The kernels alone: what the fitted terms are added to."""

STATIC_COLUMNS = ("batch", "prompt_tokens", "output_tokens", "first_token_s", "per_token_s")


class EngineCalibrationError(ValueError):
    """Bad input: a missing or malformed measurement file, too few rows to fit."""


# ---------------------------------------------------------------------- measurements

def read_static(path: str | Path) -> list[dict]:
    """Rows of a static-batch CSV (``STATIC_COLUMNS``; other columns are kept and ignored), each
    with its 1-based physical ``line``. Errors name the file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise EngineCalibrationError(f"{path}: no such file")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in STATIC_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise EngineCalibrationError(f"{path}: line 1: missing column(s) {', '.join(missing)} "
                                         f"(expected {', '.join(STATIC_COLUMNS)})")
        rows = []
        for r in reader:
            line = reader.line_num
            row = {"line": line}
            for c in STATIC_COLUMNS:
                v = (r.get(c) or "").strip()
                try:
                    x = int(v) if c in ("batch", "prompt_tokens", "output_tokens") else float(v)
                except ValueError:
                    raise EngineCalibrationError(f"{path}: line {line}: column {c}: {v!r} is not a number") from None
                if not x > 0 or not math.isfinite(x):
                    raise EngineCalibrationError(f"{path}: line {line}: column {c}: must be positive, got {v}")
                row[c] = x
            if row["output_tokens"] < 2:
                raise EngineCalibrationError(f"{path}: line {line}: column output_tokens: needs at least 2 tokens "
                                             "for a per-token time")
            rows.append(row)
    if not rows:
        raise EngineCalibrationError(f"{path}: no rows")
    return rows


def static_features(cm, row: dict) -> dict:
    """Kernel-only predictions and overhead features of one static-batch row: for the first
    token (one prefill step) and the mean decode step, ``kernels`` (seconds, the cost model with
    no host overhead) and ``x`` = (steps, sequences, tokens,
    sequence-context tokens) per step, averaged over the decode steps."""
    from sim.types import BatchShape

    b, p, n = row["batch"], row["prompt_tokens"], row["output_tokens"]
    first = cm.step_time(BatchShape((p,) * b, (0,) * b))
    dec = [cm.step_time(BatchShape((1,) * b, (p + k - 1,) * b)).total for k in range(1, n)]
    return {"first_token_s": {"kernels": first.total, "x": (1.0, b, b * p, b * p)},
            "per_token_s": {"kernels": float(np.mean(dec)), "x": (1.0, b, b, b * (p + n / 2.0))}}


def shape_label(row: dict) -> str:
    return f"{row['batch']}:{row['prompt_tokens']}"


def alternate(rows: list[dict]) -> list[bool]:
    """Held out or not, per row: rows grouped by batch size (ascending), each group by prompt
    length; the k-th row of the g-th group is held out when g + k is odd. On a full grid of shapes
    that is a checkerboard, so fitted and held-out shapes interleave in both directions."""
    bs = sorted({r["batch"] for r in rows})
    out = []
    for r in rows:
        same = sorted({x["prompt_tokens"] for x in rows if x["batch"] == r["batch"]})
        out.append((bs.index(r["batch"]) + same.index(r["prompt_tokens"])) % 2 == 1)
    return out


def parse_holdout(spec: str, rows: list[dict]) -> list[bool]:
    """``B:P,B:P`` (batch:prompt_tokens) -> held out or not per row; an unknown shape is an error."""
    want = {s.strip() for s in spec.split(",") if s.strip()}
    have = {shape_label(r) for r in rows}
    unknown = sorted(want - have)
    if unknown:
        raise EngineCalibrationError(f"--holdout: no row of shape {', '.join(unknown)} (batch:prompt_tokens; "
                                     f"rows: {', '.join(sorted(have))})")
    return [shape_label(r) in want for r in rows]


# ---------------------------------------------------------------------- the fit

def nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best unconstrained solution over
    every subset of free columns that is non-negative (exact for few columns)."""
    k = A.shape[1]
    best, best_err = np.zeros(k), float(np.sum(y ** 2))
    for r in range(1, k + 1):
        for cols in combinations(range(k), r):
            sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(k)
            x[list(cols)] = sol
            err = float(np.sum((A @ x - y) ** 2))
            if err < best_err - 1e-18:
                best, best_err = x, err
    return best


def fit_terms(equations: list[dict]) -> np.ndarray:
    """(cpu_step_s, cpu_per_seq_s, cpu_per_token_s, cpu_per_seq_ctx_s) minimising the squared relative error of
    ``kernels + x . theta`` against ``measured`` over ``equations``; columns are scaled to unit
    size for the solve."""
    A = np.array([[xi / e["measured"] for xi in e["x"]] for e in equations])
    y = np.array([(e["measured"] - e["kernels"]) / e["measured"] for e in equations])
    scale = np.where(np.abs(A).max(axis=0) > 0, np.abs(A).max(axis=0), 1.0)
    return nnls(A / scale, y) / scale


def _ape_stats(errs: list[float]) -> dict:
    if not errs:
        return {"n": 0, "median_ape": None, "max_ape": None}
    a = np.abs(np.asarray(errs))
    return {"n": int(a.size), "median_ape": float(np.median(a)), "max_ape": float(a.max())}


def errors(equations: list[dict], theta) -> dict:
    """Per metric: median and largest absolute relative error of the prediction with ``theta``."""
    out = {}
    for metric in sorted({e["metric"] for e in equations}):
        errs = [(e["kernels"] + float(np.dot(e["x"], theta)) - e["measured"]) / e["measured"]
                for e in equations if e["metric"] == metric]
        out[metric] = _ape_stats(errs)
    return out


# ---------------------------------------------------------------------- driver

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fitted_folder(arg: str) -> Path:
    f = Path(arg)
    if not (f / TABLES_FILE).is_file():
        raise EngineCalibrationError(f"--fitted {f}: no fitted tables ({TABLES_FILE}); run servesim fit first")
    return f


def _kernels_only_copy(folder: Path, tmp: Path) -> Path:
    """A copy of the fitted folder without any overhead file: what the kernels alone predict."""
    dst = tmp / "fitted"
    dst.mkdir(parents=True, exist_ok=True)
    for name in (TABLES_FILE, "roofline_params.json", "meta.json"):
        if (folder / name).is_file():
            shutil.copy2(folder / name, dst / name)
    return dst


def _cards(folder: Path, model: str | None, hardware: str | None):
    from calibration.fit import FitError, _resolve_cards

    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() else {}
    try:
        m, h, _, _ = _resolve_cards(meta, folder, model, hardware)
    except FitError as e:
        raise EngineCalibrationError(str(e)) from None
    return m, h, meta


def _dtype(meta: dict, dtype: str | None) -> str:
    have = meta.get("dtypes") or []
    if dtype is None:
        if len(have) != 1:
            raise EngineCalibrationError(f"--dtype: the fitted tables hold {', '.join(have) or 'no'} dtypes; "
                                         "say which the engine ran")
        return have[0]
    if have and dtype not in have:
        raise EngineCalibrationError(f"--dtype {dtype}: the fitted tables hold {', '.join(have)} only")
    return dtype


def static_equations(args, folder: Path, tmp: Path) -> tuple[list[dict], list[dict], dict]:
    """(equations, rows, provenance) of a static-batch CSV: two equations per row."""
    from sim.cost.profiled import load_profiled_cost_model

    rows = read_static(args.static)
    model, hw, meta = _cards(folder, args.model, args.hardware)
    dtype = _dtype(meta, args.dtype)
    act = "fp32" if dtype == "fp32" else "bf16"
    cm = load_profiled_cost_model(model, hw, profiles_dir=str(_kernels_only_copy(folder, tmp)), dtype=dtype,
                                  act_dtype=act, sampling=args.sampling, params=NO_OVERHEAD, user_params=CPU_KEYS)
    if cm is None:
        raise EngineCalibrationError(f"{folder}: no {dtype} tables for ({hw.id}, {model.id})")
    held = parse_holdout(args.holdout, rows) if args.holdout else alternate(rows)
    if len(rows) - sum(held) < 2:
        raise EngineCalibrationError(f"{args.static}: {len(rows) - sum(held)} training row(s); give at least 2 "
                                     "shapes to fit on (and others to hold out)")
    eqs = []
    for r, h in zip(rows, held):
        r["held_out"] = h
        for metric, f in static_features(cm, r).items():
            eqs.append({"row": shape_label(r), "line": r["line"], "metric": metric, "measured": r[metric],
                        "kernels": f["kernels"], "x": f["x"], "held_out": h})
    cm_desc = {"model": model.id, "hardware": hw.id, "dtype": dtype, "sampling": args.sampling,
               "decode_attention": getattr(cm, "decode_attention", None),
               "out_of_range_queries": cm.out_of_range_total()}
    return eqs, rows, {"kind": "static-batch table", "files": [{"file": Path(args.static).name,
                                                                "sha256": _sha256(Path(args.static))}],
                       "cost_model": cm_desc}


UNIT = (1e-3, 1e-4, 1e-5, 1e-7)
"""The size of each term (per step, per sequence, per token, per sequence-context token, seconds) at which
its effect on a benchmark's metrics is measured by simulation."""


def bench_equations(args, folder: Path, tmp: Path) -> tuple[list[dict], list[dict], dict, object]:
    """(equations, rows, provenance, simulate) of ``vllm bench serve`` files: two equations
    (mean TTFT, mean TPOT) per file, with the terms' effects measured by simulation."""
    from sim.compare import _sim_config, _simulate
    from sim.compare.metrics import real_metrics, sim_metrics
    from sim.compare.vllm_bench import load_vllm_bench
    from sim.compare.workload import rebuild, write_workload

    kern = _kernels_only_copy(folder, tmp)
    sets = list(args.sets or []) + [f"cost.model=profiled", f"cost.profiles_dir={kern}",
                                    f"cost.sampling={args.sampling}"]
    if args.dtype:
        sets.append(f"dtype={args.dtype}")
    benches = []
    for i, f in enumerate(args.vllm_bench):
        res = load_vllm_bench(f)
        work = tmp / f"bench{i}"
        work.mkdir()
        seed = res.meta["seed"] if res.meta.get("seed") is not None else 0
        rb = rebuild(res, seed=seed)
        csv_path = write_workload(rb, work / "workload.csv")
        real = real_metrics(res)
        benches.append((f, res, csv_path, work, real))

    def simulate(k: int, theta) -> dict:
        f, res, csv_path, work, _ = benches[k]
        over = [f"cost.roofline.{n}={float(v)!r}" for n, v in zip(CPU_KEYS, theta)]
        cfg = _sim_config(args.config, sets + over, res, csv_path, [])
        summary, req, itl = _simulate(cfg, work / "sim")
        m = sim_metrics(req, itl, summary)
        return {"ttft_s": m["ttft_s"]["mean"], "tpot_s": m["tpot_s"]["mean"]}

    n = len(benches)
    held = [False] * n
    if args.holdout:
        idx = [int(x) for x in args.holdout.split(",") if x.strip()]
        if any(not 1 <= j <= n for j in idx):
            raise EngineCalibrationError(f"--holdout: with --vllm-bench, give file numbers 1..{n}")
        held = [j + 1 in idx for j in range(n)]
    elif n >= 3:
        held = [j % 2 == 1 for j in range(n)]
    eqs, rows = [], []
    zero = (0.0,) * len(UNIT)
    for k, (f, res, _, _, real) in enumerate(benches):
        base = simulate(k, zero)
        eff = []
        for j in range(len(UNIT)):
            t = [0.0] * len(UNIT)
            t[j] = UNIT[j]
            m = simulate(k, tuple(t))
            eff.append({key: (m[key] - base[key]) / UNIT[j] for key in base})
        label = Path(f).name
        rows.append({"row": label, "held_out": held[k]})
        for key, metric in (("ttft_s", "ttft_mean_s"), ("tpot_s", "tpot_mean_s")):
            meas = real[key]["mean"]
            if meas is None or base[key] is None:
                continue
            eqs.append({"row": label, "metric": metric, "measured": meas, "kernels": base[key],
                        "x": tuple(e[key] for e in eff), "held_out": held[k], "bench": k})
    prov = {"kind": "vllm bench serve", "files": [{"file": Path(f).name, "sha256": _sha256(Path(f))}
                                                 for f, *_ in benches],
            "simulation": {"config": Path(args.config).name if args.config else None, "sets": list(args.sets or []),
                           "unit_terms": list(UNIT)}}
    return eqs, rows, prov, simulate


def run(args) -> dict:
    from kernels.load import host_load

    folder = _fitted_folder(args.fitted)
    if bool(args.static) == bool(args.vllm_bench):
        raise EngineCalibrationError("give the engine's measurements: --static CSV or --vllm-bench JSON [JSON ...]")
    with tempfile.TemporaryDirectory(prefix="servesim-engine-") as t:
        tmp = Path(t)
        if args.static:
            eqs, rows, prov = static_equations(args, folder, tmp)
            simulate = None
        else:
            eqs, rows, prov, simulate = bench_equations(args, folder, tmp)
        train = [e for e in eqs if not e["held_out"]]
        test = [e for e in eqs if e["held_out"]]
        if len(train) < 2:
            raise EngineCalibrationError("too few measurements to fit on (at least two rows besides the held-out ones)")
        theta = fit_terms(train)
        zero = (0.0,) * len(CPU_KEYS)
        result = {"params": dict(zip(CPU_KEYS, (float(x) for x in theta))),
                  "error": {"fitted_rows": errors(train, theta), "held_out_rows": errors(test, theta)},
                  "kernels_only_error": {"fitted_rows": errors(train, zero), "held_out_rows": errors(test, zero)}}
        if simulate is not None:  # the reported errors: the fitted terms simulated as they are
            sims = {}
            for e in eqs:
                k = e["bench"]
                if k not in sims:
                    sims[k] = simulate(k, tuple(theta))
                e["predicted"] = sims[k]["ttft_s" if e["metric"].startswith("ttft") else "tpot_s"]
            for part, sel in (("fitted_rows", train), ("held_out_rows", test)):
                result["error"][part] = {m: _ape_stats([(e["predicted"] - e["measured"]) / e["measured"]
                                                        for e in sel if e["metric"] == m])
                                         for m in sorted({e["metric"] for e in sel})}
        else:
            for e in eqs:
                e["predicted"] = e["kernels"] + float(np.dot(e["x"], theta))
    out_dir = Path(args.out) if args.out else folder
    if args.out and out_dir.resolve() != folder.resolve():  # a copy of the fitted folder, with the terms
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in folder.iterdir():
            if f.is_file() and f.name != ENGINE_OVERHEAD_FILE:
                shutil.copy2(f, out_dir / f.name)
    doc = {**result,
           "model": "host(step) = cpu_step_s + cpu_per_seq_s * sequences + cpu_per_token_s * tokens + "
                    "cpu_per_seq_ctx_s * context tokens of the step's sequences after it (sim.cost.roofline)",
           "method": "non-negative least squares of relative error over the fitted rows' equations; "
                     "errors are (predicted - measured) / measured",
           "provenance": {**prov, "fitted_folder": str(folder), "date": dt.datetime.now(dt.timezone.utc)
                          .isoformat(timespec="seconds"), "host_load": host_load(),
                          "note": args.note},
           "rows": [{**{k: v for k, v in e.items() if k not in ("bench",)}, "x": list(e["x"])} for e in eqs]}
    (out_dir / ENGINE_OVERHEAD_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    doc["path"] = str(out_dir / ENGINE_OVERHEAD_FILE)
    return doc


def report(doc: dict) -> str:
    """The printed table: every equation's measured, kernel-only and predicted time and error."""
    lines = [f"{'row':>14s} {'metric':>14s} {'set':>8s} {'measured':>11s} {'kernels':>11s} {'predicted':>11s} {'error':>8s}"]
    for e in doc["rows"]:
        err = (e["predicted"] - e["measured"]) / e["measured"]
        lines.append(f"{e['row']:>14s} {e['metric']:>14s} {'held' if e['held_out'] else 'fit':>8s} "
                     f"{e['measured'] * 1e3:9.3f}ms {e['kernels'] * 1e3:9.3f}ms {e['predicted'] * 1e3:9.3f}ms {err:+8.1%}")
    p = doc["params"]
    lines.append("fitted: " + " ".join(f"{k}={v:.4g}" for k, v in p.items()))
    for part in ("fitted_rows", "held_out_rows"):
        for m, s in doc["error"][part].items():
            if s["n"]:
                k = doc["kernels_only_error"][part].get(m, {})
                lines.append(f"{part.replace('_', ' '):>13s} {m:>14s}: median error {s['median_ape']:.1%}, "
                             f"max {s['max_ape']:.1%} (kernels only: median {k.get('median_ape', float('nan')):.1%}), "
                             f"{s['n']} row(s)")
    lines.append(f"written to {doc['path']}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fitted", required=True, help="fitted folder <root>/<hardware>/<model> (servesim fit)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--static", default=None, metavar="CSV",
                     help=f"static-batch times of the engine: columns {', '.join(STATIC_COLUMNS)}")
    src.add_argument("--vllm-bench", nargs="+", default=None, metavar="JSON",
                     help="vllm bench serve --save-result files (one row each: mean TTFT, mean TPOT)")
    p.add_argument("--holdout", default=None, help="rows to hold out: batch:prompt_tokens shapes (static), or file "
                   "numbers from 1 (vllm-bench); default: alternate shapes (a checkerboard on a full grid) / every second file of 3+")
    p.add_argument("--model", default=None, help="model card (id or YAML path) when the fitted folder's is not found")
    p.add_argument("--hardware", default=None, help="hardware card (id or YAML path), likewise")
    p.add_argument("--dtype", default=None, help="the dtype the engine ran (default: the fitted tables' only one)")
    p.add_argument("--sampling", choices=["random", "greedy"], default="random",
                   help="how the engine sampled (priced from the profile's rows of that method)")
    p.add_argument("--config", default=None, help="vllm-bench: servesim config YAML of the server")
    p.add_argument("--set", dest="sets", action="append", default=[], help="vllm-bench: config override KEY=VALUE")
    p.add_argument("--out", default=None, help="write a copy of the fitted folder with engine_overhead.json here "
                   "(default: into --fitted)")
    p.add_argument("--note", default=None, help="a line of provenance to store (which engine, version, settings)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.engine", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        print(report(run(args)))
    except EngineCalibrationError as e:
        print(f"calibration.engine: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
