"""Operator builders: each takes one grid point's key (a dict of the family's key columns) and
returns a zero-argument callable that runs the operator once on tensors allocated up front.

The shapes come from ``sim.cost.ops`` via ``kernels.grid``; nothing here derives shapes from a
model. Inputs are random; only their shapes and dtypes matter for the time.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BLOCK_SIZE = 16
ATTENTION = ("paged", "contiguous")
"""Decode-attention variants the profiler can time (``--attention``): ``paged`` (the KV cache in
blocks reached through a block table, as vLLM's engines keep it) or ``contiguous`` (one
``[batch, kv_heads, context, head_dim]`` cache per layer attended with
``scaled_dot_product_attention``, as Hugging Face transformers' default attention runs)."""


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported profile dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def _randn(*shape, dtype, device):
    return torch.randn(*shape, dtype=dtype, device=device)


def gemm(key: dict, device) -> Callable:
    """``[m, k] x [k, n]`` as ``F.linear`` (weights stored [n, k] as in nn.Linear); with
    ``groups > 1`` the MoE expert GEMMs as one batched ``bmm`` over the active experts."""
    dt = torch_dtype(key["dtype"])
    m, n, k, g = key["m"], key["n"], key["k"], key["groups"]
    if g == 1:
        x, w = _randn(m, k, dtype=dt, device=device), _randn(n, k, dtype=dt, device=device)
        return lambda: F.linear(x, w)
    x, w = _randn(g, m, k, dtype=dt, device=device), _randn(g, k, n, dtype=dt, device=device)
    return lambda: torch.bmm(x, w)


def _causal_prefix_mask(chunk: int, total: int, device):
    """Causal mask for a chunk of queries that follows ``total - chunk`` cached tokens
    (lower-right aligned). Prefer torch's CausalBias, which dispatches to FlashAttention."""
    try:
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(chunk, total)
    except ImportError:  # older torch: an explicit boolean mask
        q = torch.arange(chunk, device=device).unsqueeze(1) + (total - chunk)
        return q >= torch.arange(total, device=device).unsqueeze(0)


def attn_prefill(key: dict, device) -> Callable:
    """Causal attention of ``num_seqs`` chunks of ``chunk_tokens`` queries over their cached
    context plus the chunk, via ``scaled_dot_product_attention`` (FlashAttention on NVIDIA GPUs),
    grouped-query attention through ``enable_gqa``."""
    dt = torch_dtype(key["dtype"])
    b, qh, kvh, d = key["num_seqs"], key["q_heads"], key["kv_heads"], key["head_dim"]
    chunk, total = key["chunk_tokens"], key["context_tokens"] + key["chunk_tokens"]
    q = _randn(b, qh, chunk, d, dtype=dt, device=device)
    k = _randn(b, kvh, total, d, dtype=dt, device=device)
    v = _randn(b, kvh, total, d, dtype=dt, device=device)
    if total == chunk:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=qh != kvh)
    mask = _causal_prefix_mask(chunk, total, device)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=qh != kvh)


def decode_contexts(batch: int, context_min: int, context_max: int) -> list[int]:
    """Per-sequence context lengths of a decode batch: evenly spread from min to max."""
    if batch == 1 or context_min == context_max:
        return [context_max] * batch
    step = (context_max - context_min) / (batch - 1)
    return [round(context_min + i * step) for i in range(batch)]


def attn_decode(key: dict, device) -> Callable:
    """One query token per sequence attending over its KV cache stored in blocks of
    ``block_size``: gather each sequence's blocks through a (shuffled) block table, then
    grouped-query attention with a padding mask when context lengths differ.

    This is a PyTorch reference of paged attention, not vLLM's fused kernel: the gather is
    timed, and a mixed batch pays for its longest context (both show in the rows)."""
    dt = torch_dtype(key["dtype"])
    b, qh, kvh, d, bs = key["batch"], key["q_heads"], key["kv_heads"], key["head_dim"], key["block_size"]
    ctx = decode_contexts(b, key["context_min"], key["context_max"])
    nblocks = [math.ceil(c / bs) for c in ctx]
    max_blocks = max(nblocks)
    total_blocks = sum(nblocks) + 1  # block 0 is the padding target
    k_cache = _randn(total_blocks, bs, kvh, d, dtype=dt, device=device)
    v_cache = _randn(total_blocks, bs, kvh, d, dtype=dt, device=device)
    perm = (torch.randperm(total_blocks - 1) + 1).tolist()
    table = torch.zeros(b, max_blocks, dtype=torch.long)
    at = 0
    for i, nb in enumerate(nblocks):
        table[i, :nb] = torch.tensor(perm[at:at + nb])
        at += nb
    table = table.to(device)
    s = max_blocks * bs
    g = qh // kvh
    q = _randn(b, kvh, g, d, dtype=dt, device=device)
    pos = torch.arange(s, device=device).unsqueeze(0)
    lens = torch.tensor(ctx, device=device).unsqueeze(1)
    pad = None if all(c == s for c in ctx) else (pos >= lens).view(b, 1, 1, s)
    scale = 1.0 / math.sqrt(d)

    def run():
        k = k_cache[table].view(b, s, kvh, d).permute(0, 2, 3, 1)  # [b, kvh, d, s]
        v = v_cache[table].view(b, s, kvh, d).transpose(1, 2)  # [b, kvh, s, d]
        scores = torch.matmul(q, k) * scale  # [b, kvh, g, s]
        if pad is not None:
            scores = scores.masked_fill(pad, float("-inf"))
        return torch.matmul(torch.softmax(scores.float(), dim=-1).to(dt), v)

    return run


