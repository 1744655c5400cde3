"""Profiles -> fitted tables the simulator loads with numpy alone (docs/calibration.md).

    servesim fit calibration/profiles/cpu/llama-tiny --out calibration/fitted
    python -m calibration.fit PROFILE_DIR [--out FITTED_ROOT]

For one profile folder ``<root>/<hardware>/<model>/`` (kernels/schema.py contract) this writes
``FITTED_ROOT/<hardware>/<model>/``:

- ``tables.npz``: per (family, dtype, tp, op) the sorted grid axes and median times in seconds
  (1-D over tokens / batch / bytes; 2-D for attention: prefill chunk x context, decode batch x
  longest context). Duplicate keys (decode rows with the same batch and longest context) are
  merged by their geometric mean.
- ``holdout.json``: the held-out points (not in the tables) for kernel-level validation. Per
  table, the grid points that are not on the boundary of any axis are ordered and every 5th,
  starting with the first, is held out, so the tables still span the whole measured range.
- ``roofline_params.json``: the roofline's efficiency factors fitted to this device's
  training points by least squares on log time (gemm_eff, attn_eff, mem_eff, kernel_floor_s).
- ``meta.json``: provenance (profile meta, counts, fit residuals) and ``attention``: the
  decode-attention variant the profile timed (``paged`` or ``contiguous``, ``kernels.ops``), which
  the ``attn_decode`` tables therefore price.

Standard library + numpy only: runs on the bare GPU machine.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from kernels.schema import FAMILIES, decode_attention, read_rows
from sim.cost.profiled import SEP, TABLES_FILE, table_key

HOLDOUT_EVERY = 5


class FitError(ValueError):
    """A profile folder that cannot be fitted (missing, empty, malformed)."""


# ---------------------------------------------------------------------- grid points

def point(family: str, row: dict) -> tuple[str, str, int, str, float, float | None]:
    """(family, dtype, tp, op, x, y) of one profile row: the table and coordinates it belongs to."""
    dt = row["dtype"]
    if family == "gemm":
        return family, dt, row["tp"], row["op"], row["tokens"], None
    if family == "elementwise":
        return family, dt, row["tp"], row["op"], row["tokens"], None
    if family == "sampling":
        return family, dt, row["tp"], row["op"], row["batch"], None
    if family == "collective":
        return family, dt, row["world_size"], row["op"], row["bytes"], None
    if family == "attn_prefill":
        if row["num_seqs"] != 1:
            raise FitError("attn_prefill rows with num_seqs != 1 are not supported by the fit")
        return family, dt, row["tp"], "", row["chunk_tokens"], row["context_tokens"]
    if family == "attn_decode":
        return family, dt, row["tp"], "", row["batch"], row["context_max"]
    raise FitError(f"unknown family {family!r}")


LOG1P_Y = {"attn_prefill": True}  # prefill context may be 0


def group_points(folder: Path) -> dict[str, list[tuple[float, float | None, float, dict]]]:
    """Profile rows grouped by table key: (x, y, seconds, row)."""
    groups: dict[str, list] = defaultdict(list)
    for fam in FAMILIES:
        for r in read_rows(folder / f"{fam}.csv"):
            if r.get("time_us") is None or r["time_us"] <= 0:
                continue
            f, dt, tp, op, x, y = point(fam, r)
            groups[table_key(f, dt, tp, op)].append((float(x), None if y is None else float(y), r["time_us"] * 1e-6, r))
    return groups


def split_holdout(pts: list) -> tuple[list, list]:
    """(training, held-out): every 5th interior point (not on any axis boundary) is held out."""
    xs = sorted({p[0] for p in pts})
    ys = sorted({p[1] for p in pts if p[1] is not None})
    coords = sorted({(p[0], p[1]) for p in pts}, key=lambda c: (c[0], -1 if c[1] is None else c[1]))
    interior = [c for c in coords if xs[0] < c[0] < xs[-1] and (c[1] is None or ys[0] < c[1] < ys[-1])]
    held = {c for i, c in enumerate(interior) if i % HOLDOUT_EVERY == 0}
    return [p for p in pts if (p[0], p[1]) not in held], [p for p in pts if (p[0], p[1]) in held]


def _fill_row(xs: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Fill NaN holes of one grid line by log-log interpolation, nearest value beyond its ends."""
    ok = ~np.isnan(row)
    if ok.all() or not ok.any():
        return row
    return np.exp(np.interp(np.log(xs), np.log(xs[ok]), np.log(row[ok])))


