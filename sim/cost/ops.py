"""The operators of one decoder step and their per-GPU shapes.

This module is the single source of truth for "which kernels does a step run, with which
shapes" given a model card and a tensor-parallel degree. The roofline and the profiled cost
models price the same operators, and ``kernels/`` profiles exactly these shapes. It needs only
the standard library so it runs on a bare GPU machine.

Tensor parallelism follows Megatron-LM: QKV and gate-up are column-parallel, O and down are
row-parallel, so each layer ends its attention and its MLP with one all-reduce of the hidden
states. The LM head is column-parallel over the vocabulary (an all-gather of logits follows).
MoE experts are sharded by tensor parallelism inside each expert (the vLLM default without
expert parallelism); shared experts (DeepSeek) run as one dense MLP on every token; the router is
a small replicated GEMM. DeepSeek's first ``first_dense_layers`` layers have a dense MLP.

MLA (DeepSeek multi-head latent attention), as vLLM runs it: ``qkv_a`` (the fused, replicated
down-projections of q and of the KV latent + rotary key), ``q_b`` (column-parallel up-projection
of q), ``kv_b`` (the latent's up-projection to per-head K-nope and V, column-parallel; priced inside
attention: prefill up-projects the context it attends over, decode absorbs it into q and the
output), and ``o`` (row-parallel over the heads' V).
"""
from __future__ import annotations

from dataclasses import dataclass

GEMM_OPS = ("qkv", "o", "gate_up", "down", "lm_head", "expert_gate_up", "expert_down", "router",
            "shared_gate_up", "shared_down", "qkv_a", "q_b", "kv_b")
ELEMENTWISE_OPS = ("rmsnorm", "silu_mul", "rotary", "embedding")
COLLECTIVE_OPS = ("all_reduce", "all_gather")


@dataclass(frozen=True)
class ShardShapes:
    """Per-GPU shapes of one replica's shard of a model.

    ``gemms`` maps each GEMM name to ``(n, k)``: an ``[m, k] x [k, n]`` product for m tokens.
    Head counts are per GPU; KV heads are replicated when there are fewer than ``tp``. For MLA,
    ``kv_heads`` is 1 (one latent per token) and ``head_dim`` is the q/k head dim (nope + rope).
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
    dense_layers: int = 0
    moe_layers: int = 0
    shared_experts: int = 0
    mla: bool = False
    kv_lora: int = 0
    rope_dim: int = 0
    v_dim: int = 0
    window: int = 0
    window_layers: int = 0
    qk_norm: bool = False  # per-head q/k norm before rotary (ModelCard.qk_norm)
    ep: int = 1  # expert-parallel degree: this GPU holds num_experts / ep routed experts
    moe_tp: int = 0  # ways each routed expert is split (tp x dp / ep); 0: tp

    @property
    def attn_gemms(self) -> tuple[str, ...]:
        return ("qkv_a", "q_b", "o") if self.mla else ("qkv", "o")

    @property
    def layer_gemms(self) -> tuple[str, ...]:
        mlp = ("expert_gate_up", "expert_down") if self.num_experts else ("gate_up", "down")
        return self.attn_gemms + mlp

    @property
    def kv_elems(self) -> int:
        """Cached elements per token per layer on this GPU."""
        return self.kv_lora + self.rope_dim if self.mla else 2 * self.kv_heads * self.head_dim

    @property
    def mlp_inter(self) -> int:
        """The per-GPU intermediate width the SiLU-and-multiply runs over (per token)."""
        if "down" in self.gemms:
            return self.gemms["down"][1]
        return self.gemms["expert_down"][1] * self.top_k + (self.gemms["shared_down"][1] if "shared_down" in self.gemms else 0)


def shard_shapes(model, tp: int, ep: int = 1, dp: int = 1) -> ShardShapes:
    """Shapes of one GPU's shard of ``model`` (a ModelCard) at tensor-parallel degree ``tp``; with
    expert parallelism the routed experts are placed ``ep`` ways over the tp x dp GPUs of the
    expert group, each split tp x dp / ep ways (the expert GEMM shapes are one such slice)."""
    if (why := model.parallelism_problem(tp) or model.expert_parallel_problem(tp, ep, dp)) is not None:
        raise ValueError(why)
    moe_tp = tp * dp // ep
    q_heads = model.num_attention_heads // tp
    kv_heads = max(1, model.num_kv_heads // tp)
    d, h = model.head_dim, model.hidden_size
    vocab_shard = -(-model.vocab_size // tp)
    gemms: dict[str, tuple[int, int]] = {}
    mla = {}
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        lat = model.kv_lora_rank + model.qk_rope_head_dim
        if model.q_lora_rank:
            gemms["qkv_a"] = (model.q_lora_rank + lat, h)
            gemms["q_b"] = (q_heads * qk, model.q_lora_rank)
        else:
            gemms["qkv_a"] = (lat, h)
            gemms["q_b"] = (q_heads * qk, h)
        gemms["kv_b"] = (q_heads * (model.qk_nope_head_dim + model.v_head_dim), model.kv_lora_rank)
        gemms["o"] = (h, q_heads * model.v_head_dim)
        d, kv_heads = qk, 1
        mla = dict(mla=True, kv_lora=model.kv_lora_rank, rope_dim=model.qk_rope_head_dim, v_dim=model.v_head_dim)
    else:
        gemms["qkv"] = ((q_heads + 2 * kv_heads) * d, h)
        gemms["o"] = (h, q_heads * d)
    gemms["lm_head"] = (vocab_shard, h)
    if model.dense_layers:
        inter = model.intermediate_size // tp
        gemms["gate_up"] = (2 * inter, h)
        gemms["down"] = (h, inter)
    if model.is_moe:
        einter = model.expert_intermediate // moe_tp
        gemms["expert_gate_up"] = (2 * einter, h)
        gemms["expert_down"] = (h, einter)
        gemms["router"] = (model.num_experts, h)
        if model.num_shared_experts:  # shared experts stay tensor-parallel over the attention's tp
            sinter = model.num_shared_experts * (model.expert_intermediate // tp)
            gemms["shared_gate_up"] = (2 * sinter, h)
            gemms["shared_down"] = (h, sinter)
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
        dense_layers=model.dense_layers,
        moe_layers=model.moe_layers,
        shared_experts=model.num_shared_experts,
        window=model.sliding_window or 0,
        window_layers=model.window_layers,
        qk_norm=model.qk_norm,
        ep=ep,
        moe_tp=moe_tp,
        **mla,
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
