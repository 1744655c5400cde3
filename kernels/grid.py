"""Grid points to profile for one model shard, from the shapes in ``sim.cost.ops``.

Dense where time is step-shaped (GEMM token counts: every value 1..64, where tile and
split-k choices change), then powers of two and their midpoints; log grids for contexts and
batch sizes, where time is smooth. ``small`` keeps a CPU run of a tiny model under a minute on
one core; ``full`` is the GPU grid.
"""
from __future__ import annotations

from sim.cost.ops import expert_tokens, shard_shapes

from kernels.ops import BLOCK_SIZE, decode_contexts

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def pow2_midpoints(lo: int, hi: int) -> list[int]:
    """Powers of two from ``lo`` and the midpoints between them (lo, 1.5 lo, 2 lo, ...), up to hi."""
    out, p = [], lo
    while p <= hi:
        out.append(p)
        if p + p // 2 <= hi and p // 2:
            out.append(p + p // 2)
        p *= 2
    return sorted(set(out))


def dense_tokens(hi: int) -> list[int]:
    return sorted(set(range(1, min(64, hi) + 1)) | set(pow2_midpoints(64, hi)))


def log2_grid(lo: int, hi: int) -> list[int]:
    out, p = [], lo
    while p <= hi:
        out.append(p)
        p *= 2
    return out


GRIDS = {
    "small": {
        "gemm_tokens": [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512],
        "elementwise_tokens": [1, 16, 128, 512],
        "prefill_chunks": [16, 64, 256],
        "prefill_contexts": [0, 256, 1024],
        "decode_batches": [1, 4, 16],
        "decode_contexts": [128, 512, 2048],
        "decode_max_kv_tokens": 2**15,
        "sampling_batches": [1, 8, 32],
        "collective_tokens": [1, 64, 512],
    },
    "full": {
        "gemm_tokens": dense_tokens(16384),
        "elementwise_tokens": pow2_midpoints(1, 16384),
        "prefill_chunks": log2_grid(16, 8192),
        "prefill_contexts": [0] + log2_grid(128, 65536),
        "decode_batches": log2_grid(1, 512),
        "decode_contexts": log2_grid(64, 65536),
        "decode_max_kv_tokens": 2**21,
        "sampling_batches": log2_grid(1, 512),
        "collective_tokens": pow2_midpoints(1, 16384),
    },
}


def grid_spec(name: str) -> dict:
    try:
        return GRIDS[name]
    except KeyError:
        raise ValueError(f"unknown grid {name!r}; use one of {', '.join(GRIDS)}") from None


def points(model, tp: int, dtype: str, grid: str, attention: str = "paged") -> list[tuple[str, dict]]:
    """All ``(family, key)`` compute points of one (model, tp, dtype); collectives separately.
    Decode-attention keys carry ``block_size`` 0 for the ``contiguous`` variant (no blocks)."""
    block_size = BLOCK_SIZE if attention == "paged" else 0
    g = grid_spec(grid)
    sh = shard_shapes(model, tp)
    base = {"dtype": dtype, "tp": tp}
    out: list[tuple[str, dict]] = []
    for op, (n, k) in sh.gemms.items():
        for t in g["gemm_tokens"]:
            if op.startswith("expert_"):
                groups, m = expert_tokens(t, sh.num_experts, sh.top_k)
            else:
                groups, m = 1, t
            out.append(("gemm", {**base, "op": op, "tokens": t, "groups": groups, "m": m, "n": n, "k": k}))
    heads = {"q_heads": sh.q_heads, "kv_heads": sh.kv_heads, "head_dim": sh.head_dim}
    for chunk in g["prefill_chunks"]:
        for ctx in g["prefill_contexts"]:
            if ctx + chunk <= model.max_context:
                out.append(("attn_prefill", {**base, **heads, "num_seqs": 1, "chunk_tokens": chunk, "context_tokens": ctx}))
    for b in g["decode_batches"]:
        for ctx in g["decode_contexts"]:
            if ctx > model.max_context:
                continue
            spreads = [(ctx, ctx)] + ([(max(1, ctx // 8), ctx)] if b > 1 else [])
            for lo, hi in spreads:
                cs = decode_contexts(b, lo, hi)
                if sum(cs) > g["decode_max_kv_tokens"]:
                    continue
                out.append(("attn_decode", {**base, **heads, "block_size": block_size, "batch": b,
                                            "context_min": lo, "context_mean": round(sum(cs) / b),
                                            "context_max": hi, "kv_tokens_total": sum(cs)}))
    inter = sh.gemms.get("down", sh.gemms.get("expert_down"))[1]
    widths = {"rmsnorm": sh.hidden, "silu_mul": inter, "rotary": (sh.q_heads + sh.kv_heads) * sh.head_dim,
              "embedding": sh.hidden}
    for op, h in widths.items():
        for t in g["elementwise_tokens"]:
            out.append(("elementwise", {**base, "op": op, "tokens": t, "hidden": h}))
    for op in ("greedy", "random"):
        for b in g["sampling_batches"]:
            out.append(("sampling", {**base, "op": op, "batch": b, "vocab": sh.vocab}))
    return out


def collective_points(model, world_sizes: list[int], dtype: str, grid: str) -> list[tuple[str, dict]]:
    """all_reduce / all_gather of ``tokens x hidden`` activations; ``bytes`` is per rank input."""
    es = ELEMENT_BYTES[dtype]
    return [("collective", {"dtype": dtype, "op": op, "world_size": w, "bytes": t * model.hidden_size * es})
            for w in world_sizes for op in ("all_reduce", "all_gather") for t in grid_spec(grid)["collective_tokens"]]


def cost(family: str, key: dict) -> tuple[float, float]:
    """Rough (flops, bytes moved) of one point, for the time budget estimate only."""
    es = ELEMENT_BYTES.get(key["dtype"], 2)
    if family == "gemm":
        g, m, n, k = key["groups"], key["m"], key["n"], key["k"]
        return 2.0 * g * m * n * k, es * g * (m * k + k * n + m * n)
    if family == "attn_prefill":
        b, qh, kvh, d = key["num_seqs"], key["q_heads"], key["kv_heads"], key["head_dim"]
        c, ctx = key["chunk_tokens"], key["context_tokens"]
        return 4.0 * b * qh * d * c * (ctx + c / 2), es * b * d * (2 * qh * c + 2 * kvh * (ctx + c))
    if family == "attn_decode":
        bs = key["block_size"] or 1
        s = key["batch"] * -(-key["context_max"] // bs) * bs
        return 4.0 * key["q_heads"] * key["head_dim"] * s, 6.0 * es * key["kv_heads"] * key["head_dim"] * s
    if family == "elementwise":
        return 0.0, 3.0 * es * key["tokens"] * key["hidden"]
    if family == "sampling":
        return 0.0, 12.0 * key["batch"] * key["vocab"]
    return 0.0, 2.0 * key["bytes"] * key["world_size"]
