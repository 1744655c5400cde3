"""Validate a fitted cost model against measurements (docs/calibration.md).

    servesim validate --fitted calibration/fitted/cpu/llama-tiny --device cpu \\
        --model calibration/cards/llama-tiny.yaml --hardware calibration/cards/cpu-host.yaml --out DIR
    python -m calibration.validate --device cuda --model llama-3.1-8b --hardware-id h200-sxm \\
        --profiles calibration/profiles          # the GPU campaign's hook: fit, then validate

(a) kernel level: each held-out profile point (``holdout.json``) against the table lookup;
(b) overhead: probe steps calibrate the per-step / per-sequence overhead the operator profile
    misses; written to ``overhead.json`` beside a copy of the fitted tables under the output
    (``OUT/fitted/<hw>/<model>``; the profiled cost model loads it from there); the input is
    never written;
(c) step level, a REAL replay: the step plans of a simulation (made here with the simulator, or
    read from ``--plans`` / ``calibration/plans/<model>_<hw>.json`` where the simulator is not
    installed) run as PyTorch forward passes over a paged KV cache (``calibration.replay``); each
    measured step time is compared with the cost model's prediction for the same BatchShape, and
    every request's TTFT and TPOT are recomputed along the plan from measured and predicted times.

Writes ``validation.json`` (fractions: ``kernel.median_ape`` ...) and figures (PNG + SVG) to --out;
every file it writes lies under --out (see ``output_folders``).
Needs torch, numpy and pyyaml only when plans come from a file (matplotlib optional).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


class ValidateError(ValueError):
    pass


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def _stats(xs: list[float]) -> dict:
    if not xs:
        return {"median_ape": None, "p90_ape": None, "mean_ape": None, "n": 0}
    a = np.asarray(xs)
    return {"median_ape": float(np.median(a)), "p90_ape": float(np.quantile(a, 0.9)), "mean_ape": float(a.mean()),
            "n": int(a.size)}


def load_1min() -> float | None:
    """This host's 1-minute load average (runnable processes, this one included); None where the
    OS keeps none (``kernels.load.host_load``'s first figure)."""
    from kernels.load import host_load

    avg = host_load()["loadavg"]
    return avg[0] if avg else None


def busy_note(loads: list[float | None], cores: int) -> str | None:
    """Why the measured step times say little: while the replay ran, the load average exceeded
    the host's cores, so steps were timed while waiting for a core (None when the host had a
    core for every runnable process, or no load was measured)."""
    seen = [x for x in loads if x is not None]
    if not seen or max(seen) <= cores:
        return None
    return (f"the host was busy during the replay (load average up to {max(seen):.1f} on {cores} cores): measured "
            "step times include waiting for a core, so the step, TTFT and TPOT errors say little about the cost "
            "model; rerun on an idle host")


# ---------------------------------------------------------------------- cards and folders

def resolve_cards(model: str, hardware: str | None, device: str):
    from sim.catalog import get_hardware, get_model

    card = get_model(model)
    if hardware in (None, "cpu") and device == "cpu":
        hardware = str(HERE / "cards" / "cpu-host.yaml")
    if hardware is None:
        import torch

        from kernels.profile import detect_hardware_id

        hardware = detect_hardware_id(torch.device("cuda", 0))
    return card, get_hardware(hardware)


def output_folders(args, hw_id: str, model_id: str) -> tuple[Path, Path]:
    """(validation folder, fitted root): everything validate writes lies under them.

    With ``--out`` both are under it (``OUT`` and ``OUT/fitted``); without, under
    ``[$OUT/]calibration/`` (``validation/<hw>/<model>`` and ``fitted``), as the GPU campaign
    expects. ``--fitted-out`` overrides the fitted root."""
    if args.out:
        out = Path(args.out)
        root = out / "fitted"
    else:
        base = Path(os.environ.get("OUT", ".")) / "calibration"
        out, root = base / "validation" / hw_id / model_id, base / "fitted"
    return out, Path(args.fitted_out) if args.fitted_out else root


def copy_fitted(src: Path, dst: Path) -> Path:
    """A copy of a fitted (hardware, model) folder, where validate may add overhead.json."""
    import shutil

    if src.resolve() == dst.resolve():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "overhead.json":
            shutil.copy2(f, dst / f.name)
    return dst


def fitted_folder(fitted: str | None, profiles: str | None, hw_id: str, model_id: str, out_root: Path) -> Path:
    """The fitted (hardware, model) folder: given, or fitted now from ``profiles``."""
    if fitted:
        f = Path(fitted)
        for cand in (f, f / hw_id / model_id):
            if (cand / "tables.npz").is_file():
                return cand
        raise ValidateError(f"no fitted tables (tables.npz) in {f} or {f / hw_id / model_id}")
    if not profiles:
        raise ValidateError("give --fitted DIR, or --profiles ROOT to fit first")
    from calibration.fit import fit

    prof = Path(profiles)
    prof = prof if (prof / "meta.json").is_file() else prof / hw_id / model_id
    return fit(prof, out_root)


# ---------------------------------------------------------------------- (a) kernel level

def kernel_level(folder: Path) -> tuple[dict, list]:
    from sim.cost.profiled import load_tables

    tables = load_tables(folder)
    held = json.loads((folder / "holdout.json").read_text())
    per_op, points = defaultdict(list), []
    for h in held:
        tab = tables[h["table"]]
        x, y, _ = tab.clamp(h["x"], h["y"])
        pred = tab(x, y)
        fam, dt, tp, op = h["table"].split("|")
        name = f"{fam}:{op}" if op else fam
        e = ape(pred, h["time_s"])
        per_op[name].append(e)
        points.append((name, pred, h["time_s"]))
    allv = [e for v in per_op.values() for e in v]
    return {**_stats(allv), "per_op": {k: _stats(v) for k, v in sorted(per_op.items())}}, points


# ---------------------------------------------------------------------- (c) replay

def default_plans(model_id: str, hw_id: str) -> Path:
    short = hw_id.split("-")[0]
    return HERE / "plans" / f"{model_id}_{short}.json"


def get_plans(args, card, hw, folder: Path) -> dict | None:
    from calibration import plans as P

    path = Path(args.plans) if args.plans else default_plans(card.id, hw.id)
    if args.plans or (args.device == "cuda" and path.is_file()):
        return P.load(path)
    try:
        import simpy  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError:
        return P.load(path) if path.is_file() else None
    wl = P.CPU_WORKLOAD if args.device == "cpu" else P.GPU_WORKLOAD
    hw_arg = _hw_arg(args) if args.device == "cpu" else (args.hardware or hw.id)
    dtype = [f"dtype={args.dtype}"] if args.dtype != "bf16" else []
    return P.make_plans(args.model, hw_arg,
                        wl + dtype + (args.sets or []), profiles_dir=str(folder), seed=args.seed)


def _hw_arg(args) -> str:
    return args.hardware if args.hardware not in (None, "cpu") else str(HERE / "cards" / "cpu-host.yaml")


def cost_model(card, hw, folder: Path, dtype: str):
    """The profiled cost model of ``folder`` for ``dtype`` (fp32: activations and KV in fp32 too);
    a ValidateError when the fitted tables hold no rows of that dtype."""
    from sim.cost.profiled import load_profiled_cost_model

    # the replay is its own engine: its overhead is the probe's (overhead.json), never another engine's
    cm = load_profiled_cost_model(card, hw, profiles_dir=str(folder), dtype=dtype, overhead_files=("overhead.json",),
                                  act_dtype="fp32" if dtype == "fp32" else "bf16")
    if cm is None:
        raise ValidateError(f"{folder}: the fitted tables hold no {dtype} rows; profile with --dtype {dtype} and fit")
    return cm


def step_kind(new: list[int]) -> str:
    dec = sum(1 for n in new if n == 1)
    return "decode" if dec == len(new) else ("prefill" if dec == 0 else "mixed")


def run(args) -> dict:
    import torch

    from calibration.replay import ReplayModel, blocks_needed, probe_overhead, replay, weight_bytes
    from kernels.timing import cpu_clock, host_load, load_warning
    from sim.kv.blocks import DEFAULT_BLOCK_SIZE
    from sim.types import BatchShape

    t_start = time.perf_counter()
    if args.repeats is None:
        args.repeats = 5 if args.device == "cpu" else 3
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValidateError("--device cuda but torch sees no CUDA GPU")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    clock = "cuda_events" if args.device == "cuda" else cpu_clock(args.threads)[0]
    load_start = host_load()
    card, hw = resolve_cards(args.model, args.hardware, args.device)
    out, fitted_root = output_folders(args, hw.id, card.id)
    out.mkdir(parents=True, exist_ok=True)
    folder = fitted_folder(args.fitted, args.profiles, hw.id, card.id, fitted_root)
    if args.fitted:  # the input stays as it is: overhead.json goes into a copy under the output
        folder = copy_fitted(folder, fitted_root / hw.id / card.id)
    kernel, kpoints = kernel_level(folder)
    result = {"device": {"type": args.device, "name": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
                         "torch": torch.__version__, "threads": args.threads if args.device == "cpu" else None,
                         "clock": clock, "host_load": {"start": load_start}},
              "meta": {"model": card.id, "hardware": hw.id, "dtype": args.dtype, "fitted": str(folder),
                       "date": time.strftime("%Y-%m-%d")},
              "kernel": kernel}
    attention = json.loads((folder / "meta.json").read_text()).get("attention", "paged") \
        if (folder / "meta.json").is_file() else "paged"
    result["meta"]["decode_attention"] = attention
    mismatch = []
    if attention != "paged":  # the replay keeps its KV cache paged, as vLLM does
        mismatch = [f"the tables' decode attention is {attention} but the replay's is paged: its decode steps "
                    "are priced for another kernel than the one replayed (profile with --attention paged to "
                    "validate against the replay)"]
        print(f"warning: {mismatch[0]}", file=sys.stderr)
    print(f"kernel level: {kernel['n']} held-out points, median APE {kernel['median_ape']:.1%}, "
          f"p90 {kernel['p90_ape']:.1%}")

    # ---- replay model, or the reason there is none
    dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    doc = None
    skip = None
    if args.no_replay:
        skip = "--no-replay"
    elif args.device == "cuda" and weight_bytes(card) > 0.8 * torch.cuda.get_device_properties(0).total_memory:
        skip = f"{card.id} weights ({weight_bytes(card) / 2**30:.0f} GiB) do not fit on one {hw.id}"
    if skip is None:
        def predictor(cm):
            return lambda new, ctx: cm.step_time(BatchShape(tuple(new), tuple(ctx)))

        cm = cost_model(card, hw, folder, args.dtype)
        # probe: a model with room for the probe steps, then the overhead fit
        model = ReplayModel(card, dev, args.dtype, num_blocks=256, seed=args.seed)
        pred = predictor(cm)
        over = probe_overhead(model, lambda n, c: (lambda st: st.total - st.cpu)(pred(n, c)))
        del model
        (folder / "overhead.json").write_text(json.dumps({**over, "device": result["device"]}, indent=2) + "\n")
        result["overhead"] = over
        print(f"overhead: {over['params']['cpu_step_s'] * 1e3:.3f} ms/step + "
              f"{over['params']['cpu_per_seq_s'] * 1e6:.1f} us/seq (host prep median "
              f"{over['host_prep_s']['median'] * 1e3:.3f} ms)")
        doc = get_plans(args, card, hw, folder)
        if doc is None:
            skip = "no plans file and no simulator installed"
    if skip is not None:
        result["step"] = result["ttft"] = result["tpot"] = {"median_ape": None, "p90_ape": None, "skipped": skip}
        print(f"replay skipped: {skip}")
    else:
        cm = cost_model(card, hw, folder, args.dtype)
        steps = doc["steps"][: args.max_steps] if args.max_steps else doc["steps"]
        doc = {**doc, "steps": steps}
        predicted = [cm.step_time(BatchShape(tuple(s["new"]), tuple(s["ctx"]))) for s in steps]
        model = ReplayModel(card, dev, args.dtype, block_size=doc.get("block_size", DEFAULT_BLOCK_SIZE),
                            num_blocks=blocks_needed(doc, doc.get("block_size", DEFAULT_BLOCK_SIZE)) + 8, seed=args.seed,
                            max_positions=max(s["ctx"][i] + s["new"][i] for s in steps for i in range(len(s["new"]))) + 1)
        t0 = time.perf_counter()
        load_before = load_1min()
        measured = replay(model, doc, repeats=args.repeats)
        wall = time.perf_counter() - t0
        loads = [load_before, load_1min()]
        busy = busy_note(loads, os.cpu_count() or 1)
        result["host"] = {"load_average_1min": [x for x in loads if x is not None], "cores": os.cpu_count(),
                          "busy": busy}
        meas = [h + f for h, f in measured]
        pr = [p.total for p in predicted]
        errs = [ape(p, m) for p, m in zip(pr, meas)]
        by_kind = defaultdict(list)
        for s, e in zip(steps, errs):
            by_kind[step_kind(s["new"])].append(e)
        from calibration.plans import request_metrics

        rm_meas, rm_pred = request_metrics(doc, meas), request_metrics(doc, pr)
        ttft = [ape(rm_pred[i][0], rm_meas[i][0]) for i in rm_meas if i in rm_pred and rm_meas[i][0] > 0]
        tpot = [ape(rm_pred[i][1], rm_meas[i][1]) for i in rm_meas
                if i in rm_pred and rm_meas[i][1] and rm_pred[i][1] is not None]
        no_cpu = [ape(p.total - p.cpu, m) for p, m in zip(predicted, meas)]
        result["step"] = {**_stats(errs), "by_kind": {k: _stats(v) for k, v in sorted(by_kind.items())},
                          "signed_median": float(np.median([(p - m) / m for p, m in zip(pr, meas)])),
                          "without_overhead_median_ape": float(np.median(no_cpu)),
                          "host_prep_median_s": float(np.median([h for h, _ in measured])),
                          "forward_median_s": float(np.median([f for _, f in measured])),
                          "measured_median_s": float(np.median(meas)), "predicted_median_s": float(np.median(pr)),
                          "replay_wall_s": round(wall, 2), "repeats": args.repeats}
        result["ttft"], result["tpot"] = _stats(ttft), _stats(tpot)
        result["plans"] = {"steps": len(steps), "requests": len(doc["requests"]), "source": doc.get("cost_source"),
                           "made_on": doc.get("hardware"), "out_of_range_queries": cm.out_of_range_total()}
        print(f"step level: {len(steps)} steps, median APE {result['step']['median_ape']:.1%}, "
              f"p90 {result['step']['p90_ape']:.1%}; TTFT median {result['ttft']['median_ape']:.1%}, "
              f"TPOT median {result['tpot']['median_ape']:.1%}")
        np.savetxt(out / "steps.csv", np.array([[len(s["new"]), sum(s["new"]), p, m, h] for s, p, m, (h, _) in
                                                zip(steps, pr, meas, measured)]),
                   delimiter=",", header="seqs,tokens,predicted_s,measured_s,host_s", comments="", fmt="%.9g")
        if busy:
            print(f"warning: {busy}")
        _figures(out, kpoints, pr, meas, steps, card.id, hw.id)
    if kpoints and "step" in result and result["step"].get("skipped"):
        _figures(out, kpoints, [], [], [], card.id, hw.id)
    result["meta"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    result["device"]["host_load"]["end"] = host_load()
    result["warnings"] = [w for w in (load_warning(result["device"]["host_load"][k], f"validation ({k})", clock)
                                      for k in ("start", "end")) if w][:1]
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    result["warnings"] += mismatch  # printed when found, above
    (out / "validation.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"validation written to {out}/validation.json")
    return result


def _figures(out: Path, kpoints, pred, meas, steps, model_id: str, hw_id: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: figures skipped", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(5.5, 5))
    names = sorted({k[0] for k in kpoints})
    for n in names:
        p = [(a, b) for k, a, b in kpoints if k == n]
        ax.scatter([b * 1e6 for _, b in p], [a * 1e6 for a, _ in p], s=14, label=n)
    _diag(ax, [b * 1e6 for _, _, b in kpoints] + [a * 1e6 for _, a, _ in kpoints])
    ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted from table (us)",
           title=f"Held-out kernels: {model_id} on {hw_id}")
    ax.legend(fontsize=6, loc="upper left")
    _save(fig, out / "kernel_scatter")
    if pred:
        fig, ax = plt.subplots(figsize=(5.5, 5))
        kinds = [step_kind(s["new"]) for s in steps]
        for k in ("decode", "mixed", "prefill"):
            idx = [i for i, x in enumerate(kinds) if x == k]
            if idx:
                ax.scatter([meas[i] * 1e3 for i in idx], [pred[i] * 1e3 for i in idx], s=10, label=k)
        _diag(ax, [x * 1e3 for x in meas + pred])
        ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted step (ms)",
               title=f"Replayed steps: {model_id} on {hw_id}")
        ax.legend(fontsize=7)
        _save(fig, out / "step_scatter")
    plt.close("all")


def _diag(ax, vals):
    lo, hi = min(vals) * 0.8, max(vals) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")


def _save(fig, stem: Path) -> None:
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)
    fig.savefig(stem.with_suffix(".svg"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fitted", default=None, help="fitted folder (<root>/<hardware>/<model>) or fitted root")
    p.add_argument("--profiles", default=None, help="profiles root or folder: fit first (when --fitted is absent)")
    p.add_argument("--fitted-out", default=None, help="fitted root: tables fitted from --profiles, or a copy of --fitted "
                   "with the measured overhead.json (default OUT/fitted, or [$OUT/]calibration/fitted without --out)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--model", required=True, help="catalog model id or model-card YAML path")
    p.add_argument("--hardware", "--hardware-id", dest="hardware", default=None,
                   help="hardware id or card path (default: cpu test card on --device cpu, detected on cuda)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--out", default=None, help="output folder (default [$OUT/]calibration/validation/<hw>/<model>)")
    p.add_argument("--plans", default=None, help="plan file (default: simulate here, or calibration/plans/<model>_<hw>.json)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per replayed step, the fastest counts (default 5 on cpu, 3 on cuda)")
    p.add_argument("--max-steps", type=int, default=None, help="replay only the first N steps")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-replay", action="store_true", help="kernel level only")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra config override for the plan simulation")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.validate", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        run(args)
    except ValidateError as e:
        print(f"calibration.validate: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