def build_table(pts: list, y_log1p: bool = False) -> dict[str, np.ndarray]:
    """Arrays of one table: ``x``, ``t`` (and ``y``); duplicates merged by geometric mean."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for x, y, t, _ in pts:
        acc[(x, y)].append(math.log(t))
    xs = np.array(sorted({k[0] for k in acc}))
    if pts[0][1] is None:
        t = np.array([math.exp(np.mean(acc[(x, None)])) for x in xs])
        return {"x": xs, "t": t}
    ys = np.array(sorted({k[1] for k in acc}))
    grid = np.full((len(xs), len(ys)), np.nan)
    for (x, y), v in acc.items():
        grid[np.searchsorted(xs, x), np.searchsorted(ys, y)] = math.exp(np.mean(v))
    yax = np.log1p(ys) if y_log1p else ys  # holes: along y first, then along x
    for i in range(len(xs)):
        grid[i] = _fill_row(np.exp(yax) if y_log1p else yax, grid[i])
    for j in range(len(ys)):
        grid[:, j] = _fill_row(xs, grid[:, j])
    return {"x": xs, "y": ys, "t": grid, "log1p": np.array([False, y_log1p])}


# ---------------------------------------------------------------------- roofline factors

def _roofline_features(model, hw, key: str, x: float, y: float | None, dtype: str):
    """(flops, bytes, kind) the roofline assigns to one profiled point; kind picks the efficiency."""
    from sim.cost.roofline import RooflineCostModel

    from sim.cost.roofline import SAMPLING

    fam, _, tp, op = key.split(SEP)
    act = "fp32" if dtype == "fp32" else ("fp16" if dtype == "fp16" else "bf16")
    rm = RooflineCostModel(model, hw, tp=int(tp), dtype=dtype if dtype in ("bf16", "fp16", "fp8", "fp32") else "bf16",
                           act_dtype=act, sampling=op if fam == "sampling" and op in SAMPLING else "random")
    captured = {}

    def roof(flops, nbytes, eff, peak=None):
        captured["v"] = (flops, nbytes)
        return 1.0

    rm._roof = roof  # record the (flops, bytes) of one query
    if fam == "gemm":
        if op.startswith("expert_"):
            return None
        rm.gemm(op, int(x))
        kind = "gemm"
    elif fam == "attn_prefill":
        rm.attn_prefill([(int(x), int(y))])
        kind = "attn"
    elif fam == "attn_decode":
        rm.attn_decode(int(x), int(x * y))
        kind = "attn"
    elif fam == "elementwise":
        rm.elementwise(op, int(x))
        kind = "mem"
    elif fam == "sampling":
        rm.sampling(int(x))
        kind = "mem"
    else:
        return None
    return (*captured["v"], kind)


def fit_roofline(model, hw, dtype: str, groups: dict[str, list]) -> dict:
    """Least squares on log time of the roofline max(F/(P e_c), B/(W e_m), floor) over a log grid
    of each factor (bounded to (0, 1]); gemm_eff from GEMMs, attn_eff from attention, mem_eff
    and kernel_floor_s from all points jointly."""
    feats = []
    for key, pts in groups.items():
        if key.split(SEP)[1] != dtype:
            continue
        for x, y, t, _ in pts:
            f = _roofline_features(model, hw, key, x, y, dtype)
            if f is not None:
                feats.append((*f, t))
    if not feats:
        return {}
    F = np.array([f[0] for f in feats])
    B = np.array([f[1] for f in feats])
    kind = np.array([f[2] for f in feats])
    lt = np.log(np.array([f[3] for f in feats]))
    peak, bw = hw.peak_flops(dtype if dtype in ("bf16", "fp16", "fp8") else "bf16"), hw.mem_bw
    effs = np.geomspace(1e-3, 1.0, 61)
    floors = np.concatenate([[0.0], np.geomspace(1e-7, 1e-3, 41)])

    def sse(ec, em, fl, mask):
        pred = np.maximum(np.maximum(F[mask] / (peak * ec), B[mask] / (bw * em)), fl)
        pred = np.maximum(pred, 1e-12)
        return np.sum((np.log(pred) - lt[mask]) ** 2, axis=-1)

    mem = kind == "mem"
    # mem_eff and the floor from bandwidth-bound points, then compute efficiencies given them
    em_grid, fl_grid = np.meshgrid(effs, floors, indexing="ij")
    pred = np.maximum(B[mem][None, None, :] / (bw * em_grid[..., None]), fl_grid[..., None]) if mem.any() else None
    if pred is not None:
        err = np.sum((np.log(np.maximum(pred, 1e-12)) - lt[mem]) ** 2, axis=-1)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        mem_eff, floor = float(effs[i]), float(floors[j])
    else:
        mem_eff, floor = 0.85, 3e-6
    out = {"mem_eff": mem_eff, "kernel_floor_s": floor}
    resid = {}
    for name, k in (("gemm_eff", "gemm"), ("attn_eff", "attn")):
        m = kind == k
        if not m.any():
            continue
        errs = np.array([sse(e, mem_eff, floor, m) for e in effs])
        best = int(np.argmin(errs))
        out[name] = float(effs[best])
        resid[name] = float(np.sqrt(errs[best] / m.sum()))
    if mem.any():
        resid["mem_eff"] = float(np.sqrt(sse(1.0, mem_eff, floor, mem) / mem.sum()))
    return {"params": out, "rms_log_error": resid, "points": int(len(feats)), "dtype": dtype,
            "method": "grid search of least squares on log time; factors bounded to [0.001, 1]"}


# ---------------------------------------------------------------------- driver

def _resolve_cards(meta: dict, folder: Path, model_arg: str | None = None, hardware_arg: str | None = None):
    """(model card, hardware card, model id, hardware id) of a profile folder. The model card:
    ``--model`` (a catalog id or a card file), else the card file the profile recorded
    (``model_card`` in meta.json), else the catalog, else ``calibration/cards/<id>.yaml``; the
    hardware card likewise (``cpu``: ``calibration/cards/cpu-host.yaml``). A card that cannot be
    found, or that names another model than the profile, is a FitError naming the flag to give."""
    from sim.catalog import CatalogError, get_hardware, get_model

    model_id = meta.get("model") or folder.name
    hw_id = meta.get("hardware_id") or folder.parent.name
    cards = Path(__file__).parent / "cards"

    def first(get, candidates, flag, what, want):
        for c in candidates:
            if not c:
                continue
            try:
                card = get(str(c))
            except CatalogError as e:
                if c is candidates[0] and flag:  # the user's own argument: say why it failed
                    raise FitError(f"{flag} {c}: {e}") from None
                continue
            if card.id != want and what == "model":
                raise FitError(f"{flag or 'model card'} {c} is {card.id!r} but the profile {folder} is of {want!r}")
            return card
        return None

    recorded = meta.get("model_card")
    model = first(get_model, [model_arg, recorded if recorded and Path(recorded).is_file() else None, model_id,
                              cards / f"{model_id}.yaml" if (cards / f"{model_id}.yaml").is_file() else None],
                  "--model" if model_arg else None, "model", model_id)
    hw_card = cards / ("cpu-host.yaml" if hw_id == "cpu" else f"{hw_id}.yaml")
    hw = first(get_hardware, [hardware_arg, hw_id, hw_card if hw_card.is_file() else None],
               "--hardware" if hardware_arg else None, "hardware", hw_id)
    if model is None:
        raise FitError(f"{folder}: no model card for {model_id!r} (not in the catalog, not recorded by the profile, "
                       f"not in calibration/cards/): give it with --model PATH/TO/{model_id}.yaml, so the roofline "
                       "factors can be fitted")
    if hw is None:
        raise FitError(f"{folder}: no hardware card for {hw_id!r}: give it with --hardware ID or a card path")
    return model, hw, model_id, hw_id


def fit(profile_dir: str | Path, out_root: str | Path = "calibration/fitted", model: str | None = None,
        hardware: str | None = None) -> Path:
    """Fit one profile folder; returns the fitted folder ``out_root/<hardware>/<model>``.
    ``model`` / ``hardware``: card ids or paths when the profile's own cannot be found."""
    folder = Path(profile_dir)
    if not folder.is_dir():
        raise FitError(f"profile folder {folder} does not exist")
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() else {}
    groups = group_points(folder)
    if not groups:
        raise FitError(f"{folder}: no profile rows (expected {', '.join(f + '.csv' for f in FAMILIES)})")
    card_file = str(Path(model).resolve()) if model and Path(model).is_file() else meta.get("model_card")
    model, hw, model_id, hw_id = _resolve_cards(meta, folder, model, hardware)
    dest = Path(out_root) / hw_id / model_id
    dest.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    holdout, counts = [], {}
    train_groups = {}
    for key, pts in sorted(groups.items()):
        fam = key.split(SEP)[0]
        train, held = split_holdout(pts)
        train_groups[key] = train
        for name, arr in build_table(train, LOG1P_Y.get(fam, False)).items():
            arrays[f"{key}{SEP}{name}"] = arr
        holdout += [{"table": key, "x": x, "y": y, "time_s": t, "row": r} for x, y, t, r in held]
        counts[key] = {"train": len(train), "held_out": len(held)}
    np.savez(dest / TABLES_FILE, **arrays)
    (dest / "holdout.json").write_text(json.dumps(holdout, indent=1) + "\n")
    dtypes = sorted({k.split(SEP)[1] for k in groups})
    fits = {dt: fit_roofline(model, hw, dt, train_groups) for dt in dtypes}
    main = fits.get("bf16") or next(iter(fits.values()), {})
    (dest / "roofline_params.json").write_text(json.dumps(
        {"params": main.get("params", {}), "hardware_id": hw_id, "by_dtype": fits,
         "note": "this device's roofline factors; cpu_step_s / cpu_per_seq_s come from overhead.json (servesim validate)"},
        indent=2) + "\n")
    (dest / "meta.json").write_text(json.dumps(
        {"hardware_id": hw_id, "model": model_id, "dtypes": dtypes, "tables": counts,
         "attention": decode_attention(folder, default=meta.get("attention") or "paged"),
         "model_card": card_file,
         "holdout_rule": f"every {HOLDOUT_EVERY}th interior grid point per table, from the first",
         "profile": {k: meta.get(k) for k in ("device_name", "torch_version", "cuda_version", "driver_version",
                                              "date", "grid", "threads", "complete", "host_load", "spread",
                                              "warnings")},
         "source_folder": folder.name}, indent=2) + "\n")
    return dest


