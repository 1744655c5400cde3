"""Compare servesim's predictions with published kernel and serving measurements that are NOT in
the aiconfigurator-core kernel database (docs/published.md).

Reads ``experiments/published/measurements.csv`` (one measurement per row, each with its source
and conditions) and predicts every row with the ``roofline`` and ``kerneldb`` cost models:

- kernel rows call the cost model directly, one operator of one GPU:
  ``attention_prefill`` (``attn_prefill`` of a batch of whole causal sequences; measured TFLOPS
  use FlashAttention's FLOP count, 2 * batch * heads * head_dim * seq^2 for a causal pass),
  ``gemm`` (``gemm`` of an [m, k] x [k, n] product: the host model's ``gate_up`` shape is replaced
  by (n, k) on a throw-away cost model; block-FP8 rows use the database's ``fp8_block`` table,
  which no config dtype reaches yet, and the roofline's fp8 peak) and ``all_reduce``
  (``collective`` / ``all_reduce`` of the message; bus bandwidth = bytes x 2 (n-1)/n / time);
- serving rows simulate the source's benchmark: ``offline_throughput`` = every request sent at
  t = 0 (``trtllm-bench throughput``), output tokens / makespan; ``ttft`` / ``tpot`` = closed-loop
  clients at the row's concurrency, three requests each, the first and last wave not scored
  (as ``servesim validate-silicon``); ``e2e_latency`` = one batch of N requests sent together
  (``benchmark_latency``), mean end-to-end latency. Scheduler ``vllm_v1``, fixed ISL/OSL.

Writes ``predictions.csv``, ``summary.json`` (median APE per kind and per operator, per cost
model) and ``predicted_vs_measured.png/.svg`` under ``--out``.

    PYTHONPATH=. python experiments/compare_published.py --out results/published
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE / "published" / "measurements.csv"
COLUMNS = ("id", "kind", "op", "model", "hardware", "tp", "dtype", "framework", "shape", "metric", "unit", "value",
           "source", "conditions")
KINDS = {"kernel": ("attention_prefill", "gemm", "all_reduce"),
         "serving": ("offline_throughput", "ttft", "tpot", "e2e_latency")}
UNITS = {"attention_prefill": ("TFLOPS",), "gemm": ("us", "TFLOPS"), "all_reduce": ("GB/s",),
         "offline_throughput": ("tok/s",), "ttft": ("ms",), "tpot": ("ms",), "e2e_latency": ("ms",)}
HOST_MODEL = "llama-3.1-8b"  # the cost model a GEMM row is priced on (only its hardware and dtype matter)
COST_MODELS = ("roofline", "kerneldb")


def load_rows(path: Path = CSV) -> list[dict]:
    """The measurements, with ``tp`` as int, ``value`` as float and ``shape`` parsed to ``params``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["tp"] = int(r["tp"])
        r["value"] = float(r["value"])
        r["params"] = {k: float(v) for k, v in (kv.split("=", 1) for kv in r["shape"].split(";") if kv)}
    return rows


def check_rows(rows: list[dict]) -> list[str]:
    """Schema problems, one line each (empty: the file is valid)."""
    bad = []
    ids = set()
    for i, r in enumerate(rows, start=2):  # line 1 is the header
        where = f"line {i} ({r.get('id')})"
        if r["id"] in ids:
            bad.append(f"{where}: id repeats")
        ids.add(r["id"])
        if r["kind"] not in KINDS or r["op"] not in KINDS[r["kind"]]:
            bad.append(f"{where}: kind/op {r['kind']}/{r['op']} unknown")
            continue
        if r["unit"] not in UNITS[r["op"]]:
            bad.append(f"{where}: unit {r['unit']!r} not one of {UNITS[r['op']]} for {r['op']}")
        if not r["source"].strip() or not r["conditions"].strip():
            bad.append(f"{where}: source and conditions are required")
        if not (r["value"] > 0 and math.isfinite(r["value"])):
            bad.append(f"{where}: value must be positive")
        if r["kind"] == "serving" and not r["model"]:
            bad.append(f"{where}: a serving row needs a model")
    return bad


