"""``servesim validate-silicon``: replay aiconfigurator-core's measured serving runs
(``silicon_sample.csv``) as closed-loop benchmarks and report the error of the predicted TTFT and
TPOT by system, backend and concurrency (``sim.compare.silicon``; docs/kernel_database.md)."""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

COST_MODELS = {"roofline": ["roofline"], "kerneldb": ["kerneldb"], "both": ["roofline", "kerneldb"]}
CLIENT_NAMES = ("bench-serving", "fixed", "genai-perf", "steady")  # sim.compare.silicon.CLIENTS (not imported: keeps --help fast)
FRONTEND_MS = 20.0  # fitted on rows outside the README sample: docs/kernel_database.md


def _csv_list(s: str) -> list[str]:
    items = [x.strip() for x in s.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {s!r}")
    return items


MODES = ("agg", "disagg")


def _modes(s: str) -> list[str]:
    items = _csv_list(s)
    bad = [m for m in items if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mode {bad[0]!r} (known: {', '.join(MODES)})")
    return [m for m in MODES if m in items]


def register(sub) -> None:
    p = sub.add_parser("validate-silicon", help="score predictions against measured serving runs (kernel database extra)",
                       description="Replay the aggregated rows of aiconfigurator-core's silicon_sample.csv as closed-loop "
                                   "benchmarks (N concurrent clients, the benchmark client and server settings each row "
                                   "was measured with) and print the median and p90 absolute percentage error of TTFT "
                                   "and TPOT; --modes disagg replays the disaggregated rows as prefill and decode pools "
                                   "and reports them apart.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", type=_csv_list, help="comma-separated catalog ids or Hugging Face repos (default: all)")
    p.add_argument("--systems", type=_csv_list, help="comma-separated systems (h200_sxm or h200-sxm; default: all)")
    p.add_argument("--backends", type=_csv_list, help="comma-separated backends: vllm, sglang, trtllm (default: all)")
    p.add_argument("--modes", type=_modes, default=["agg"],
                   help="comma-separated: agg (aggregated rows), disagg (disaggregated rows, replayed as prefill and "
                        "decode pools and reported apart: no fit used them)")
    p.add_argument("--limit", type=int, help="replay the first N selected rows")
    p.add_argument("--cost-model", choices=sorted(COST_MODELS), default="both", help="which cost model(s) to score")
    p.add_argument("--client", choices=["auto", *CLIENT_NAMES], default="auto",
                   help="benchmark client: auto (from each row's provenance; docs/kernel_database.md), bench-serving "
                        "(InferenceMAX's benchmark_serving.py), fixed (fixed lengths, 10N requests), genai-perf "
                        "(fixed, with a 2N warm-up not scored) or steady")
    p.add_argument("--frontend-ms", type=float, default=FRONTEND_MS,
                   help="serving front end's round trip (HTTP, tokenisation, streaming): added to TTFT, and the mean "
                        "exponential gap between a response and the client's next request")
    p.add_argument("--rounds", type=int, default=4,
                   help="requests replayed per client (burst, steady waves, drain; the steady ones stand for the rest)")
    p.add_argument("--ramp", choices=["none", "request"], default="none",
                   help="client start: all at t=0 (as the benchmarks do), or staggered over one predicted request")
    p.add_argument("--sample", type=int, help="replay a random sample of N selected rows (seeded, reproducible)")
    p.add_argument("--max-tokens", type=int,
                   help="skip rows whose replay would generate more than N output tokens (rounds x clients x output "
                        "length), counted as skipped by that reason (default: no limit)")
    p.add_argument("--workers", type=int, default=1, help="parallel processes")
    p.add_argument("--out", default="results/validate_silicon", help="output folder")
    p.add_argument("--no-plots", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd

    from sim.compare import silicon
    from sim.cost import kerneldb_data as kd
    from sim.errors import ConfigError

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    if args.rounds < 1:
        raise ConfigError("--rounds must be at least 1")
    if args.sample is not None and args.sample < 1:
        raise ConfigError("--sample must be at least 1")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError("--max-tokens must be at least 1")
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    if not 0 <= args.frontend_ms <= 10_000:
        raise ConfigError("--frontend-ms must be between 0 and 10000")
    bad = [b for b in args.backends or [] if b not in kd.FRAMEWORKS]
    if bad:
        raise ConfigError(f"unknown backend {bad[0]!r} (known: {', '.join(kd.FRAMEWORKS)})")
    try:
        path = silicon.csv_path()
    except kd.KernelDbUnavailable as e:
        raise ConfigError(str(e)) from None
    df = pd.read_csv(path)
    known_sys = set(df["system"]) | {silicon.HARDWARE.get(s) for s in df["system"]} - {None}
    bad = [s for s in args.systems or [] if s not in known_sys]
    if bad:
        raise ConfigError(f"unknown system {bad[0]!r} (in the csv: {', '.join(sorted(set(df['system'])))})")
    selected = {m: silicon.select(df, models=args.models, systems=args.systems, backends=args.backends,
                                  mode=m, limit=args.limit) for m in args.modes}
    if not any(len(r) for r, _ in selected.values()):
        skipped = sum((s for _, s in selected.values()), Counter())
        if not skipped:
            raise ConfigError("no row of the csv matches the filters (models, systems, backends, mode: see "
                              "servesim validate-silicon --help; --models takes catalog ids such as llama-3.1-8b "
                              "or the csv's Hugging Face repos such as meta-llama/Llama-3.1-70B)")
        raise ConfigError("every row of the csv that matches the filters was skipped: "
                          + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    if args.sample is not None:
        selected = {m: (r.sample(args.sample, random_state=0).sort_index().reset_index(drop=True)
                        if args.sample < len(r) else r, s) for m, (r, s) in selected.items()}
    if args.max_tokens is not None:
        selected = {m: _within(silicon, r, s, args) for m, (r, s) in selected.items()}
        if not any(len(r) for r, _ in selected.values()):
            raise ConfigError("every row of the csv that matches the filters was skipped: "
                              + "; ".join(f"{k}: {v}" for _, s in selected.values() for k, v in s.items()))
    models = COST_MODELS[args.cost_model]
    tasks = [(r.to_dict(), cm, args.rounds, (), args.ramp, args.client, args.frontend_ms / 1e3)
             for rows, _ in selected.values() for _, r in rows.iterrows() for cm in models]
    results = iter(_map(silicon.replay, tasks, args.workers, not args.quiet))
    summary = {"csv": f"aiconfigurator-core {kd.package_version()} systems/silicon_sample.csv",
               "filters": {"models": args.models, "systems": args.systems, "backends": args.backends,
                           "mode": ",".join(args.modes), "limit": args.limit},
               "rounds": args.rounds, "ramp": args.ramp, "client": args.client, "frontend_ms": args.frontend_ms,
               "sample": args.sample}
    frames = []
    dest = Path(args.out)
    for mode, (rows, skipped) in selected.items():
        if not len(rows):
            print(f"\nno {mode} row to replay: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
            summary.update({} if mode == "agg" else {"disagg": {"rows_selected": 0, "skipped": dict(skipped)}})
            continue
        n = len(rows) * len(models)
        mode_tasks = tasks[:n]
        tasks = tasks[n:]
        mode_results = [next(results) for _ in range(n)]
        report = _report_agg if mode == "agg" else _report_disagg
        out, block = report(silicon, rows, skipped, models, mode_tasks, mode_results, args)
        frames.append(out)
        summary.update(block) if mode == "agg" else summary.__setitem__("disagg", block)
    dest.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_parquet(dest / "predictions.parquet", index=False)
    (dest / "summary.json").write_text(json.dumps(summary, indent=2))
    scored = pd.concat([f.dropna(subset=[f"{cm}_tpot_ms" for cm in models]) for f in frames], ignore_index=True)
    if not args.no_plots and len(scored):
        silicon.plot(scored, models, dest)
    print(f"\nresults written to {dest}/ (predictions.parquet, summary.json"
          f"{'' if args.no_plots else ', predicted_vs_measured.png/.svg'})")
    return 0


def _within(silicon, rows, skipped: Counter, args):
    """The rows whose replay generates at most ``--max-tokens`` output tokens (rounds, as the
    client caps them, x clients x output length), the others counted as skipped."""
    if not len(rows):
        return rows, skipped
    tokens = [min(args.rounds, silicon.client_for(r, args.client).per_client) * int(r["concurrency"]) * int(r["osl"])
              for _, r in rows.iterrows()]
    keep = [t <= args.max_tokens for t in tokens]
    over = len(keep) - sum(keep)
    if over:
        skipped = skipped + Counter({f"larger than this run's budget (--max-tokens {args.max_tokens}: rounds x "
                                     "clients x output length)": over})
    return rows[keep].reset_index(drop=True), skipped


def _errors(tasks, results) -> Counter:
    errors: Counter = Counter()
    for task, res in zip(tasks, results):
        if "error" in res:
            errors[f"{task[1]}: {res['error']}"] += 1
    return errors


def _predictions(silicon, rows, models, tasks, results, args, extra) -> tuple:
    """(the rows with each cost model's predicted TTFT and TPOT and the columns a predictions
    file keeps, ``extra`` after the parallelism ones; those of them every cost model scored)."""
    out = rows.assign(bucket=rows["concurrency"].map(silicon.bucket),
                      client=[silicon.client_for(r, args.client).name for _, r in rows.iterrows()],
                      fitted_by=silicon.fitted_by(rows["id"]))
    for cm in models:
        res = [r for task, r in zip(tasks, results) if task[1] == cm]
        out[f"{cm}_ttft_ms"] = [r.get("ttft_ms") for r in res]
        out[f"{cm}_tpot_ms"] = [r.get("tpot_ms") for r in res]
    keep = ["id", "model_path", "model", "system", "hardware", "backend", "backend_version", "precision", "dtype",
            "mode", "isl", "osl", "concurrency", "bucket", "tp", "ep", "dp", *extra, "speculative", "client",
            "fitted_by", "silicon_ttft_ms", "silicon_tpot_ms"]
    out = out[keep + [c for c in out.columns if c.startswith(tuple(models))]]
    return out, out.dropna(subset=[f"{cm}_tpot_ms" for cm in models])


def _report_agg(silicon, rows, skipped, models, tasks, results, args):
    """The aggregated rows' tables (printed) and summary.json keys."""
    errors = _errors(tasks, results)
    out, scored = _predictions(silicon, rows, models, tasks, results, args, ())
    held = scored["fitted_by"] == ""
    scores = silicon.score(scored, models)
    held_scores, fitted_scores = silicon.score(scored[held], models), silicon.score(scored[~held], models)
    fit_info = silicon.fits()
    print(f"headline: the {int(held.sum())} rows no fit touched (held out); {int((~held).sum())} rows used by a fit "
          f"follow ({'; '.join(f'{k}: {v}' for k, v in scored.loc[~held, 'fitted_by'].value_counts().items()) or 'none'})."
          f"\nEvery row: {fit_info['replay_settings']}.")
    silicon.print_table(held_scores, "held out")
    silicon.print_table(fitted_scores, "used by a fit")
    silicon.print_table(scores, "all rows", overall_only=True)
    spec_scores = {}
    for kind, what in silicon.MTP_KINDS.items():  # InferenceMAX's DeepSeek-R1 TRT-LLM rows, apart
        part = scored[held & (scored["speculative"] == kind)]
        if len(part):
            spec_scores[kind] = silicon.score(part, models)
            silicon.print_table(spec_scores[kind], f"held out, {what}", overall_only=True)
    skipped_all = dict(skipped) | {f"not simulated ({k})": v for k, v in errors.items()}
    if skipped_all:
        print("\nskipped rows by reason:")
        for k, v in sorted(skipped_all.items(), key=lambda kv: -kv[1]):
            print(f"  {v:>5}  {k}")
    summary = {"rows_selected": int(len(rows)), "rows_scored": int(len(scored)),
               "skipped": skipped_all,
               "headline": {"rows": "held out: no fit used them", "scores": held_scores},
               "fits": {"replay_settings": fit_info["replay_settings"],
                        "rows_held_out": int(held.sum()), "rows_used_by_a_fit": int((~held).sum()),
                        **{k: {"what": f["what"], "rows_scored": int(scored["fitted_by"].str.contains(k).sum())}
                           for k, f in fit_info["fits"].items()}},
               "scores_held_out": held_scores, "scores_fitted": fitted_scores, "scores": scores,
               "scores_held_out_by_speculation": {"source": silicon.MTP_SOURCE, **spec_scores}}
    return out, summary


DISAGG_KEEP = ("p_workers", "p_tp", "p_ep", "p_dp", "d_workers", "d_tp", "d_ep", "d_dp")


def _report_disagg(silicon, rows, skipped, models, tasks, results, args):
    """The disaggregated rows' tables (printed apart from the aggregated ones) and summary.json's
    ``disagg`` block."""
    errors = _errors(tasks, results)
    out, scored = _predictions(silicon, rows, models, tasks, results, args, DISAGG_KEEP)
    touched = int((scored["fitted_by"] != "").sum())
    scores = silicon.score_disagg(scored, models)
    print(f"\ndisaggregated rows: {len(scored)} replayed as a prefill pool and a decode pool (workers x tp, ep, dp "
          f"of each side), {touched} used by a fit (no fit reads a disaggregated row); the client's first token "
          f"streams from the decode worker ({silicon.STREAMED_FROM_DECODE}).")
    silicon.print_disagg(scores)
    skipped_all = dict(skipped) | {f"not simulated ({k})": v for k, v in errors.items()}
    if skipped_all:
        print("\nskipped disaggregated rows by reason:")
        for k, v in sorted(skipped_all.items(), key=lambda kv: -kv[1]):
            print(f"  {v:>5}  {k}")
    return out, {"rows_selected": int(len(rows)), "rows_scored": int(len(scored)), "rows_used_by_a_fit": touched,
                 "skipped": skipped_all, "first_token": silicon.STREAMED_FROM_DECODE,
                 "targets": {"tpot_ape_median": 0.12, "ttft_ape_median": 0.20}, "scores": scores}


def _map(fn, tasks, workers: int, progress: bool):
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), unit="run", desc="replaying", disable=not progress, mininterval=0.5)
    try:
        if workers == 1:
            out = []
            for t in tasks:
                out.append(fn(t))
                bar.update()
            return out
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as ex:
            out = []
            for r in ex.map(fn, tasks, chunksize=1):
                out.append(r)
                bar.update()
            return out
    finally:
        bar.close()