def attn_decode_contiguous(key: dict, device) -> Callable:
    """One query token per sequence attending over a contiguous KV cache ``[batch, kv_heads,
    longest context, head_dim]`` with ``scaled_dot_product_attention``, as transformers' SDPA
    attention does in a decode step: with equal contexts no mask and grouped-query attention
    through ``enable_gqa``; with mixed contexts (left padding to the longest) a boolean padding
    mask and the query heads of each KV head packed into the query axis. ``block_size`` is 0 in
    the key (no blocks). Appending the step's keys and values to the cache is not timed (an
    engine's cache update: transformers' dynamic cache concatenates, a static cache writes in
    place)."""
    dt = torch_dtype(key["dtype"])
    b, qh, kvh, d = key["batch"], key["q_heads"], key["kv_heads"], key["head_dim"]
    ctx = decode_contexts(b, key["context_min"], key["context_max"])
    s = max(ctx)
    k = _randn(b, kvh, s, d, dtype=dt, device=device)
    v = _randn(b, kvh, s, d, dtype=dt, device=device)
    if all(c == s for c in ctx):
        q = _randn(b, qh, 1, d, dtype=dt, device=device)
        return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=qh != kvh)
    q = _randn(b, kvh, qh // kvh, d, dtype=dt, device=device)  # [b, kvh, group, d]
    pos = torch.arange(s, device=device).unsqueeze(0)
    lens = torch.tensor(ctx, device=device).unsqueeze(1)
    keep = (pos >= s - lens).view(b, 1, 1, s)  # left padding: each sequence's cache ends at s
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def elementwise(key: dict, device, extra: dict) -> Callable:
    """rmsnorm over ``hidden``; silu_mul producing ``hidden`` from a ``2*hidden`` gate-up
    output; rotary on q and k heads (``hidden`` = (q_heads + kv_heads) * head_dim); embedding
    lookup of ``tokens`` ids in a ``[vocab_shard, hidden]`` table."""
    dt = torch_dtype(key["dtype"])
    t, h, op = key["tokens"], key["hidden"], key["op"]
    if op == "rmsnorm":
        x, w = _randn(t, h, dtype=dt, device=device), torch.ones(h, dtype=dt, device=device)
        return lambda: F.rms_norm(x, (h,), w, 1e-5)
    if op == "silu_mul":
        x = _randn(t, 2 * h, dtype=dt, device=device)
        return lambda: F.silu(x[:, :h]) * x[:, h:]
    if op == "rotary":
        d = extra["head_dim"]
        x = _randn(t, h // d, d, dtype=dt, device=device)
        ang = torch.arange(t, device=device).unsqueeze(1) * torch.rand(d // 2, device=device)
        cos = torch.cat([ang.cos(), ang.cos()], -1).unsqueeze(1).to(dt)
        sin = torch.cat([ang.sin(), ang.sin()], -1).unsqueeze(1).to(dt)

        def rope():
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * cos + torch.cat((-x2, x1), dim=-1) * sin

        return rope
    if op == "embedding":
        table = _randn(extra["vocab_shard"], h, dtype=dt, device=device)
        ids = torch.randint(0, extra["vocab_shard"], (t,), device=device)
        return lambda: F.embedding(ids, table)
    raise ValueError(f"unknown elementwise op {op!r}")


def sampling(key: dict, device) -> Callable:
    """Sampling from fp32 logits over the full vocabulary (engines gather the logit shards to one
    rank before sampling): ``greedy`` = argmax; ``random`` =
    temperature softmax + multinomial draw."""
    b, vs = key["batch"], key["vocab"]
    logits = torch.randn(b, vs, dtype=torch.float32, device=device)
    if key["op"] == "greedy":
        return lambda: torch.argmax(logits, dim=-1)
    return lambda: torch.multinomial(torch.softmax(logits / 0.8, dim=-1), 1)
