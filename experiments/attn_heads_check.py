"""Check of the decode-attention head scaling against the kernel database's own measurements.

vLLM's tables hold decode attention for at most 8 KV heads (per GPU); a model with more (Llama-2-7B:
32) is priced from smaller shapes. SGLang's and TensorRT-LLM's tables on the same GPUs measure the
larger shapes too, so they can check the rule: hold out every shape above 8 KV heads, price the
held-out (n, n) shapes from the rest, and compare with their measured cells (batch 1-64, every
measured context length). Printed: the median and 90th percentile of |predicted / measured - 1|,
for the old rule (the nearest shape times the head ratio, launch floor included) and the current
one (``sim.cost.kerneldb._attn_grid``: a fixed part plus a part per head).

    python experiments/attn_heads_check.py   (needs the kernels-db extra)
"""
import numpy as np

from sim.cost import kerneldb_data as kd
from sim.cost.kerneldb import Grid, _attn_grid


def old_rule(rows, heads, kv_heads, head_dim):
    r = rows[(rows[:, 4] == head_dim) & (rows[:, 5] == 0.0)]
    shapes = np.unique(r[:, 2:4], axis=0)
    dist = np.abs(np.log(shapes[:, 0] / heads)) + np.abs(np.log(shapes[:, 1] / kv_heads))
    h, kvh = shapes[int(np.argmin(dist))]
    sel = r[(r[:, 2] == h) & (r[:, 3] == kvh)]
    b, s, t = kd.min_grid(sel[:, 0], sel[:, 1], sel[:, 6])
    return Grid([b, s], t * kv_heads / kvh)


def errors(grid, measured):
    out = []
    for b, s, t in measured:
        c, _ = grid.clamp((b, s))
        out.append(abs(grid(c) / t - 1))
    return out


print(f"{'system':<10} {'framework':<8} {'shape':>8} {'cells':>6} {'old median':>11} {'old p90':>8} {'new median':>11} {'new p90':>8}")
for hw in ("a100-80gb", "h100-sxm", "h200-sxm"):
    for fw in ("sglang", "trtllm"):
        try:
            system, version = kd.resolve(hw, fw, None)
            rows = kd.load(system, fw, version)["gen|rows"]
        except kd.KernelDbUnavailable as e:
            print(f"{hw} {fw}: {e}")
            continue
        rows = rows[rows[:, 4] == 128]
        known = rows[rows[:, 3] <= 8]
        for n in (16, 32, 64):
            m = rows[(rows[:, 2] == n) & (rows[:, 3] == n) & (rows[:, 5] == 0.0) & (rows[:, 0] <= 64)]
            if not len(m):
                continue
            b, s, t = kd.min_grid(m[:, 0], m[:, 1], m[:, 6])
            cells = [(float(x), float(y), float(t[i, j])) for i, x in enumerate(b) for j, y in enumerate(s)]
            new = _attn_grid(known, n, n, 128, False, "kv")[0]
            eo, en = errors(old_rule(known, n, n, 128), cells), errors(new, cells)
            print(f"{system:<10} {fw:<8} {f'({n},{n})':>8} {len(cells):>6} {100 * np.median(eo):>10.0f}% "
                  f"{100 * np.percentile(eo, 90):>7.0f}% {100 * np.median(en):>10.0f}% {100 * np.percentile(en, 90):>7.0f}%")
