"""Profile the operators of a model's shard on one device into profile CSVs (docs/profiles.md).

    python -m kernels.profile --device cuda --model llama-3.1-70b --tp 1,2,4,8 --dtype bf16 \\
        --grid full --out calibration/profiles [--hardware-id h200-sxm]

Rows are appended and flushed as they are measured; a rerun skips the grid points already in
the CSVs, so an interrupted run resumes. Needs only torch, numpy, pyyaml and the standard library.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

import kernels.args
from kernels.args import ProfileError, resolve_model
from kernels import grid as grids
from kernels import ops
from kernels.schema import FAMILIES, RowWriter, decode_attention, key_of, read_rows
from kernels.timing import (CPU_TIMING, GPU_TIMING, L2Flusher, TimingConfig, cpu_clock, host_load, load_warning,
                            measure, quantile)

COMPUTE = ("gemm", "attn_prefill", "attn_decode", "elementwise", "sampling")


def detect_hardware_id(device: torch.device) -> str:
    """Catalog id of this device (``cpu`` for CPUs); the slugged device name when not in the catalog."""
    if device.type == "cpu":
        return "cpu"
    from sim.catalog import CatalogError, get_hardware, list_hardware

    name = torch.cuda.get_device_name(device)
    try:
        return get_hardware(name).id
    except CatalogError:
        pass
    words = name.lower().replace("nvidia", "").split()
    for card in list_hardware():  # e.g. "NVIDIA H200" matches alias "H200"
        if any(a.lower().split() == words for a in (card.name, *card.aliases)):
            return card.id
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    print(f"kernels.profile: device {name!r} is not in the hardware catalog; using id {slug!r}", file=sys.stderr)
    return slug


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device) -> dict:
    env = {"device": device.type, "torch_version": torch.__version__, "python": platform.python_version(),
           "host": platform.node(), "cpu": platform.processor() or platform.machine()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(device_name=p.name, cuda_version=torch.version.cuda, cudnn_version=torch.backends.cudnn.version(),
                   driver_version=_driver_version(), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   sm_count=p.multi_processor_count, l2_cache_bytes=getattr(p, "L2_cache_size", None),
                   gpu_count=torch.cuda.device_count())
    else:
        env.update(device_name=f"CPU ({platform.machine()})", cuda_version=None, driver_version=None)
    return env


class Progress:
    """tqdm when installed, else a line on stderr every few seconds."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.total, self.desc, self.n, self.enabled = total, desc, 0, enabled
        self._t0 = self._last = time.perf_counter()
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
            except ImportError:
                pass

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and (time.perf_counter() - self._last > 5 or self.n == self.total):
            self._last = time.perf_counter()
            print(f"{self.desc}: {self.n}/{self.total} points, {self._last - self._t0:.0f} s", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _parse_list(s: str, cast=str) -> list:
    return [cast(x) for x in str(s).split(",") if x.strip()]


def plan(model, tps: list[int], dtypes: list[str], grid: str, families: tuple[str, ...],
         attention: str = "paged") -> list[tuple[str, dict]]:
    """Every compute point to profile, in order."""
    if attention not in ops.ATTENTION:
        raise ProfileError(f"--attention must be one of {', '.join(ops.ATTENTION)}, not {attention!r}")
    out = []
    for dtype in dtypes:
        if dtype not in ops.DTYPES:
            raise ProfileError(f"unsupported profile dtype {dtype!r}; use one of {', '.join(ops.DTYPES)}")
        for tp in tps:
            try:
                pts = grids.points(model, tp, dtype, grid, attention)
            except ValueError as e:
                raise ProfileError(str(e)) from None
            out += [p for p in pts if p[0] in families]
    return out


def estimate_seconds(points: list[tuple[str, dict]], hardware_id: str, timing: TimingConfig) -> dict[str, float]:
    """A rough budget per family: roofline kernel time at 60% of peak FLOPs / 70% of HBM bandwidth,
    plus per-repeat overhead (launch, L2 flush) and per-point set-up (allocation, random init)."""
    if hardware_id == "cpu":
        peak, bw, overhead, setup = 50e9, 10e9, 5e-6, 2e-3  # one core, order of magnitude
    else:
        from sim.catalog import get_hardware

        hw = get_hardware(hardware_id)
        peak, bw = hw.peak_flops("bf16"), hw.mem_bw
        overhead = 20e-6 + (120e6 / bw if timing.flush_l2 else 0)
        setup = 1.5e-3
    out: dict[str, float] = {}
    for fam, key in points:
        flops, nbytes = grids.cost(fam, key)
        one = max(flops / (0.6 * peak), nbytes / (0.7 * bw)) + overhead
        reps = timing.warmup + max(timing.min_repeats, min(timing.repeats, int(timing.max_seconds / one)))
        out[fam] = out.get(fam, 0.0) + reps * one + setup + nbytes / (0.2 * bw)
    return out


def _build(fam: str, key: dict, device: torch.device, model, tp: int):
    if fam == "gemm":
        return ops.gemm(key, device)
    if fam == "attn_prefill":
        return ops.attn_prefill(key, device)
    if fam == "attn_decode":
        return ops.attn_decode_contiguous(key, device) if key["block_size"] == 0 else ops.attn_decode(key, device)
    if fam == "elementwise":
        from sim.cost.ops import shard_shapes

        sh = shard_shapes(model, tp)
        return ops.elementwise(key, device, {"head_dim": sh.head_dim, "vocab_shard": sh.vocab_shard})
    return ops.sampling(key, device)


ATTENTION_NOTES = {
    "paged": "attn_decode is a PyTorch paged-attention reference (block-table gather + GQA attention), "
             "not vLLM's fused kernel; a mixed batch pays for its longest context",
    "contiguous": "attn_decode is scaled_dot_product_attention over a contiguous [batch, kv_heads, context, "
                  "head_dim] cache (transformers' SDPA attention; block_size 0); a mixed batch is left-padded "
                  "to its longest context; the cache append is not timed",
}


def model_card_path(arg: str) -> str | None:
    """The absolute path of a model card given by file (recorded so ``fit`` finds it), else None."""
    p = Path(arg)
    return str(p.resolve()) if p.is_file() else None


def _load_meta(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run(device: str, model: str, tps: list[int], dtypes: list[str], grid: str = "small",
        out: str | Path = "calibration/profiles", hardware_id: str | None = None,
        families: tuple[str, ...] = FAMILIES, threads: int = 1, progress: bool = True,
        timing: TimingConfig | None = None, attention: str = "paged") -> Path:
    """Profile ``model`` at each tp and dtype on ``device``; returns the profile folder.
    ``attention``: the decode-attention variant timed (``kernels.ops.ATTENTION``)."""
    t_start = time.perf_counter()
    card, card_source = resolve_model(model)
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ProfileError(f"unknown operator families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    if device not in ("cpu", "cuda"):
        raise ProfileError(f"--device must be cuda or cpu, not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfileError("--device cuda but torch sees no CUDA GPU")
    grids.grid_spec(grid)
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    timing = timing or (GPU_TIMING if dev.type == "cuda" else CPU_TIMING)
    hardware_id = hardware_id or detect_hardware_id(dev)
    compute = plan(card, tps, dtypes, grid, tuple(f for f in families if f in COMPUTE), attention)
    folder = Path(out) / hardware_id / card.id
    folder.mkdir(parents=True, exist_ok=True)
    had = decode_attention(folder, default="")
    if "attn_decode" in families and had and had != attention:
        raise ProfileError(f"{folder} holds {had} decode-attention rows; profile --attention {attention} into "
                           "another --out (one profile holds one variant)")
    skipped: list[dict] = []
    coll: dict[int, list[dict]] = {}
    if "collective" in families:
        for ws in sorted({t for t in tps if t > 1}):
            have = torch.cuda.device_count() if dev.type == "cuda" else ws
            if have < ws:
                skipped.append({"family": "collective", "world_size": ws,
                                "reason": f"{have} GPU(s) visible, world_size {ws} needs {ws}; collectives "
                                          "cannot be measured on a single GPU and stay analytic (roofline) in the simulator"})
                continue
            coll[ws] = [k for d in dtypes for _, k in grids.collective_points(card, [ws], d, grid)]
        if not any(t > 1 for t in tps):
            skipped.append({"family": "collective", "reason": "no tp > 1 requested"})

    meta_path = folder / "meta.json"
    old = _load_meta(meta_path)
    clock_name, clock = ("cuda_events", None) if dev.type == "cuda" else cpu_clock(threads)
    load_start = host_load()
    flusher = L2Flusher(dev) if (dev.type == "cuda" and timing.flush_l2) else None
    meta = {
        "hardware_id": hardware_id, "model": card.id, "model_source": card_source,
        "model_card": model_card_path(model),
        **environment(dev),
        "dtypes": sorted(set(old.get("dtypes", [])) | set(dtypes)),
        "tp": sorted(set(old.get("tp", [])) | set(tps)),
        "grid": grid, "grid_spec": grids.grid_spec(grid),
        "timing": {**asdict(timing), "clock": clock_name}, "threads": threads if dev.type == "cpu" else None,
        "host_load": {"start": load_start},
        "l2_flush_bytes": flusher.nbytes if flusher else 0,
        "block_size": ops.BLOCK_SIZE if (had or attention) == "paged" else 0,
        "attention": had or attention,  # the rows' variant: a run of other families keeps it
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "skipped": skipped, "failed": [], "runs": old.get("runs", []), "complete": False,
        "notes": [
            "times in microseconds; median, p10, p90 of `repeats` timed repeats after warm-up",
            ATTENTION_NOTES[had or attention],
            "sampling is over the full vocabulary (engines gather logit shards before sampling)",
        ],
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")

    writers = {f: RowWriter(folder / f"{f}.csv", f) for f in families}
    todo = [(f, k) for f, k in compute if key_of(f, k) not in writers[f].done]
    coll = {ws: [k for k in pts if key_of("collective", k) not in writers["collective"].done]
            for ws, pts in coll.items()}
    coll = {ws: pts for ws, pts in coll.items() if pts}
    total = len(todo) + sum(len(p) for p in coll.values())
    bar = Progress(total, f"{hardware_id}/{card.id}", enabled=progress)
    added = 0
    spreads: dict[str, list[float]] = {}
    try:
        for fam, key in todo:
            try:
                fn = _build(fam, key, dev, card, key["tp"])
                stats = measure(fn, dev, timing, before=flusher, clock=clock)
                writers[fam].write({**key, **stats.row()})
                spreads.setdefault(fam, []).append(stats.spread)
                added += 1
            except (RuntimeError, torch.OutOfMemoryError) as e:  # keep an unattended campaign going
                meta["failed"].append({"family": fam, "key": key, "error": str(e).splitlines()[0][:200]})
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            finally:
                fn = None
            bar.update()
        if coll:
            from kernels.collectives import profile_collectives

            for ws, pts in coll.items():
                for row in profile_collectives(pts, ws, dev.type, timing, threads):
                    writers["collective"].write(row)
                    added += 1
                bar.update(len(pts))
    finally:
        bar.close()
        for w in writers.values():
            w.close()
        meta["rows"] = {f: len(read_rows(folder / f"{f}.csv")) for f in families}
        elapsed = round(time.perf_counter() - t_start, 2)
        meta["runs"] = meta["runs"] + [{"date": meta["date"], "rows_added": added, "elapsed_s": elapsed,
                                        "tp": tps, "dtypes": dtypes, "families": list(families)}]
        meta["elapsed_s"] = elapsed
        meta["complete"] = added == total
        meta["host_load"]["end"] = host_load()
        meta["spread"] = spread_summary(spreads, timing.target_spread)
        meta["warnings"] = profile_warnings(meta)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        for w in meta["warnings"]:
            print(f"kernels.profile: warning: {w}", file=sys.stderr)
    return folder


NOISY_FRACTION = 0.2
"""A profile is flagged when more than this fraction of its points kept a spread above target."""


def spread_summary(spreads: dict[str, list[float]], target: float) -> dict:
    """Per family (this run's points): how many, the median and p90 of (p90 - p10) / median, and
    how many stayed above ``target`` after the extra repeats."""
    out = {"target": target, "definition": "(time_us_p90 - time_us_p10) / time_us per point", "families": {}}
    for fam, xs in sorted(spreads.items()):
        out["families"][fam] = {"points": len(xs), "median": round(quantile(xs, 0.5), 4),
                                "p90": round(quantile(xs, 0.9), 4), "above_target": sum(x > target for x in xs)}
    return out


def profile_warnings(meta: dict) -> list[str]:
    """Warnings about a profile's meta: load that makes its timings doubtful, noisy points."""
    out = []
    clock = meta["timing"].get("clock", "perf_counter")
    for when in ("start", "end"):
        w = load_warning(meta["host_load"].get(when, {}), f"profile ({when})", clock)
        if w:
            out.append(w)
            break
    fams = meta.get("spread", {}).get("families", {})
    n = sum(f["points"] for f in fams.values())
    noisy = sum(f["above_target"] for f in fams.values())
    if n and noisy > NOISY_FRACTION * n:
        out.append(f"{noisy} of {n} points kept a spread (p90 - p10) / median above "
                   f"{meta['spread']['target']:.0%} after extra repeats: the machine was noisy")
    return out


def main_args(args: argparse.Namespace) -> int:
    """Run from parsed flags (``kernels.args``); ProfileError for bad input."""
    try:
        tps = _parse_list(args.tp, int)
    except ValueError:
        raise ProfileError(f"--tp takes integers separated by commas, not {args.tp!r}") from None
    dtypes, families = _parse_list(args.dtype), tuple(_parse_list(args.ops))
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.estimate:
        card, _ = resolve_model(args.model)
        hw = args.hardware_id or ("cpu" if args.device == "cpu" else detect_hardware_id(torch.device("cuda", 0)))
        timing = GPU_TIMING if args.device == "cuda" else CPU_TIMING
        pts = plan(card, tps, dtypes, args.grid, tuple(f for f in families if f in COMPUTE), args.attention)
        est = estimate_seconds(pts, hw, timing)
        for fam in COMPUTE:
            n = sum(1 for f, _ in pts if f == fam)
            if n:
                print(f"{fam:13s} {n:6d} points  ~{est[fam]:7.1f} s")
        print(f"{'total':13s} {len(pts):6d} points  ~{sum(est.values()):7.1f} s  ({hw}, {card.id}, tp {args.tp})")
        return 0
    t0 = time.perf_counter()
    folder = run(args.device, args.model, tps, dtypes, args.grid, args.out, args.hardware_id, families,
                 args.threads, progress=not args.no_progress, attention=args.attention)
    meta = _load_meta(folder / "meta.json")
    print(f"profiled {meta.get('model')} on {meta.get('hardware_id')} in {time.perf_counter() - t0:.1f} s -> {folder}"
          f" ({sum(meta.get('rows', {}).values())} rows, {len(meta.get('failed', []))} failed)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.profile", description=__doc__.splitlines()[0])
    kernels.args.add_arguments(p)
    args = p.parse_args(argv)
    try:
        return main_args(args)
    except ProfileError as e:
        print(f"kernels.profile: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
