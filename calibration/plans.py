"""Step plans of a simulation, as a JSON file the real replay executes (docs/calibration.md).

A plan file holds the requests (arrival, prompt and output tokens) and, per engine step, the
scheduled request ids with their new tokens and context lengths (``BatchShape``) and the step
time the simulator predicted. Reading it and recomputing request timelines needs only the
standard library, so the GPU machine (no simpy / pydantic / pandas) replays plans made here:

    python -m calibration.plans --model llama-3.1-8b --hardware h200-sxm \\
        --out calibration/plans/llama-3.1-8b_h200.json

``make_plans`` runs the simulator (``Engine(record_plans=True)``), so it needs the full install.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.lifecycle import emits_token  # standard library only: runs on the bare GPU machine

# Small synthetic workloads for the replay: (overrides) by model size. Lengths stay inside the
# profiled grids where possible (whole prompts <= max_num_batched_tokens, decode contexts >= 128).
CPU_WORKLOAD = [
    "workload.num_requests=40", "workload.rate=40", "workload.arrival=poisson",
    "workload.prompt.kind=uniform", "workload.prompt.min=128", "workload.prompt.max=250",
    "workload.output.kind=uniform", "workload.output.min=4", "workload.output.max=40",
    "scheduler.max_num_batched_tokens=256", "scheduler.max_num_seqs=16",
]
GPU_WORKLOAD = [
    "workload.num_requests=24", "workload.rate=12", "workload.arrival=poisson",
    "workload.prompt.kind=uniform", "workload.prompt.min=128", "workload.prompt.max=2048",
    "workload.output.kind=uniform", "workload.output.min=16", "workload.output.max=64",
    "scheduler.max_num_batched_tokens=2048", "scheduler.max_num_seqs=64",
]


def make_plans(model: str, hardware: str, overrides: list[str] | None = None, profiles_dir: str | None = None,
               seed: int = 0) -> dict:
    """Simulate and return the plan document (requires the simulator's dependencies)."""
    from sim.config import load_config
    from sim.engine import Engine

    sets = [f"model={model}", f"hardware={hardware}", f"seed={seed}", "output.plots=false", "output.progress=false"]
    if profiles_dir:
        sets.append(f"cost.profiles_dir={profiles_dir}")
    cfg = load_config(None, sets + list(overrides or []))
    if cfg.cluster.replicas != 1:
        raise ValueError("plans are recorded for one replica")
    eng = Engine(cfg, record_plans=True)
    out = eng.run()
    from sim.metrics.records import requests_frame

    req = requests_frame(out)
    req = req[req["first_scheduled_s"].notna()]
    reqs = {str(i): [a, p, o] for i, a, p, o in zip(req["request_id"].tolist(), req["arrival_s"].tolist(),
                                                     req["prompt_tokens"].tolist(), req["output_tokens"].tolist())}
    steps = []
    for (_rep, start, ids, shape), dur in zip(eng.plans, out.steps.duration_s):
        steps.append({"start_s": start, "ids": list(ids), "new": list(shape.new_tokens),
                      "ctx": list(shape.context_lens), "predicted_s": dur})
    return {"model": eng.model.id, "hardware": eng.hw.id, "dtype": cfg.dtype, "block_size": cfg.kv.block_size,
            "tp": cfg.parallelism.tp, "cost_source": out.cost_source, "out_of_range_queries": out.out_of_range,
            "overrides": sets[3:] + list(overrides or []), "requests": reqs, "steps": steps}


def save(doc: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return path


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def token_times(doc: dict, durations: list[float]) -> dict[str, list[float]]:
    """Output-token times of every request when the plan's steps take ``durations``.

    Steps run back to back in plan order; a step never starts before the arrival of the requests
    it schedules for the first time (the simulator's idle waits are exactly such waits). A
    request emits a token at the end of a step after which its computed tokens reach prompt +
    generated tokens (the engine's rule, ``sim.lifecycle.emits_token``; recompute preemption
    restarts from context 0)."""
    reqs = doc["requests"]
    seen: set[str] = set()
    generated: dict[str, int] = {}
    times: dict[str, list[float]] = {}
    end = 0.0
    for step, d in zip(doc["steps"], durations):
        release = max((reqs[str(i)][0] for i in step["ids"] if str(i) not in seen), default=0.0)
        start = max(end, release)
        end = start + d
        for i, n, c in zip(step["ids"], step["new"], step["ctx"]):
            i = str(i)
            seen.add(i)
            g = generated.get(i, 0)
            if emits_token(c + n, reqs[i][1], g):
                generated[i] = g + 1
                times.setdefault(i, []).append(end)
    return times


def request_metrics(doc: dict, durations: list[float]) -> dict[str, tuple[float, float | None]]:
    """Per request (TTFT, TPOT) along the plan with the given step durations."""
    out = {}
    for i, ts in token_times(doc, durations).items():
        arrival = doc["requests"][i][0]
        tpot = (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else None
        out[i] = (ts[0] - arrival, tpot)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.plans", description="Record a simulation's step plans.")
    p.add_argument("--model", required=True)
    p.add_argument("--hardware", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--profiles-dir", default=None, help="fitted root (default: shipped tables or roofline)")
    p.add_argument("--gpu-workload", action="store_true", help="the GPU replay workload (default for non-cpu hardware)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", dest="sets", action="append", default=[])
    a = p.parse_args(argv)
    gpu = a.gpu_workload or "cpu" not in Path(a.hardware).stem
    doc = make_plans(a.model, a.hardware, (GPU_WORKLOAD if gpu else CPU_WORKLOAD) + a.sets, a.profiles_dir, a.seed)
    save(doc, a.out)
    print(f"{len(doc['steps'])} steps of {len(doc['requests'])} requests ({doc['cost_source']}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
