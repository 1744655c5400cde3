"""KV-cache capacity the way vLLM derives it (docs/architecture.md section 5).

    usable = GPU memory x gpu_memory_utilization - weights per GPU - activation peak - runtime overhead
    blocks = floor(usable / (block_size x KV bytes per token per GPU))

- GPU memory: the card's ``usable_memory_gib`` (what the driver reports as total, the figure vLLM
  multiplies by ``gpu_memory_utilization``; e.g. 79.25 GiB on an A100-80GB), else the datasheet.
- Weights per GPU: the model's parameters, attention and MLP sharded over ``tp`` (MLA's
  down-projections replicated, as vLLM does), layers over ``pp``; embedding and LM head sharded
  over ``tp`` (vocabulary-parallel) on the first and last stage; norms replicated. The weight
  dtype (block scales included, see ``DTYPE_BYTES``) applies to the linear layers of attention and
  MLP; embedding, LM head, router and norms stay in the activation dtype (vLLM's fp8 and ModelOpt
  nvfp4 checkpoints leave them unquantised). ``mxfp4`` (gpt-oss) and ``int4`` (Kimi-K2.5) quantise
  only the routed experts, as their checkpoints' ``modules_to_not_convert`` / ``ignore`` say.
- KV bytes per token per GPU: K and V of the GPU's KV heads (GQA), or MLA's latent (``kv_lora_rank``
  + ``qk_rope_head_dim``, one per token shared by all heads) replicated on every TP rank: every
  rank's heads attend over the whole latent, and vLLM stores it whole on each rank (which is why
  DeepSeek deployments add data-parallel attention). Sliding-window layers are sized like full
  layers (a conservative simplification: vLLM's hybrid allocator frees their blocks beyond the
  window).
- Activation peak: vLLM measures it with a profile forward pass of ``max_num_batched_tokens``
  tokens (the engine passes the policy's largest step, ``Knobs.max_step_tokens``: ``chunk_size``
  for ``sarathi``, as Sarathi-Serve profiles with its chunk size). We estimate that pass's live
  set: per token the residual stream and its normed copy (2h), the QKV output, and the MLP's gate-up output plus activation (3 x intermediate / tp), in
  the activation dtype; plus fp32 logits for ``max_num_seqs`` sequences over the vocabulary shard.
- Runtime overhead: the CUDA context, NCCL buffers and CUDA-graph pools that live outside the
  torch allocator: ``runtime_overhead_gib`` (default 1.0 GiB, the order of the non-torch memory
  vLLM logs report on H100; replaced by ``kv.num_gpu_blocks`` when a real engine's figure is known).
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.catalog import DTYPE_BYTES, EXPERTS_ONLY, HardwareCard, ModelCard
from sim.errors import CapacityError

GIB = 2**30


@dataclass(frozen=True)
class MemoryPlan:
    gpu_bytes: int
    budget_bytes: float
    weights_bytes: float
    activation_bytes: float
    overhead_bytes: float
    kv_bytes_per_token: float
    block_bytes: float
    num_gpu_blocks: int
    derived: bool

    def as_dict(self) -> dict:
        g = lambda x: round(x / GIB, 3)  # noqa: E731
        return {
            "gpu_gib": g(self.gpu_bytes), "budget_gib": g(self.budget_bytes), "weights_gib": g(self.weights_bytes),
            "activation_gib": g(self.activation_bytes), "runtime_overhead_gib": g(self.overhead_bytes),
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token, "block_bytes": self.block_bytes,
            "num_gpu_blocks": self.num_gpu_blocks, "kv_capacity_tokens": self.num_gpu_blocks * int(self.block_bytes / self.kv_bytes_per_token) if self.kv_bytes_per_token else 0,
            "derived": self.derived,
        }


def weight_bytes(model: ModelCard, dtype: str, act_dtype: str = "bf16") -> tuple[float, float, float]:
    """Bytes per parameter of (attention linears, dense MLP + shared experts, routed experts)."""
    w, a = DTYPE_BYTES[dtype], DTYPE_BYTES[act_dtype]
    if dtype in EXPERTS_ONLY:  # gpt-oss, Kimi-K2.5: only the routed experts are quantised
        return a, a, w
    return w, w, w


def weights_per_gpu(model: ModelCard, tp: int, pp: int, dtype: str, act_dtype: str = "bf16", dp: int = 1) -> float:
    """Weight bytes on one GPU of the largest pipeline stage. Attention, dense MLPs, shared experts
    and the embedding are split ``tp`` ways (each of ``dp`` attention data-parallel ranks holds a
    copy); the routed experts are split over the whole expert group of tp x dp GPUs, whatever the
    expert-parallel degree (ep ways by expert times tp x dp / ep ways by width)."""
    attn_b, dense_b, expert_b = weight_bytes(model, dtype, act_dtype)
    a = DTYPE_BYTES[act_dtype]
    h, L = model.hidden_size, model.num_layers
    rep = model.attn_replicated_params_per_layer
    attn = attn_b * ((model.attn_params_per_layer - rep) / tp + rep)
    mlp = model.dense_layers * dense_b * model.dense_mlp_params / tp
    if model.is_moe:
        mlp += model.moe_layers * (expert_b * model.num_experts * model.expert_params / dp
                                   + dense_b * model.num_shared_experts * model.expert_params) / tp
        mlp += model.moe_layers * a * h * model.num_experts  # router, replicated
    layer = attn + mlp / L + a * 2 * h
    emb = a * model.vocab_size * h / tp
    head = 0 if model.tie_word_embeddings else emb
    # the largest stage: the first holds the embedding, the last the LM head (same stage when pp = 1)
    ends = emb + head if pp == 1 else max(emb, head)
    return L / pp * layer + ends + a * h


def kv_bytes_per_token_per_gpu(model: ModelCard, tp: int, pp: int, kv_dtype: str) -> float:
    """KV cache of one token on one GPU: its stage's layers, its share of the KV heads (replicated
    when there are fewer KV heads than ``tp``, as in vLLM); MLA's latent whole on every rank."""
    if model.is_mla:
        return (model.num_layers / pp) * model.kv_elems_per_token_per_layer * DTYPE_BYTES[kv_dtype]
    kv_heads = max(1, model.num_kv_heads // tp)
    return 2 * (model.num_layers / pp) * kv_heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def activation_peak(model: ModelCard, tp: int, dtype: str, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Live activations of vLLM's profile pass (``dtype``: the activation dtype)."""
    b = DTYPE_BYTES[dtype]
    if model.is_mla:
        qkv = model.num_attention_heads * (model.qk_nope_head_dim + model.qk_rope_head_dim) / tp \
            + model.kv_elems_per_token_per_layer
    else:
        qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim / tp
    inter = model.intermediate_size if model.dense_layers else 0
    if model.is_moe:  # fused MoE keeps each token's top-k (and shared) expert outputs
        inter = max(inter, model.expert_intermediate * (model.experts_top_k + model.num_shared_experts))
    per_token = 2 * model.hidden_size + qkv + 3 * inter / tp
    logits = max_num_seqs * (model.vocab_size / tp) * 4
    return b * per_token * max_num_batched_tokens + logits


class MemoryShortfall(CapacityError):
    """The model does not fit: a CapacityError that carries the numbers as fields (GiB per GPU),
    so callers (``plan``) state the reason without parsing the message."""

    def __init__(self, model: str, hardware: str, tp: int, pp: int, dtype: str, utilization: float,
                 plan: MemoryPlan):
        self.model, self.hardware, self.tp, self.pp, self.dtype = model, hardware, tp, pp, dtype
        self.utilization, self.plan = utilization, plan
        p = plan
        self.usable_gib = (p.budget_bytes - p.weights_bytes - p.activation_bytes - p.overhead_bytes) / GIB
        super().__init__(
            f"{model} does not fit on {hardware} with tp={tp}, pp={pp}: per GPU {p.gpu_bytes / GIB:.1f} GiB x "
            f"gpu_memory_utilization {utilization} = {p.budget_bytes / GIB:.1f} GiB, but {self.short()}, leaving "
            f"{self.usable_gib:.2f} GiB for the KV cache (one block = {p.block_bytes / 2**20:.2f} MiB). "
            f"Raise tp/pp, use a larger GPU or fp8 weights.")

    def short(self) -> str:
        """The numbers in a few words: what needs the memory."""
        p = self.plan
        return (f"weights need {p.weights_bytes / GIB:.1f} GiB ({self.dtype}), activations "
                f"{p.activation_bytes / GIB:.1f} GiB and runtime overhead {p.overhead_bytes / GIB:.1f} GiB "
                f"of {p.budget_bytes / GIB:.1f} GiB")


def plan_memory(model: ModelCard, hw: HardwareCard, *, tp: int, pp: int, dtype: str, kv_dtype: str,
                block_size: int, gpu_memory_utilization: float, max_num_batched_tokens: int,
                max_num_seqs: int, runtime_overhead_gib: float = 1.0,
                num_gpu_blocks: int | None = None, act_dtype: str = "bf16", dp: int = 1,
                draft: tuple[float, float] = (0.0, 0.0)) -> MemoryPlan:
    """Blocks of KV cache per GPU; raises MemoryShortfall (a CapacityError with the numbers as
    fields) when nothing fits. ``dtype`` is the weight dtype, ``act_dtype`` the activation dtype.
    ``draft``: a speculative draft's (weight bytes, KV bytes per token) per GPU, held beside the
    target's (``draft_memory``): a block holds a token's KV of both."""
    gpu = hw.usable_memory_bytes
    budget = gpu * gpu_memory_utilization
    weights = weights_per_gpu(model, tp, pp, dtype, act_dtype, dp) + draft[0]
    act = activation_peak(model, tp, act_dtype, max_num_batched_tokens, max_num_seqs)
    over = runtime_overhead_gib * GIB
    kv_tok = kv_bytes_per_token_per_gpu(model, tp, pp, kv_dtype) + draft[1]
    block_bytes = block_size * kv_tok
    if num_gpu_blocks is not None:
        return MemoryPlan(gpu, budget, weights, act, over, kv_tok, block_bytes, num_gpu_blocks, False)
    usable = budget - weights - act - over
    blocks = int(usable // block_bytes) if usable > 0 else 0
    plan = MemoryPlan(gpu, budget, weights, act, over, kv_tok, block_bytes, blocks, True)
    if blocks <= 0:
        raise MemoryShortfall(model.id, hw.id, tp, pp, dtype, gpu_memory_utilization, plan)
    return plan


def memory_for_config(cfg, model: ModelCard, hw: HardwareCard) -> MemoryPlan:
    """``plan_memory`` with every argument taken from a Config: the one place that maps config
    keys to the memory plan (the engine and ``plan`` both call it)."""
    knobs = cfg.scheduler.knobs()
    return plan_memory(model, hw, tp=cfg.parallelism.tp, pp=cfg.parallelism.pp, dtype=cfg.dtype,
                       kv_dtype=cfg.kv_dtype, block_size=cfg.kv.block_size,
                       gpu_memory_utilization=cfg.kv.gpu_memory_utilization,
                       max_num_batched_tokens=knobs.max_step_tokens, max_num_seqs=knobs.max_num_seqs,
                       runtime_overhead_gib=cfg.kv.runtime_overhead_gib, num_gpu_blocks=cfg.kv.num_gpu_blocks,
                       act_dtype=cfg.act_dtype, dp=cfg.parallelism.dp,
                       draft=draft_memory(cfg, model))


def draft_memory(cfg, model: ModelCard) -> tuple[float, float]:
    """(weight bytes, KV bytes per token) per GPU of ``cfg``'s speculative draft: a draft model's
    own; an EAGLE or MTP head's one decoder layer of the target (its LM head is the target's);
    nothing for n-gram lookup or without speculation."""
    sp = getattr(cfg, "speculative", None)
    if sp is None or not sp.enabled or sp.method == "ngram":
        return (0.0, 0.0)
    par, act = cfg.parallelism, cfg.act_dtype
    if sp.draft_model is not None:
        from sim.catalog import get_model

        d = get_model(sp.draft_model)
        return (weights_per_gpu(d, par.tp, par.pp, cfg.dtype, act), kv_bytes_per_token_per_gpu(d, par.tp, par.pp, cfg.kv_dtype))
    layers = model.num_layers
    return (weights_per_gpu(model, par.tp, 1, cfg.dtype, act) / layers,
            kv_bytes_per_token_per_gpu(model, par.tp, 1, cfg.kv_dtype) / layers)
