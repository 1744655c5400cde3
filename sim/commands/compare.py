"""``servesim compare RESULT.json [CONFIG.yaml]``: replay a ``vllm bench serve`` run in the
simulator and print the error per metric (docs/sim_vs_real.md)."""
from __future__ import annotations

from sim.commands.common import HelpFormatter, add_config_args, nonneg_int, positive_int, shortcut_sets

SHORTCUTS = [
    ("--model", "model", str, "catalog model id (default: from the result's model_id)"),
    ("--hardware", "hardware", str, "catalog hardware id of the server's GPUs"),
    ("--tp", "parallelism.tp", positive_int, "tensor-parallel degree"),
    ("--scheduler", "scheduler.name", str, "scheduling policy"),
    ("--num-gpu-blocks", "kv.num_gpu_blocks", positive_int, "KV blocks the vLLM server logged (# GPU blocks)"),
    ("--seed", "seed", nonneg_int, "seed for the synthesized arrivals"),
]


def register(sub) -> None:
    p = sub.add_parser("compare", help="simulate a recorded vllm bench serve run and report the error per metric",
                       description="Replay the workload of a `vllm bench serve --save-result [--save-detailed]` "
                                   "result in the simulator and compare TTFT, TPOT, ITL, E2E and throughput.",
                       formatter_class=HelpFormatter)
    p.add_argument("result", help="result JSON written by vllm bench serve --save-result")
    p.add_argument("config", nargs="?", help="servesim config YAML describing the server (model, hardware, tp, scheduler, kv)")
    p.add_argument("--out", default="results/compare", help="output folder")
    add_config_args(p, SHORTCUTS)
    p.add_argument("--arrivals", metavar="TRACE", help="the arrival trace the benchmark replayed (row i = request i)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF figures")
    p.set_defaults(func=run)


def run(args) -> int:
    from sim.compare import compare

    rep = compare(args.result, args.config, overrides=shortcut_sets(args, SHORTCUTS), out=args.out,
                  arrivals=args.arrivals, plots=not args.no_plots)
    src, rq, s = rep["source"], rep["requests"], rep["setup"]
    print(f"\nreal: {src['file']} ({src['backend']}, {src['model_id']}, rate {src['request_rate']}/s, "
          f"burstiness {src['burstiness']}) | {rq['real']['completed']:,} completed, "
          f"{rq['real']['failed_excluded']:,} failed (excluded)")
    print(f"sim:  {s['model']} on {s['tp']}x {s['hardware']}, scheduler {s['scheduler']}, cost model {s['cost_model']} | "
          f"{rq['sim']['completed']:,} completed, {rq['sim']['rejected']:,} rejected")
    print(f"workload: {rep['workload']['requests']:,} requests; arrivals: {rep['workload']['arrivals']}; "
          f"lengths: {rep['workload']['lengths']}")
    print(f"scope: {rep['scope']}; error = (sim - real) / real\n")
    print(rep["table"])
    for n in rep["notes"]:
        print(f"note: {n}")
    print(f"\ncomparison written to {args.out}/comparison.json" + (f", figures in {args.out}/plots/" if rep["figures"] else ""))
    return 0