# ---------------------------------------------------------------------------------- kernels
@lru_cache(maxsize=None)
def cost_model(name: str, model: str, hardware: str, tp: int, dtype: str, framework: str):
    """A cost model of one (model, GPU, TP, weight dtype); ``fp8_block`` is fp8 with the block table."""
    from sim.catalog import get_hardware, get_model
    from sim.cost.roofline import RooflineCostModel

    card, hw = get_model(model), get_hardware(hardware)
    base = "fp8" if dtype == "fp8_block" else dtype
    if name == "roofline":
        return RooflineCostModel(card, hw, tp=tp, dtype=base)
    from sim.cost import kerneldb_data as kd
    from sim.cost.kerneldb import Grid, load_kerneldb_cost_model

    cm = load_kerneldb_cost_model(card, hw, framework=framework, tp=tp, dtype=base)
    if dtype == "fp8_block":  # the config has no fp8_block weight dtype: add the database's block-FP8 table
        arrays = kd.load(cm.system, framework, cm.version)
        if "gemm|fp8_block|t" not in arrays:
            raise kd.KernelDbUnavailable(f"no fp8_block GEMMs for {cm.system} {framework} {cm.version}")
        cm._gemms["fp8_block"] = Grid([arrays[f"gemm|fp8_block|{a}"] for a in "mnk"], arrays["gemm|fp8_block|t"])
        cm.gemm_dtype = "fp8_block"
    return cm


def gemm_seconds(cm, m: int, n: int, k: int) -> float:
    """``cm.gemm`` of an [m, k] x [k, n] product in the model's weight dtype (the ``gate_up`` shape
    swapped for (n, k); the cost model is a cached throw-away used for nothing else)."""
    cm.shapes = replace(cm.shapes, gemms={**cm.shapes.gemms, "gate_up": (n, k)})
    return cm.gemm("gate_up", m)


