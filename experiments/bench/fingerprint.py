"""Fingerprint of simulation results: a hash of the request rows, step rows and summary of a
fixed set of small configurations that together reach every engine path (every scheduler, the
decode runs and flows, tight pools with recompute and swap, prefix caching, several replicas
under each router, crashes and stragglers, closed loops, disaggregation, autoscaling, a public
trace, streaming, the kernel database and the roofline).

    python experiments/bench/fingerprint.py                 # print one hash per configuration
    python experiments/bench/fingerprint.py --check FILE    # compare with a saved listing (exit 1 on a change)
    python experiments/bench/fingerprint.py --save FILE     # write the listing
    python experiments/bench/fingerprint.py --no-fast-forward   # the same with every fast path off

A refactor of the engine must leave every hash unchanged (and the hashes with fast paths off
equal to those with them on, which ``tests/test_fast_forward.py`` also checks on random
configurations). A change that moves a figure on purpose says which hashes moved and why.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout this script is in, whatever is installed
from sim import simulate  # noqa: E402

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SCHEDULERS = ("vllm_v1", "vllm", "sarathi", "orca", "static", "priority", "sjf", "srpt", "lookahead", "trtllm")
_BASE = {"cost": {"model": "roofline"}, "workload": {"rate": 14, "num_requests": 400}, "output": {"plots": False}}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def configs() -> dict[str, dict]:
    """The named configurations (small: the whole set runs in about a minute)."""
    c: dict[str, dict] = {}
    for s in SCHEDULERS:
        c[f"sched-{s}"] = {"scheduler": {"name": s}}
        c[f"busy-{s}"] = {"scheduler": {"name": s}, "kv": {"num_gpu_blocks": 1500}, "workload": {"rate": 40}}
    c["chunked-threshold"] = {"scheduler": {"name": "vllm_v1", "long_prefill_token_threshold": 64}}
    c["tight-recompute"] = {"kv": {"num_gpu_blocks": 400}, "workload": {"rate": 30}}
    c["tight-swap"] = {"kv": {"num_gpu_blocks": 400, "preemption": "swap"}, "workload": {"rate": 30}}
    c["tight-vllm-swap"] = {"scheduler": {"name": "vllm"}, "kv": {"num_gpu_blocks": 400, "preemption": "swap"},
                            "workload": {"rate": 30}}
    for ev in ("lru", "lfu", "fifo"):
        c[f"prefix-{ev}"] = {"kv": {"prefix_caching": True, "eviction": ev, "num_gpu_blocks": 900},
                             "workload": {"system_prompts": {"count": 4, "tokens": 300}}}
    for router in ("round_robin", "least_loaded", "power_of_two", "session_affinity"):
        c[f"replicas3-{router}"] = {"cluster": {"replicas": 3, "router": router}, "workload": {"rate": 40}}
    c["replicas2-rows-off"] = {"cluster": {"replicas": 2}, "workload": {"rate": 30},
                               "output": {"step_records": False}}
    c["rows-off"] = {"output": {"step_records": False}}
    c["crash"] = {"cluster": {"replicas": 2}, "workload": {"rate": 20},
                  "faults": {"events": [{"kind": "crash", "at_s": 8, "replica": 0, "duration_s": 5}]}}
    c["crash-chunked-closed"] = {
        "scheduler": {"long_prefill_token_threshold": 1},
        "workload": {"closed_loop": {"clients": 1}, "num_requests": 60},
        "faults": {"events": [{"kind": "crash", "at_s": 11.49, "replica": 0, "duration_s": 1.29}]}}
    c["straggler"] = {"cluster": {"replicas": 2}, "workload": {"rate": 20},
                      "faults": {"events": [{"kind": "straggler", "at_s": 5, "replica": 1, "duration_s": 10,
                                             "factor": 2.0}]}}
    c["closed-loop"] = {"workload": {"closed_loop": {"clients": 8}}}
    c["disagg"] = {"cluster": {"replicas": 3, "prefill_replicas": 1}, "workload": {"rate": 10}}
    c["autoscale"] = {"cluster": {"replicas": 1, "autoscale": {"enabled": True, "min_replicas": 1,
                                                                "max_replicas": 3}},
                      "workload": {"rate": 25}}
    c["kerneldb"] = {"cost": {"model": "kerneldb"}}
    c["kerneldb-70b-tp4"] = {"cost": {"model": "kerneldb"}, "model": "llama-3.1-70b", "parallelism": {"tp": 4},
                             "workload": {"rate": 8}}
    c["stream"] = {"output": {"stream": True, "step_records": False}}
    # expert groups of attention-DP ranks (Engine._group): the database's MoE tables, DeepEP's
    # dispatch, MTP drafts verified in a group
    c["ep-dp4-kerneldb"] = {"cost": {"model": "kerneldb"}, "model": "qwen3-30b-a3b", "hardware": "h100-sxm",
                            "parallelism": {"tp": 1, "dp": 4, "ep": 4}, "workload": {"rate": 20}}
    c["ep-dp8-deepep"] = {"cost": {"model": "kerneldb", "framework": "vllm", "moe_dispatch": "deepep_ll"},
                          "model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8",
                          "parallelism": {"tp": 1, "dp": 8, "ep": 8}, "workload": {"rate": 20}}
    c["ep-dp8-mtp"] = {"cost": {"model": "kerneldb", "framework": "trtllm"}, "model": "deepseek-v3",
                       "hardware": "h200-sxm", "dtype": "fp8", "parallelism": {"tp": 1, "dp": 8, "ep": 8},
                       "speculative": {"method": "mtp", "num_speculative_tokens": 1}, "workload": {"rate": 20}}
    if TRACE.exists():
        c["azure-trace"] = {"workload": {"trace": {"path": str(TRACE)}, "num_requests": 1500}}
    return c


def _digest(frame) -> str:
    h = hashlib.sha256()
    for col in frame.columns:
        h.update(col.encode())
        v = frame[col].to_numpy()
        h.update(np.ascontiguousarray(v.astype(str) if v.dtype == object else v).tobytes())
    return h.hexdigest()[:16]


def fingerprint(name: str, cfg: dict, fast_forward: bool = True) -> str:
    cfg = _merge(_merge(_BASE, cfg), {"engine": {"fast_forward": fast_forward}})
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(cfg, out=d if cfg.get("output", {}).get("stream") else None, progress=False)
        summary = dict(res.summary)
        summary["sim"] = {k: v for k, v in summary["sim"].items() if k != "wall_s"}
        text = json.dumps(summary, sort_keys=True, default=str).replace(str(TRACE), TRACE.name)  # (where the checkout is: not hashed)
        parts = [_digest(res.requests), _digest(res.steps), hashlib.sha256(text.encode()).hexdigest()[:16]]
    return " ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", type=Path)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--only", help="comma-separated names")
    a = ap.parse_args(argv)
    names = configs()
    if a.only:
        names = {k: v for k, v in names.items() if k in a.only.split(",")}
    got = {}
    for name, cfg in names.items():
        got[name] = fingerprint(name, cfg, not a.no_fast_forward)
        print(f"{name:24s} {got[name]}", flush=True)
    if a.save:
        a.save.write_text("".join(f"{k} {v}\n" for k, v in got.items()))
    if a.check:
        want = dict(line.split(" ", 1) for line in a.check.read_text().splitlines() if line.strip())
        moved = [k for k in got if k in want and want[k].strip() != got[k]]
        print("IDENTICAL" if not moved else f"CHANGED: {', '.join(moved)}")
        return 1 if moved else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
