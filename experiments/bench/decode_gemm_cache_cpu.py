"""The GEMMs of one llama-tiny decode step on the CPU (fp32, one thread, process time), timed two
ways: each weight repeated with its weights hot in the caches (as ``kernels.profile`` times a
GEMM), and in forward-pass order over every layer's own weights (as an engine runs them, each
layer's weights evicted by the others'). The difference is memory traffic a hot-cache profile
does not see (docs/calibration.md, "What is left, measured").

    python experiments/bench/decode_gemm_cache_cpu.py [--batches 1,2,4,8,16] [--reps 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,2,4,8,16")
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args()
    import torch
    import torch.nn.functional as F

    from kernels.load import host_load
    from sim.catalog import get_model
    from sim.cost.ops import shard_shapes

    torch.set_num_threads(1)
    card = get_model(str(ROOT / "calibration" / "cards" / "llama-tiny.yaml"))
    sh = shard_shapes(card, 1)
    layer = [(n, k) for op, (n, k) in sh.gemms.items() if op != "lm_head"]
    weights = [[torch.randn(n, k) for n, k in layer] for _ in range(card.num_layers)]
    lm_head = torch.randn(card.vocab_size, card.hidden_size)
    clock = time.process_time

    def timed(fn, calls: int) -> float:
        fn()
        xs = []
        for _ in range(a.reps):
            t0 = clock()
            for _ in range(calls):
                fn()
            xs.append((clock() - t0) / calls)
        return statistics.median(xs)

    load0 = host_load()
    print(f"{'batch':>5s} {'hot (ms)':>9s} {'forward order (ms)':>19s} {'difference (ms)':>16s}")
    for b in (int(x) for x in a.batches.split(",")):
        xs = {k: torch.randn(b, k) for _, k in layer}
        xh = torch.randn(b, card.hidden_size)
        hot = sum(timed(lambda w=w, x=xs[k]: F.linear(x, w), 20) for w, (_, k) in zip(weights[0], layer))
        hot = hot * card.num_layers + timed(lambda: F.linear(xh, lm_head), 5)

        def forward():
            for ws in weights:
                for w, (_, k) in zip(ws, layer):
                    F.linear(xs[k], w)
            F.linear(xh, lm_head)

        fwd = timed(forward, 3)
        print(f"{b:5d} {hot * 1e3:9.3f} {fwd * 1e3:19.3f} {(fwd - hot) * 1e3:16.3f}")
    print(f"host load average: {load0['loadavg']} at start, {host_load()['loadavg']} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