def predict_kernel(r: dict, name: str) -> float:
    p, op = r["params"], r["op"]
    if op == "attention_prefill":
        cm = cost_model(name, r["model"], r["hardware"], r["tp"], r["dtype"], r["framework"])
        b, s = int(p["batch"]), int(p["seq"])
        if (cm.shapes.q_heads, cm.shapes.head_dim) != (p["heads"], p["head_dim"]):
            raise ValueError(f"{r['model']} at tp {r['tp']} has {cm.shapes.q_heads} heads of {cm.shapes.head_dim} "
                             f"per GPU, the row {p['heads']:.0f} of {p['head_dim']:.0f}")
        t = cm.attn_prefill([(s, 0)] * b)
        return 2.0 * b * p["heads"] * p["head_dim"] * s * s / t / 1e12
    if op == "gemm":
        cm = cost_model(name, HOST_MODEL, r["hardware"], 1, r["dtype"], r["framework"])
        m, n, k = (int(p[x]) for x in "mnk")
        t = gemm_seconds(cm, m, n, k)
        return t * 1e6 if r["unit"] == "us" else 2.0 * m * n * k / t / 1e12
    if op == "all_reduce":
        g = int(p["gpus"])
        host = r["model"] or "llama-3.1-70b"  # any model whose heads split over g GPUs
        cm = cost_model(name, host, r["hardware"], g, "bf16", r["framework"])
        nbytes = p["bytes"]
        t = cm.collective("all_reduce", nbytes, g) if name == "roofline" else cm.all_reduce(int(nbytes // 2))
        return nbytes * 2.0 * (g - 1) / g / t / 1e9
    raise ValueError(op)


# ---------------------------------------------------------------------------------- serving
def serving_config(r: dict, name: str, clients: int, requests: int) -> dict:
    p = r["params"]
    return {
        "model": r["model"], "hardware": r["hardware"], "dtype": r["dtype"], "parallelism": {"tp": r["tp"]},
        "scheduler": {"name": "vllm_v1", "max_num_seqs": max(256, clients) if r["op"] != "offline_throughput" else 2048,
                      "max_num_batched_tokens": 8192},
        "kv": {"gpu_memory_utilization": 0.95 if r["op"] == "offline_throughput" else 0.9},
        "workload": {"num_requests": requests, "prompt": {"kind": "fixed", "value": int(p["isl"])},
                     "output": {"kind": "fixed", "value": int(p["osl"])},
                     "closed_loop": {"clients": clients, "think_time_s": 0.0, "think": "fixed"}},
        "cost": {"model": name, "framework": r["framework"]},
        "output": {"plots": False, "progress": False, "step_records": False},
        "seed": 0,
    }


def predict_serving(r: dict, name: str, max_requests: int, overrides: tuple = (), ramp: str = "none") -> float:
    from sim.api import simulate

    p, op = r["params"], r["op"]
    sim = lambda cfg: simulate(cfg, overrides=list(overrides), plots=False, progress=False)  # noqa: E731
    if op == "offline_throughput":
        n = int(min(p["requests"], max_requests))
        res = sim(serving_config(r, name, n, n))
        req = res.requests[res.requests["status"] == "finished"]
        return float(req["output_tokens"].sum() / req["finish_s"].max())
    if op == "e2e_latency":
        n = int(p["batch"])
        return float(sim(serving_config(r, name, n, n)).requests["e2e_s"].mean() * 1e3)
    key = (name, r["model"], r["hardware"], r["tp"], r["dtype"], r["framework"], r["shape"], overrides, ramp)
    if key not in _CLOSED_LOOP:  # ttft / tpot: one closed-loop run answers both
        c = int(p["concurrency"])  # 3 waves of c clients, the middle one scored

        def middle(cfg):
            req = sim(cfg).requests
            req = req[req["status"] == "finished"]
            return req[(req["request_id"] >= c) & (req["request_id"] < 2 * c)]

        cfg = serving_config(r, name, c, 3 * c)
        req = middle(cfg)
        if ramp == "request":  # client i starts i/c of one request's duration late (the least bunched start)
            cfg["workload"]["closed_loop"]["ramp_up_s"] = float(req["e2e_s"].mean())
            req = middle(cfg)
        _CLOSED_LOOP[key] = {"ttft": float(req["ttft_s"].mean() * 1e3), "tpot": float(req["tpot_s"].mean() * 1e3)}
    return _CLOSED_LOOP[key][op]


_CLOSED_LOOP: dict = {}


def predict(r: dict, name: str, max_requests: int, overrides: tuple = (), ramp: str = "none") -> float:
    if r["kind"] == "kernel":
        return predict_kernel(r, name)
    return predict_serving(r, name, max_requests, overrides, ramp)


# ---------------------------------------------------------------------------------- report
def run(rows: list[dict], models: list[str], max_requests: int, log=print, overrides: tuple = (),
        ramp: str = "none") -> list[dict]:
    out = []
    t_all = time.perf_counter()
    for i, r in enumerate(rows, start=1):
        rec = {k: r[k] for k in COLUMNS if k not in ("value", "source", "conditions")}
        rec["measured"] = r["value"]
        t0 = time.perf_counter()
        for name in models:
            try:
                pred = predict(r, name, max_requests, overrides, ramp)
                rec[f"{name}_predicted"], rec[f"{name}_ratio"] = pred, pred / rec["measured"]
            except Exception as e:  # noqa: BLE001 - a row that cannot be priced is reported, not fatal
                rec[f"{name}_predicted"] = rec[f"{name}_ratio"] = float("nan")
                rec[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rec["source"] = r["source"]
        out.append(rec)
        ratios = "  ".join(f"{n} {rec[f'{n}_ratio']:.2f}" for n in models)
        log(f"[{i}/{len(rows)}] {r['id']:<48} {ratios}   ({time.perf_counter() - t0:.1f} s, "
            f"{time.perf_counter() - t_all:.0f} s total)")
    return out


def ape(rec: dict, name: str) -> float:
    return abs(rec[f"{name}_ratio"] - 1.0)


def summarize(recs: list[dict], models: list[str]) -> dict:
    import numpy as np

    def stats(group):
        d = {"rows": len(group)}
        for n in models:
            ok = [g for g in group if math.isfinite(g[f"{n}_ratio"])]
            d[n] = {"priced": len(ok),
                    "ape_median": float(np.median([ape(g, n) for g in ok])) if ok else None,
                    "ratio_median": float(np.median([g[f"{n}_ratio"] for g in ok])) if ok else None}
        return d

    out = {"by_kind": {}, "by_op": {}}
    for kind in KINDS:
        g = [r for r in recs if r["kind"] == kind]
        if g:
            out["by_kind"][kind] = stats(g)
    for op in sorted({r["op"] for r in recs}):
        out["by_op"][op] = stats([r for r in recs if r["op"] == op])
    out["all"] = stats(recs)
    return out


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def print_table(recs: list[dict], summary: dict, models: list[str]) -> None:
    head = f"{'id':<48}{'unit':>7}{'measured':>11}" + "".join(f"{n:>12}{'ratio':>7}" for n in models)
    print("\n" + head)
    for r in recs:
        print(f"{r['id']:<48}{r['unit']:>7}{_fmt(r['measured']):>11}"
              + "".join(f"{_fmt(r[f'{n}_predicted']):>12}{r[f'{n}_ratio']:>7.2f}" for n in models))
    print("\nmedian absolute percentage error (median predicted/measured)")
    for label, groups in (("kind", summary["by_kind"]), ("op", summary["by_op"])):
        for key, s in groups.items():
            cells = "  ".join(
                f"{n} {100 * s[n]['ape_median']:.0f}% ({s[n]['ratio_median']:.2f}, {s[n]['priced']} rows)"
                if s[n]["ape_median"] is not None else f"{n} -" for n in models)
            print(f"  {label} {key:<20} n={s['rows']:<3} {cells}")
    errs = [(r["id"], n, r[f"{n}_error"]) for r in recs for n in models if f"{n}_error" in r]
    for rid, n, e in errs:
        print(f"  not priced: {rid} ({n}): {e}")


def plot(recs: list[dict], models: list[str], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for kind in KINDS for op in KINDS[kind] if any(r["op"] == op for r in recs)]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    colors = {"roofline": "tab:orange", "kerneldb": "tab:blue"}
    x = 0
    ticks = []
    for op in ops:
        group = [r for r in recs if r["op"] == op]
        xs = list(range(x, x + len(group)))
        for j, n in enumerate(models):
            ax.scatter([v + (j - 0.5) * 0.25 for v in xs], [r[f"{n}_ratio"] for r in group], s=14,
                       color=colors.get(n), label=n if op == ops[0] else None)
        ticks.append(((xs[0] + xs[-1]) / 2, f"{op}\n({len(group)})"))
        x += len(group) + 2
        ax.axvline(x - 1, color="0.85", lw=0.8)
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks([t for t, _ in ticks], [s for _, s in ticks], fontsize=8)
    ax.set_ylabel("predicted / measured")
    ax.set_title("servesim vs published measurements outside the kernel database")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from sim.metrics.plots import save

    paths = [Path(f) for f in save(fig, out, "predicted_vs_measured")]
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=CSV, help="measurements file (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=Path("results/published"), help="output folder")
    ap.add_argument("--cost-models", default=",".join(COST_MODELS), help="comma list (default: %(default)s)")
    ap.add_argument("--ids", default="", help="only rows whose id contains one of these comma-separated strings")
    ap.add_argument("--max-requests", type=int, default=500, help=(
        "offline-throughput rows simulate at most this many of the source's requests (default %(default)s; "
        "the source's count when it is smaller)"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=(
        "config override for every serving row (repeatable), e.g. kv.dtype=fp8"))
    ap.add_argument("--ramp", choices=("none", "request"), default="none", help=(
        "closed-loop rows: all clients start at t = 0 (none, as validate-silicon's default) or client i "
        "i/N of one request's duration late (request)"))
    args = ap.parse_args(argv)

    rows = load_rows(args.csv)
    bad = check_rows(rows)
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 2
    if args.ids:
        keys = [s for s in args.ids.split(",") if s]
        rows = [r for r in rows if any(s in r["id"] for s in keys)]
    models = [m for m in args.cost_models.split(",") if m]
    if "kerneldb" in models:
        from sim.cost.kerneldb_data import package_root

        if package_root() is None:
            print("kerneldb: aiconfigurator-core is not installed (pip install -e '.[kernels-db]'); roofline only")
            models = [m for m in models if m != "kerneldb"]
    print(f"{len(rows)} measurements x {len(models)} cost models ({', '.join(models)})", flush=True)
    recs = run(rows, models, args.max_requests, log=lambda s: print(s, flush=True), overrides=tuple(args.overrides),
               ramp=args.ramp)
    summary = summarize(recs, models)
    print_table(recs, summary, models)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in recs for k in r))
    with open(args.out / "predictions.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(recs)
    (args.out / "summary.json").write_text(json.dumps({"cost_models": models, "max_requests": args.max_requests,
                                                       "overrides": args.overrides, "ramp": args.ramp,
                                                       "csv": str(args.csv.name), **summary}, indent=2))
    paths = plot(recs, models, args.out)
    print(f"\nwrote {args.out / 'predictions.csv'}, {args.out / 'summary.json'}, {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
