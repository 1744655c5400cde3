"""The operators of one decoder step and their per-GPU shapes.

This module is the single source of truth for "which kernels does a step run, with which
shapes" given a model card and a tensor-parallel degree. The roofline and the profiled cost
models price the same operators, and ``kernels/`` profiles exactly these shapes. It needs only
the standard library so it runs on a bare GPU machine.

Tensor parallelism follows Megatron-LM: QKV and gate-up are column-parallel, O and down are
row-parallel, so each layer ends its attention and its MLP with one all-reduce of the hidden
states. The LM head is column-parallel over the vocabulary (an all-gather of logits follows).
MoE experts are sharded by tensor parallelism inside each expert (the vLLM default for Mixtral).
"""
from __future__ import annotations

from dataclasses import dataclass

GEMM_OPS = ("qkv", "o", "gate_up", "down", "lm_head", "expert_gate_up", "expert_down")
ELEMENTWISE_OPS = ("rmsnorm", "silu_mul", "rotary", "embedding")
COLLECTIVE_OPS = ("all_reduce", "all_gather")


@dataclass(frozen=True)
class ShardShapes:
    """Per-GPU shapes of one replica's shard of a model.

    ``gemms`` maps each GEMM name to ``(n, k)``: an ``[m, k] x [k, n]`` product for m tokens.
    Head counts are per GPU; KV heads are replicated when there are fewer than ``tp``.
    """

    tp: int
    num_layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab_shard: int
    vocab: int
    num_experts: int
    top_k: int
    gemms: dict[str, tuple[int, int]]

    @property
    def layer_gemms(self) -> tuple[str, ...]:
        if self.num_experts:
            return ("qkv", "o", "expert_gate_up", "expert_down")
        return ("qkv", "o", "gate_up", "down")


def shard_shapes(model, tp: int) -> ShardShapes:
    """Shapes of one GPU's shard of ``model`` (a ModelCard) at tensor-parallel degree ``tp``."""
    if (why := model.parallelism_problem(tp)) is not None:
        raise ValueError(why)
    q_heads = model.num_attention_heads // tp
    kv_heads = max(1, model.num_kv_heads // tp)
    d, h = model.head_dim, model.hidden_size
    inter = model.intermediate_size // tp
    vocab_shard = -(-model.vocab_size // tp)
    gemms = {
        "qkv": ((q_heads + 2 * kv_heads) * d, h),
        "o": (h, q_heads * d),
        "lm_head": (vocab_shard, h),
    }
    if model.num_experts:
        gemms["expert_gate_up"] = (2 * inter, h)
        gemms["expert_down"] = (h, inter)
    else:
        gemms["gate_up"] = (2 * inter, h)
        gemms["down"] = (h, inter)
    return ShardShapes(
        tp=tp,
        num_layers=model.num_layers,
        hidden=h,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=d,
        vocab_shard=vocab_shard,
        vocab=model.vocab_size,
        num_experts=model.num_experts,
        top_k=model.experts_top_k,
        gemms=gemms,
    )


def expert_tokens(tokens: int, num_experts: int, top_k: int) -> tuple[int, int]:
    """MoE routing under a uniform router: (experts active, tokens per active expert).

    With t tokens each picking top_k of E experts uniformly, the expected number of distinct
    experts hit is E * (1 - (1 - top_k/E)^t); the t*top_k assignments spread over them.
    """
    if tokens <= 0:
        return 0, 0
    active = num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)
    active_i = max(1, min(num_experts, round(active)))
    per = -(-tokens * top_k // active_i)
    return active_i, per
