"""Analytic roofline cost model, per operator (DESIGN.md section 6).

Each operator of a decoder step (``sim.cost.ops``) is priced as

    t = max(FLOPs / (peak_flops * compute_eff), bytes / (hbm_bandwidth * mem_eff), kernel_floor_s)

and a step is the sum over its operators, layers and pipeline stages, plus the tensor-parallel
collectives, a CPU-side overhead and host-link swap transfers. The efficiency factors are named
parameters (``RooflineParams``) with documented defaults; ``calibration`` fits them from
profiled devices so unprofiled GPUs improve too.

Formulas (b = bytes per element, T = new tokens in the step, h = hidden size):
- GEMM ``[m, k] x [k, n]``: FLOPs 2mnk; bytes b(mk + kn + mn).
- MoE: the uniform-router expectation of active experts (``ops.expert_tokens``); each active
  expert runs its gate-up and down GEMMs on its share of the tokens and reads its own weights.
- Attention, prefill chunk of q new tokens over c cached tokens (causal): FLOPs
  4 * q_heads * d * q * (c + (q + 1) / 2); bytes: Q and O (q tokens) plus K and V of c + q tokens.
- Attention, decode (q = 1) over c cached tokens: FLOPs 4 * q_heads * d * (c + 1); bytes: K and V
  of c + 1 tokens; memory-bound in practice.
- Norms, SiLU-and-multiply, rotary, embedding, KV-cache write: bytes read + written at mem_eff.
- LM head and sampling on one position per sequence (engines compute logits for the last token
  of each scheduled sequence only); sampling reads fp32 logits.
- All-reduce: allreduce_latency_s + 2 (tp-1)/tp * bytes / link_bw (the ring's bandwidth term
  plus one fixed latency per collective: for the small messages of decode, engines use one-shot
  or NVLS all-reduces whose latency hardly grows with tp), twice per layer (after attention and
  after the MLP); an all-gather of the logits shards likewise.
- Pipeline parallelism: stages run one after another for a step (no micro-batch overlap; a stated
  simplification) with a send/recv of T*h*b bytes between stages over the GPU link.
- CPU: ``cpu_step_s + cpu_per_seq_s * num_seqs`` per step (scheduling, input preparation,
  detokenisation), added serially.
- Swap: blocks * block bytes / host-link bandwidth (one direction each).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sim.catalog import DTYPE_BYTES, HardwareCard, ModelCard
from sim.cost.memory import kv_bytes_per_token_per_gpu
from sim.cost.ops import ShardShapes, expert_tokens, shard_shapes
from sim.types import BatchShape, StepTime


@dataclass(frozen=True)
class RooflineParams:
    """Named efficiency factors and overheads of the roofline (documented defaults).

    - ``gemm_eff`` 0.70: large bf16 GEMMs reach about 70% of dense tensor peak on recent NVIDIA
      parts (cuBLAS; e.g. ~700 of 989 TFLOPS on H100 SXM); fitted from profiles when present.
    - ``attn_eff`` 0.55: FlashAttention-2/3 forward reaches roughly 50-75% of peak for long
      sequences (FlashAttention-3 paper, Shah et al. 2024, fig. 4-5); conservative mid value.
    - ``mem_eff`` 0.85: streaming kernels reach ~80-90% of datasheet HBM bandwidth (STREAM-like
      copies on A100/H100).
    - ``kernel_floor_s`` 3e-6: a kernel never takes less than a few microseconds of GPU time.
    - ``allreduce_latency_s`` 8e-6: fixed latency of one small all-reduce inside an NVLink domain
      (vLLM's custom one-shot all-reduce and NCCL's low-latency protocols take a few to ~10 us for
      decode-sized messages); PCIe-only parts (L40S) are slower, which calibration must supply.
    - ``cpu_step_s`` 3e-4 and ``cpu_per_seq_s`` 5e-6: host-side scheduling and input preparation
      per step and per scheduled sequence, a few hundred microseconds per step as engines with CUDA
      graphs show; replaced by calibration.
    """

    gemm_eff: float = 0.70
    attn_eff: float = 0.55
    mem_eff: float = 0.85
    kernel_floor_s: float = 3e-6
    allreduce_latency_s: float = 8e-6
    cpu_step_s: float = 3e-4
    cpu_per_seq_s: float = 5e-6

    def as_dict(self) -> dict:
        return asdict(self)


class RooflineCostModel:
    """Roofline pricing of every operator; subclasses override single operators.

    The per-operator methods (``gemm``, ``attn_prefill``, ``attn_decode``, ``elementwise``,
    ``sampling``, ``collective``) return seconds for ONE GPU of ONE layer (or once per step
    for LM head and sampling); ``step_time`` composes them. The token-count-dependent parts
    (GEMMs, norms, LM head, collectives) are cached by (tokens, sequences).
    """

    source = "roofline"
    params_source = "defaults"  # or where fitted efficiency factors came from

    def __init__(self, model: ModelCard, hw: HardwareCard, *, tp: int = 1, pp: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, block_size: int = 16,
                 params: RooflineParams | None = None):
        if (why := model.parallelism_problem(tp, pp)) is not None:
            raise ValueError(why)
        self.model, self.hw, self.tp, self.pp = model, hw, tp, pp
        self.dtype = dtype
        self.kv_dtype = kv_dtype or dtype
        self.b = DTYPE_BYTES[dtype]
        self.kvb = DTYPE_BYTES[self.kv_dtype]
        self.block_size = block_size
        self.p = params or RooflineParams()
        self.shapes: ShardShapes = shard_shapes(model, tp)
        self.peak = hw.peak_flops(dtype)
        self.bw = hw.mem_bw
        self._dense_cache: dict[tuple[int, int], tuple[float, float, float, int]] = {}
        self._oor = 0

    # ------------------------------------------------------------------ operators
    def _roof(self, flops: float, nbytes: float, eff: float) -> float:
        return max(flops / (self.peak * eff), nbytes / (self.bw * self.p.mem_eff), self.p.kernel_floor_s)

    def gemm(self, op: str, m: int) -> float:
        n, k = self.shapes.gemms[op]
        return self._roof(2.0 * m * n * k, self.b * (m * k + k * n + m * n), self.p.gemm_eff)

    def moe(self, tokens: int) -> float:
        s = self.shapes
        active, per = expert_tokens(tokens, s.num_experts, s.top_k)
        return active * (self.gemm("expert_gate_up", per) + self.gemm("expert_down", per))

    def attn_prefill(self, chunks: list[tuple[int, int]]) -> float:
        """Prefill-style attention (q > 1) for (new tokens, cached tokens) per sequence."""
        s = self.shapes
        flops = nbytes = 0.0
        kv_tok = 2 * s.kv_heads * s.head_dim * self.kvb
        q_tok = 2 * s.q_heads * s.head_dim * self.b  # read Q, write O
        for q, c in chunks:
            flops += 4.0 * s.q_heads * s.head_dim * q * (c + (q + 1) / 2.0)
            nbytes += q * q_tok + (c + q) * kv_tok
        return self._roof(flops, nbytes, self.p.attn_eff) if chunks else 0.0

    def attn_decode(self, num_seqs: int, kv_tokens: int, longest: int = 0) -> float:
        """Decode attention (q = 1) over ``kv_tokens`` cached tokens in total (incl. the new ones);
        ``longest`` (the longest sequence) is unused by the roofline, used by profiled tables."""
        if not num_seqs:
            return 0.0
        s = self.shapes
        flops = 4.0 * s.q_heads * s.head_dim * kv_tokens
        nbytes = kv_tokens * 2 * s.kv_heads * s.head_dim * self.kvb + num_seqs * 2 * s.q_heads * s.head_dim * self.b
        return self._roof(flops, nbytes, self.p.attn_eff)

    def elementwise(self, op: str, tokens: int) -> float:
        s, b = self.shapes, self.b
        if op == "rmsnorm":
            nbytes = 2 * tokens * s.hidden * b
        elif op == "silu_mul":
            inter = self.shapes.gemms["down" if "down" in s.gemms else "expert_down"][1]
            nbytes = 3 * tokens * inter * b
        elif op == "rotary":
            nbytes = 2 * tokens * (s.q_heads + s.kv_heads) * s.head_dim * b
        elif op == "embedding":
            nbytes = 2 * tokens * s.hidden * b
        elif op == "kv_write":
            nbytes = 2 * tokens * 2 * s.kv_heads * s.head_dim * self.kvb
        else:
            raise KeyError(op)
        return self._roof(0.0, nbytes, 1.0)

    def sampling(self, num_seqs: int) -> float:
        return self._roof(0.0, 3.0 * num_seqs * self.shapes.vocab * 4, 1.0)

    def collective(self, op: str, nbytes: float, world: int) -> float:
        if world <= 1:
            return 0.0
        link = self.hw.link_bw * self.p.mem_eff
        steps = world - 1
        if op == "all_reduce":
            return self.p.allreduce_latency_s + 2.0 * steps / world * nbytes / link
        return self.p.allreduce_latency_s + steps / world * nbytes / link  # all_gather

    # ------------------------------------------------------------------ composition
    def _dense_part(self, tokens: int, num_seqs: int) -> tuple[float, float, float, int]:
        """(gemm, other_gpu, comm, out-of-range queries) per step for the operators that depend
        only on the step's token and sequence counts. With pipeline parallelism the stages run
        one after another, so every layer counts once, plus a send/recv per stage boundary."""
        key = (tokens, num_seqs)
        hit = self._dense_cache.get(key)
        if hit is not None:
            return hit
        oor0 = self._oor
        s, L = self.shapes, self.model.num_layers
        if s.num_experts:
            mlp = self.moe(tokens)
        else:
            mlp = self.gemm("gate_up", tokens) + self.gemm("down", tokens)
        gemm = L * (self.gemm("qkv", tokens) + self.gemm("o", tokens) + mlp) + self.gemm("lm_head", num_seqs)
        other = L * (2 * self.elementwise("rmsnorm", tokens) + self.elementwise("silu_mul", tokens)
                     + self.elementwise("rotary", tokens) + self.elementwise("kv_write", tokens))
        other += self.elementwise("embedding", tokens) + self.elementwise("rmsnorm", num_seqs) + self.sampling(num_seqs)
        comm = L * 2 * self.collective("all_reduce", tokens * s.hidden * self.b, self.tp)
        comm += self.collective("all_gather", num_seqs * s.vocab * 4, self.tp)
        if self.pp > 1:
            comm += (self.pp - 1) * (tokens * s.hidden * self.b / self.hw.link_bw + self.p.allreduce_latency_s)
        out = (gemm, other, comm, self._oor - oor0)
        self._dense_cache[key] = out
        return out

    def step_time(self, shape: BatchShape) -> StepTime:
        tokens = 0
        dec_n = dec_kv = dec_max = 0
        chunks = []
        for q, c in zip(shape.new_tokens, shape.context_lens):
            tokens += q
            if q == 1:
                dec_n += 1
                dec_kv += c + 1
                if c >= dec_max:
                    dec_max = c + 1
            else:
                chunks.append((q, c))
        return self._price(tokens, len(shape.new_tokens), chunks, dec_n, dec_kv, dec_max,
                           shape.blocks_swapped_in + shape.blocks_swapped_out)

    def decode_step(self, num_seqs: int, kv_tokens: int, longest: int) -> StepTime:
        """A step of ``num_seqs`` single-token sequences attending over ``kv_tokens`` cached
        tokens in total (the longest over ``longest``): exactly ``step_time`` of that BatchShape,
        without building it (the engine's decode fast-forward prices many such steps)."""
        return self._price(num_seqs, num_seqs, (), num_seqs, kv_tokens, longest, 0)

    def decode_series(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> dict | None:
        """``decode_step`` for ``steps`` consecutive steps (kv_tokens grows by num_seqs, longest
        by 1 each step) as arrays, with the same floating-point operations, so the values are
        identical; None for subclasses that price decode attention otherwise. No side effects
        (the roofline has no calibrated range to leave)."""
        if type(self).attn_decode is not RooflineCostModel.attn_decode or type(self)._dense_part is not RooflineCostModel._dense_part:
            return None
        n, s = num_seqs, self.shapes
        gemm, other, comm, _ = self._dense_part(n, n)
        kv = kv_tokens + n * np.arange(steps, dtype=np.int64)
        flops = 4.0 * s.q_heads * s.head_dim * kv
        nbytes = kv * 2 * s.kv_heads * s.head_dim * self.kvb + n * 2 * s.q_heads * s.head_dim * self.b
        att = np.maximum(np.maximum(flops / (self.peak * self.p.attn_eff), nbytes / (self.bw * self.p.mem_eff)),
                         self.p.kernel_floor_s)
        ad = self.model.num_layers * att
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n
        total = gemm + 0.0 + ad + comm + other + cpu + 0.0
        full = lambda v: np.full(steps, v)  # noqa: E731
        return {"total": total, "gemm": full(gemm), "attn_prefill": full(0.0), "attn_decode": ad, "comm": full(comm),
                "other_gpu": full(other), "cpu": full(cpu), "swap": full(0.0), "source": self.source}

    def _price(self, tokens: int, n: int, chunks, dec_n: int, dec_kv: int, dec_max: int, swapped: int) -> StepTime:
        gemm, other, comm, oor = self._dense_part(tokens, n) if n else (0.0, 0.0, 0.0, 0)
        layers = self.model.num_layers  # attention runs in every layer of every stage
        ap = layers * self.attn_prefill(chunks) if chunks else 0.0
        ad = layers * self.attn_decode(dec_n, dec_kv, dec_max) if dec_n else 0.0
        self._oor += oor
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n if n else 0.0
        swap = 0.0
        if swapped:
            block_bytes = self.block_size * kv_bytes_per_token_per_gpu(self.model, self.tp, self.pp, self.kv_dtype)
            swap = swapped * block_bytes / self.hw.host_bw
        total = gemm + ap + ad + comm + other + cpu + swap
        return StepTime(total, gemm, ap, ad, comm, other, cpu, swap, self.source, oor)

    def out_of_range_total(self) -> int:
        return self._oor