def average_params(fitted_root: str | Path, exclude: tuple[str, ...] = ("cpu",)) -> dict:
    """Mean of the fitted factors over the profiled GPUs under a fitted root (CPU hosts excluded):
    the suggested ``cost.roofline`` defaults for unprofiled GPUs."""
    vals = defaultdict(list)
    for p in sorted(Path(fitted_root).glob("*/*/roofline_params.json")):
        if p.parent.parent.name in exclude:
            continue
        for k, v in json.loads(p.read_text()).get("params", {}).items():
            vals[k].append(v)
    return {k: float(np.exp(np.mean(np.log(v)))) if min(v) > 0 else float(np.mean(v)) for k, v in vals.items()}


def profile_folders(path: Path) -> list[Path]:
    """A profile folder itself, or every ``<hardware>/<model>`` folder under a profiles root."""
    if any((path / f"{f}.csv").is_file() for f in FAMILIES):
        return [path]
    return sorted(p.parent for p in path.glob("*/*/meta.json"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.fit", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile_dir", help="a profile folder <root>/<hardware>/<model>, or a profiles root")
    p.add_argument("--out", default="calibration/fitted", help="fitted root; writes OUT/<hardware>/<model>/")
    p.add_argument("--model", default=None, help="model card (catalog id or YAML path) when the profile's model "
                   "is not in the catalog and its card file is not where the profile recorded it")
    p.add_argument("--hardware", default=None, help="hardware card (catalog id or YAML path), likewise")


def run(args) -> int:
    folders = profile_folders(Path(args.profile_dir))
    if not folders:
        raise FitError(f"no profile folders under {args.profile_dir}")
    if len(folders) > 1 and (args.model or args.hardware):
        raise FitError(f"--model / --hardware name one card, but {args.profile_dir} holds {len(folders)} profiles: "
                       "fit one profile folder at a time")
    for f in folders:
        dest = fit(f, args.out, args.model, args.hardware)
        meta = json.loads((dest / "meta.json").read_text())
        for w in meta["profile"].get("warnings") or []:
            print(f"  warning (profile): {w}", file=sys.stderr)
        for name in ("overhead.json", "engine_overhead.json"):
            if (dest / name).is_file():
                print(f"  warning: {dest / name} was fitted against the tables this fit replaced; run "
                      f"{'servesim validate' if name == 'overhead.json' else 'servesim calibrate-engine'} again",
                      file=sys.stderr)
        held = sum(c["held_out"] for c in meta["tables"].values())
        by_dtype = json.loads((dest / "roofline_params.json").read_text())["by_dtype"]
        print(f"fitted {f} -> {dest} ({len(meta['tables'])} tables, {held} points held out)")
        for dt, fitted in by_dtype.items():
            print(f"  roofline factors ({dt}): " + ", ".join(f"{k}={v:.3g}" for k, v in fitted.get("params", {}).items()))
    avg = average_params(args.out)
    if avg:
        (Path(args.out) / "roofline_params.json").write_text(json.dumps(
            {"params": avg, "note": "geometric mean over the profiled GPUs under this root; use as cost.roofline"},
            indent=2) + "\n")
        print("  GPU average (use for unprofiled GPUs): "
              + " ".join(f"--set cost.roofline.{k}={v:.3g}" for k, v in avg.items()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FitError as e:
        print(f"calibration.fit: error: {e}", file=sys.stderr)
        sys.exit(2)
