"""KV-cache capacity the way vLLM derives it (docs/architecture.md section 5).

    usable = GPU memory x gpu_memory_utilization - weights per GPU - activation peak - runtime overhead
    blocks = floor(usable / (block_size x KV bytes per token per GPU))

- Weights per GPU: the model's parameters, attention and MLP sharded over ``tp``, layers over
  ``pp``; embedding and LM head sharded over ``tp`` (vocabulary-parallel) on the first and last
  stage; norms replicated. Bytes per parameter from the weight dtype.
- Activation peak: vLLM measures it with a profile forward pass of ``max_num_batched_tokens``
  tokens. We estimate that pass's live set: per token the residual stream and its normed copy
  (2h), the QKV output, and the MLP's gate-up output plus activation (3 x intermediate / tp), in
  the activation dtype; plus fp32 logits for ``max_num_seqs`` sequences over the vocabulary shard.
- Runtime overhead: the CUDA context, NCCL buffers and CUDA-graph pools that live outside the
  torch allocator: ``runtime_overhead_gib`` (default 1.0 GiB, the order of the non-torch memory
  vLLM logs report on H100; replaced by ``kv.num_gpu_blocks`` when a real engine's figure is known).
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.catalog import DTYPE_BYTES, HardwareCard, ModelCard
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


def weights_per_gpu(model: ModelCard, tp: int, pp: int, dtype: str) -> float:
    b = DTYPE_BYTES[dtype]
    layer = (model.attn_params_per_layer + model.mlp_params_per_layer) / tp + 2 * model.hidden_size
    emb = model.vocab_size * model.hidden_size / tp
    head = 0 if model.tie_word_embeddings else emb
    # the largest stage: the first holds the embedding, the last the LM head (same stage when pp = 1)
    ends = emb + head if pp == 1 else max(emb, head)
    return b * (model.num_layers / pp * layer + ends + model.hidden_size)


def kv_bytes_per_token_per_gpu(model: ModelCard, tp: int, pp: int, kv_dtype: str) -> float:
    """K and V of one token on one GPU: its stage's layers, its share of the KV heads (replicated
    when there are fewer KV heads than ``tp``, as in vLLM)."""
    kv_heads = max(1, model.num_kv_heads // tp)
    return 2 * (model.num_layers / pp) * kv_heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def activation_peak(model: ModelCard, tp: int, dtype: str, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    b = DTYPE_BYTES[dtype]
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim / tp
    per_token = 2 * model.hidden_size + qkv + 3 * model.intermediate_size / tp
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
                num_gpu_blocks: int | None = None) -> MemoryPlan:
    """Blocks of KV cache per GPU; raises MemoryShortfall (a CapacityError with the numbers as
    fields) when nothing fits."""
    gpu = hw.memory_bytes
    budget = gpu * gpu_memory_utilization
    weights = weights_per_gpu(model, tp, pp, dtype)
    act = activation_peak(model, tp, dtype, max_num_batched_tokens, max_num_seqs)
    over = runtime_overhead_gib * GIB
    kv_tok = kv_bytes_per_token_per_gpu(model, tp, pp, kv_dtype)
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
                       kv_dtype=cfg.kv.dtype or cfg.dtype, block_size=cfg.kv.block_size,
                       gpu_memory_utilization=cfg.kv.gpu_memory_utilization,
                       max_num_batched_tokens=knobs.max_num_batched_tokens, max_num_seqs=knobs.max_num_seqs,
                       runtime_overhead_gib=cfg.kv.runtime_overhead_gib, num_gpu_blocks=cfg.kv.num_gpu_blocks)
