"""Analytic roofline cost model, per operator (docs/architecture.md section 6).

Each operator of a decoder step (``sim.cost.ops``) is priced as

    t = max(FLOPs / (peak_flops * compute_eff), bytes / (hbm_bandwidth * mem_eff), kernel_floor_s)

and a step is the sum over its operators, layers and pipeline stages, plus the tensor-parallel
collectives, a CPU-side overhead and host-link swap transfers. The efficiency factors are named
parameters (``RooflineParams``) with documented defaults; ``calibration`` fits them from
profiled devices so unprofiled GPUs improve too.

Precision: the weight dtype (``dtype``) sets the bytes of weights read and, through
``COMPUTE_DTYPE``, the tensor-core peak a GEMM runs at (fp8 weights: W8A8 at the fp8 peak; nvfp4:
the fp4 peak; mxfp4: weight-only, at the activation dtype's peak). Activations (GEMM inputs and
outputs, norms, Q/O of attention) use the activation dtype, the KV cache its own dtype, and the
all-reduce the communication dtype (default bf16: fp8 weights do not make the all-reduce 1-byte).
Attention runs at the activation dtype's peak. Embedding, LM head and router are in the
activation dtype (engines leave them unquantised).

Formulas (b = bytes per element, T = new tokens in the step, h = hidden size):
- GEMM ``[m, k] x [k, n]``: FLOPs 2mnk; bytes b_act(mk + mn) + b_weight kn.
- MoE: the uniform-router expectation of active experts (``ops.expert_tokens``); the routed
  experts run as two grouped GEMMs (gate-up, down; one kernel each, as fused-MoE kernels do) over
  every token's top-k assignments, reading the weights of each expert touched once. Shared experts run as a dense MLP on
  every token; the router is a GEMM to ``num_experts`` logits; the first ``first_dense_layers``
  layers have a dense MLP.
- MLA (DeepSeek): GEMMs ``qkv_a``, ``q_b``, ``o`` per layer. Prefill attends in the expanded form:
  per query-key pair and head 2 (d_qk + d_v) FLOPs, plus the up-projection (``kv_b``) of the
  attended context, 2 (c + q) kv_lora heads (d_nope + d_v) FLOPs. Decode attends in the absorbed
  form over the latent: per cached token and head 2 (kv_lora + d_rope) + 2 kv_lora FLOPs, reading
  the latent once for all heads, plus the absorption of ``kv_b`` into q and the output.
- Sliding window: ``window_layers`` layers attend over at most ``sliding_window`` keys per query
  (prefill: the exact sum over the chunk's queries; decode: min(kv tokens, seqs x window)).
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
- CPU: ``cpu_step_s + cpu_per_seq_s * num_seqs + cpu_per_token_s * T + cpu_per_seq_ctx_s * kv_tokens``
  per step (scheduling, input preparation, detokenisation; the last two, 0 by default, are work
  outside the kernel profile that grows with the step's tokens, as an eager engine's Python glue
  around every layer does, and with every sequence's context, as an engine that copies or masks
  its whole KV cache every step does; ``kv_tokens`` = the context of every scheduled sequence
  after the step, summed), added serially. ``servesim calibrate-engine`` fits them from the
  user's engine.
- Sampling: ``random`` (default; temperature softmax + multinomial: the logits read three times)
  or ``greedy`` (argmax: read once), fp32 logits over the full vocabulary.
- Swap: blocks * block bytes / host-link bandwidth (one direction each).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from sim.catalog import COMPUTE_DTYPE, DTYPE_BYTES, EXPERTS_ONLY, HardwareCard, ModelCard
from sim.cost.memory import kv_bytes_per_token_per_gpu, weight_bytes
from sim.cost.ops import ShardShapes, expert_tokens, shard_shapes
from sim.kv.blocks import DEFAULT_BLOCK_SIZE
from sim.kv.tiers import HostLink
from sim.types import BatchShape, StepTime


_EFF, _NONNEG = {"gt": 0, "le": 1}, {"ge": 0}  # bounds of a fraction of peak, of a time


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
    - ``cpu_per_token_s`` 0: work per token of the step that no kernel profile sees (an eager
      engine's Python and unfused elementwise glue around each layer); none by default,
      fitted by ``servesim calibrate-engine`` where an engine has it.
    - ``cpu_per_seq_ctx_s`` 0: host-side work per context token of each scheduled sequence (an
      engine that rebuilds masks or concatenates its KV cache every step); none by default (paged
      engines do not), fitted by ``servesim calibrate-engine`` where an engine has it.
    """

    # the one source of these defaults: the config's ``cost.roofline`` section is built from
    # these fields (metadata: the bounds it validates)
    gemm_eff: float = field(default=0.70, metadata=_EFF)
    attn_eff: float = field(default=0.55, metadata=_EFF)
    mem_eff: float = field(default=0.85, metadata=_EFF)
    kernel_floor_s: float = field(default=3e-6, metadata=_NONNEG)
    allreduce_latency_s: float = field(default=8e-6, metadata=_NONNEG)
    cpu_step_s: float = field(default=3e-4, metadata=_NONNEG)
    cpu_per_seq_s: float = field(default=5e-6, metadata=_NONNEG)
    cpu_per_token_s: float = field(default=0.0, metadata=_NONNEG)
    cpu_per_seq_ctx_s: float = field(default=0.0, metadata=_NONNEG)

    def grows(self) -> bool:
        """Whether the host overhead has a term per token or per context token (then decode
        runs are priced step by step: their CPU term is not the same every step)."""
        return bool(self.cpu_per_token_s or self.cpu_per_seq_ctx_s)

    def as_dict(self) -> dict:
        return asdict(self)


SAMPLING = {"random": 3.0, "greedy": 1.0}
"""Sampling methods and how many times each reads the fp32 logits: random = softmax (read, write)
and multinomial (read); greedy = one argmax."""

FIELD = 64
COUNT_MASK = (1 << FIELD) - 1
"""The out-of-range count ``_oor`` holds the total number of queries in its low ``FIELD`` bits;
a model that records more per query packs it above them (``sim.cost.kerneldb.Extrapolation``)."""
VECTOR_STEPS = 48
"""``decode_totals`` of at least this many steps are computed with numpy arrays (but see ``LOOP_STEPS``)."""

LOOP_STEPS = 128
"""``decode_totals`` of fewer steps are computed by a plain loop where decode is memory-bound
(``_memory_bound_terms``): about 0.1 us a step there, below numpy's fixed cost up to about here."""

PREFILL_MEMO_ENTRIES = 1 << 16
"""Most single-chunk prefill-attention prices a roofline model memoises (about 10 MB at this size)."""


STEP_MEMO_ENTRIES = 1 << 16
"""Most fixed parts of one-chunk steps (``RooflineCostModel._fixed_part``) a roofline model
memoises (about 23 MB at this size; a million requests of the benchmark workload hold ~45,000)."""


class _MemoryBound(NamedTuple):
    """What ``RooflineCostModel._memory_bound_terms`` works out once per parameter set ``p``."""

    p: object  # the parameters these were computed for
    ok: bool  # memory-bound (see ``_memory_bound_terms``)
    runs: dict  # the short-run loop's constants by batch size (``_memory_bound_run``)
    lin: tuple | None  # (F, K, QB) of ``_decode_terms`` when it is linear (``_decode_linear``)
    K: int  # KV bytes per cached token of one layer
    QB: int  # query and output bytes per sequence of one layer
    db: float  # effective memory bandwidth
    full: int  # full-attention layers
    floor: float  # the kernel floor
    series: bool  # ok and this class's own ``_plain_decode`` pricing
    inline: bool  # ok and this class's own ``attn_decode``


class RooflineCostModel:
    """Roofline pricing of every operator; subclasses override single operators.

    The per-operator methods (``gemm``, ``attn_prefill``, ``attn_decode``, ``elementwise``,
    ``sampling``, ``collective``) return seconds for ONE GPU of ONE layer (or once per step
    for LM head and sampling); ``step_time`` composes them. The token-count-dependent parts
    (GEMMs, norms, LM head, collectives) are cached by (tokens, sequences).
    """

    source = "roofline"
    params_source = "defaults"  # or where fitted efficiency factors came from
    fallback_reason: str | None = None
    """Why the measured kernel database does not price this run (``cost.model: auto`` fell back)."""
    link: HostLink | None = None  # ``host_link``'s answer, once asked (or set by ``make_cost_model``)

    def describe(self) -> dict | None:
        """What priced the run, for ``summary.json``'s ``cost_model`` block: only when the
        roofline stands in for the kernel database (with the reason); None otherwise."""
        if self.fallback_reason is None:
            return None
        return {"source": "roofline (analytic)", "params_source": self.params_source,
                "why_not_kerneldb": self.fallback_reason}

    def __init__(self, model: ModelCard, hw: HardwareCard, *, tp: int = 1, pp: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 params: RooflineParams | None = None, act_dtype: str = "bf16", comm_dtype: str | None = None,
                 sampling: str = "random", ep: int = 1, dp: int = 1, expert_distribution: str = "balanced",
                 expert_skew: float = 1.0, moe_dispatch: str = "allgather"):
        if (why := model.parallelism_problem(tp, pp) or model.expert_parallel_problem(tp, ep, dp)) is not None:
            raise ValueError(why)
        self.model, self.hw, self.tp, self.pp = model, hw, tp, pp
        self.ep, self.dp = ep, dp
        self.expert_distribution, self.expert_skew = expert_distribution, expert_skew
        self.moe_dispatch = moe_dispatch  # the roofline prices every exchange as all-gather + reduce-scatter
        self.dtype = dtype  # weights
        if sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING)}, not {sampling!r}")
        self.sampling_op = sampling
        self.act_dtype = act_dtype
        self.kv_dtype = kv_dtype or act_dtype
        self.comm_dtype = comm_dtype or act_dtype
        self.b = DTYPE_BYTES[act_dtype]
        self.kvb = DTYPE_BYTES[self.kv_dtype]
        self.cb = DTYPE_BYTES[self.comm_dtype]
        self.block_size = block_size
        self.p = params or RooflineParams()
        self.shapes: ShardShapes = shard_shapes(model, tp, ep, dp)
        attn_b, dense_b, expert_b = weight_bytes(model, dtype, act_dtype)
        self.attn_peak = hw.peak_flops(act_dtype)  # attention and unquantised GEMMs
        compute = COMPUTE_DTYPE[dtype] or act_dtype
        self.peak = hw.peak_flops(compute)  # GEMMs over quantised weights
        quant = self.peak if dtype not in EXPERTS_ONLY else self.attn_peak
        attn_peak = self.peak if dtype not in EXPERTS_ONLY else self.attn_peak
        self._gemm_w: dict[str, tuple[float, float]] = {}  # op -> (weight bytes per element, peak)
        for op in self.shapes.gemms:
            if op in ("lm_head", "router"):
                self._gemm_w[op] = (self.b, self.attn_peak)
            elif op in ("qkv", "o", "qkv_a", "q_b", "kv_b"):
                self._gemm_w[op] = (attn_b, attn_peak)
            elif op.startswith("expert_"):
                self._gemm_w[op] = (expert_b, quant if dtype not in EXPERTS_ONLY else self.attn_peak)
            else:
                self._gemm_w[op] = (dense_b, quant)
        self.layers_window = self.shapes.window_layers
        self.layers_full = model.num_layers - self.layers_window
        self.bw = hw.mem_bw
        self._dense_cache: dict[tuple[int, int], tuple[float, float, float, int]] = {}
        self._token_cache: dict[int, tuple[float, float, float, float, float, int]] = {}  # _dense_terms' parts
        self._seq_cache: dict[int, tuple[float, float, float, float, int]] = {}
        self._prefill_memo: dict = {}
        self._oor = 0
        self._mb: _MemoryBound | None = None  # decode_totals' constants (_memory_bound_terms)
        own = (type(self).attn_prefill is RooflineCostModel.attn_prefill
               and type(self).attn_prefill_window is RooflineCostModel.attn_prefill_window
               and type(self)._dense_part is RooflineCostModel._dense_part)
        self._step_memo: dict | None = {} if own else None  # _price's fixed parts of one-chunk steps (None: off)

    # ------------------------------------------------------------------ operators
    def _roof(self, flops: float, nbytes: float, eff: float, peak: float | None = None) -> float:
        return max(flops / ((peak or self.attn_peak) * eff), nbytes / (self.bw * self.p.mem_eff), self.p.kernel_floor_s)

    def gemm(self, op: str, m: int) -> float:
        n, k = self.shapes.gemms[op]
        wb, peak = self._gemm_w[op]
        return self._roof(2.0 * m * n * k, self.b * (m * k + m * n) + wb * k * n, self.p.gemm_eff, peak)

    def moe(self, tokens: int) -> float:
        """Routed experts of one layer as two grouped GEMMs (gate-up, down), one kernel each, as
        fused-MoE kernels run them: FLOPs of every token's top-k experts, weights read once for
        each expert touched, activations of every (token, expert) assignment."""
        s = self.shapes
        active, per = expert_tokens(tokens, s.num_experts, s.top_k)
        if s.ep > 1:  # this GPU's share of the active experts (experts placed ep ways); ``tokens``
            active = -(-active // s.ep)  # are the whole expert group's
        t = 0.0
        for op in ("expert_gate_up", "expert_down"):
            n, k = s.gemms[op]
            wb, peak = self._gemm_w[op]
            m = active * per  # assignments, rounded up per expert
            t += self._roof(2.0 * m * n * k, self.b * m * (k + n) + wb * active * k * n, self.p.gemm_eff, peak)
        return t * self.expert_skew

    @staticmethod
    def _attended(q: int, c: int, window: int) -> float:
        """Query-key pairs of a causal chunk of q new tokens after c cached ones, each query
        seeing at most ``window`` keys (0: no window)."""
        if not window:
            return q * (c + (q + 1) / 2.0)
        n1 = min(max(window - c, 0), q)  # queries whose whole causal prefix fits in the window
        return n1 * c + n1 * (n1 + 1) / 2.0 + (q - n1) * window

    def attn_prefill(self, chunks: list[tuple[int, int]], window: int = 0) -> float:
        """Prefill-style attention (q > 1) for (new tokens, cached tokens) per sequence. A pure
        function of its arguments: a single chunk's price is memoised (prompts of one length
        share it); a memo that reaches ``PREFILL_MEMO_ENTRIES`` starts again empty."""
        if len(chunks) != 1:
            return self._attn_prefill(chunks, window) if chunks else 0.0
        key = (*chunks[0], window)
        hit = self._prefill_memo.get(key)
        if hit is None:
            if len(self._prefill_memo) >= PREFILL_MEMO_ENTRIES:
                self._prefill_memo.clear()
            hit = self._prefill_memo[key] = self._attn_prefill(chunks, window)
        return hit

    def _attn_prefill(self, chunks: list[tuple[int, int]], window: int) -> float:
        """``attn_prefill``, unmemoised."""
        s = self.shapes
        flops = nbytes = 0.0
        kv_tok = s.kv_elems * self.kvb
        if s.mla:
            dqk, dv = s.head_dim, s.v_dim
            up_n, up_k = s.gemms["kv_b"]
        else:
            dqk = dv = s.head_dim
        q_tok = s.q_heads * (dqk + dv) * self.b  # read Q, write O
        pair = 2.0 * s.q_heads * (dqk + dv)
        for q, c in chunks:
            keys = c + q if not window else min(c, window) + q
            flops += pair * self._attended(q, c, window)
            nbytes += q * q_tok + keys * kv_tok
            if s.mla:  # up-project the attended latents to per-head K-nope and V
                flops += 2.0 * keys * up_n * up_k
                nbytes += keys * up_n * self.b
        if s.mla:
            nbytes += up_n * up_k * self._gemm_w["kv_b"][0]
        return self._roof(flops, nbytes, self.p.attn_eff)

    def attn_prefill_window(self, chunks: list[tuple[int, int]]) -> float:
        """Prefill attention of one sliding-window layer (priced by the roofline)."""
        return RooflineCostModel.attn_prefill(self, chunks, self.shapes.window)

    def _decode_terms(self, n, kv):
        """(FLOPs, bytes) of one layer's decode attention for ``n`` sequences over ``kv`` cached
        tokens in total; ``kv`` may be a numpy array (the same floating-point operations either way)."""
        s = self.shapes
        if s.mla:  # absorbed form over the shared latent
            up_n, up_k = s.gemms["kv_b"]
            flops = 2.0 * s.q_heads * (2 * s.kv_lora + s.rope_dim) * kv + 2.0 * n * up_n * up_k
            nbytes = kv * s.kv_elems * self.kvb + n * s.q_heads * (s.head_dim + s.v_dim) * self.b \
                + up_n * up_k * self._gemm_w["kv_b"][0]
        else:
            flops = 4.0 * s.q_heads * s.head_dim * kv
            nbytes = kv * 2 * s.kv_heads * s.head_dim * self.kvb + n * 2 * s.q_heads * s.head_dim * self.b
        return flops, nbytes

    def _decode_roof_series(self, n, kv):
        """``_roof`` of ``_decode_terms`` over an array of kv totals (bit-identical to scalars)."""
        flops, nbytes = self._decode_terms(n, kv)
        return np.maximum(np.maximum(flops / (self.attn_peak * self.p.attn_eff), nbytes / (self.bw * self.p.mem_eff)),
                          self.p.kernel_floor_s)

    def attn_decode(self, num_seqs: int, kv_tokens: int, longest: int = 0) -> float:
        """Decode attention (q = 1) over ``kv_tokens`` cached tokens in total (incl. the new ones);
        ``longest`` (the longest sequence) is unused by the roofline, used by profiled tables."""
        if not num_seqs:
            return 0.0
        return self._roof(*self._decode_terms(num_seqs, kv_tokens), self.p.attn_eff)

    def elementwise(self, op: str, tokens: int) -> float:
        s, b = self.shapes, self.b
        if op == "rmsnorm":
            nbytes = 2 * tokens * s.hidden * b
        elif op == "silu_mul":
            nbytes = 3 * tokens * s.mlp_inter * b
        elif op == "rotary":
            nbytes = 2 * tokens * (s.q_heads + s.kv_heads) * s.head_dim * b
        elif op == "q_norm":  # per-head RMSNorm of the queries (read, write)
            nbytes = 2 * tokens * s.q_heads * s.head_dim * b
        elif op == "k_norm":
            nbytes = 2 * tokens * s.kv_heads * s.head_dim * b
        elif op == "embedding":
            nbytes = 2 * tokens * s.hidden * b
        elif op == "kv_write":
            nbytes = 2 * tokens * s.kv_elems * self.kvb
        else:
            raise KeyError(op)
        return self._roof(0.0, nbytes, 1.0)

    def sampling(self, num_seqs: int) -> float:
        reads = SAMPLING[self.sampling_op]
        return self._roof(0.0, reads * num_seqs * self.shapes.vocab * 4, 1.0)

    def collective(self, op: str, nbytes: float, world: int) -> float:
        if world <= 1:
            return 0.0
        link = self.hw.link_bw * self.p.mem_eff
        steps = world - 1
        if op == "all_reduce":
            return self.p.allreduce_latency_s + 2.0 * steps / world * nbytes / link
        return self.p.allreduce_latency_s + steps / world * nbytes / link  # all_gather

    def dp_exchange(self, tokens: int) -> float:
        """One MoE layer's attention-data-parallel exchange for ``tokens`` tokens of the whole
        expert group: an all-gather of the ranks' hidden states before the experts and a
        reduce-scatter of the expert outputs after, over the tp x dp GPUs (0 without DP)."""
        if self.dp <= 1 or tokens <= 0:
            return 0.0
        return 2 * RooflineCostModel.collective(self, "all_gather", tokens * self.shapes.hidden * self.cb,
                                                self.tp * self.dp)

    # ------------------------------------------------------------------ composition
    def _dense_part(self, tokens: int, num_seqs: int) -> tuple[float, float, float, int]:
        """(gemm, other_gpu, comm, out-of-range queries) per step for the operators that depend
        only on the step's token and sequence counts. With pipeline parallelism the stages run
        one after another, so every layer counts once, plus a send/recv per stage boundary.
        Cached by (tokens, num_seqs); subclasses price the parts in ``_dense_terms``. Counts
        nothing: the caller adds the count (once per step, the first pricing as any other)."""
        key = (tokens, num_seqs)
        hit = self._dense_cache.get(key)
        if hit is not None:
            return hit
        oor0 = self._oor
        out = (*self._dense_terms(tokens, num_seqs), self._oor - oor0)
        self._oor = oor0
        self._dense_cache[key] = out
        return out

    def _gemm_terms(self, tokens: int, num_seqs: int) -> float:
        """All GEMMs of a step, each priced by ``gemm`` / ``moe``: attention projections in every
        layer, dense MLPs of the dense layers, routed experts + router (+ shared experts) of the
        MoE layers, the LM head on one position per sequence."""
        return self._layer_gemms(tokens) + self.gemm("lm_head", num_seqs)

    def _layer_gemms(self, tokens: int) -> float:
        """The GEMMs of ``_gemm_terms`` but the LM head."""
        s, L = self.shapes, self.model.num_layers
        attn = 0.0
        for op in s.attn_gemms:
            attn += self.gemm(op, tokens)
        gemm = L * attn
        if s.dense_layers:
            gemm += s.dense_layers * (self.gemm("gate_up", tokens) + self.gemm("down", tokens))
        if s.moe_layers:
            moe = self.moe(tokens) + self.gemm("router", tokens)
            if s.shared_experts:
                moe += self.gemm("shared_gate_up", tokens) + self.gemm("shared_down", tokens)
            gemm += s.moe_layers * moe
        return gemm

    def _dense_terms(self, tokens: int, num_seqs: int) -> tuple[float, float, float]:
        """(gemm, other_gpu, comm) of ``_dense_part``, composed from the parts that depend on the
        tokens only and those that depend on the sequences only, each cached (with the
        out-of-range queries pricing it counted, added again on a hit) since a step's tokens and
        sequences pair in many ways. The operations and their order are those of pricing every
        operator for the step at once (as the tests check)."""
        tok = self._counted(self._token_cache, tokens, self._token_terms)
        seq = self._counted(self._seq_cache, num_seqs, self._seq_terms)
        gemm_l, other_l, embed, comm, pp, _ = tok
        lm_head, norm, sampling, gather, _ = seq
        comm += gather
        if self.pp > 1:
            comm += pp
        return gemm_l + lm_head, other_l + (embed + norm + sampling), comm

    def _counted(self, cache: dict, key: int, terms) -> tuple:
        """``terms(key)`` followed by the out-of-range queries pricing it counted, kept in
        ``cache``; a hit counts those queries again, as pricing it anew would."""
        hit = cache.get(key)
        if hit is None:
            oor0 = self._oor
            hit = cache[key] = (*terms(key), self._oor - oor0)
        else:
            self._oor += hit[-1]
        return hit

    def _token_terms(self, tokens: int) -> tuple[float, float, float, float, float]:
        """(layer GEMMs, layer elementwise operators, embedding, all-reduces, pipeline sends): the
        parts of ``_dense_terms`` that depend on the tokens only."""
        s, L = self.shapes, self.model.num_layers
        other = L * (2 * self.elementwise("rmsnorm", tokens) + self.elementwise("silu_mul", tokens)
                     + self.elementwise("rotary", tokens) + self.elementwise("kv_write", tokens))
        if s.qk_norm:
            other += L * (self.elementwise("q_norm", tokens) + self.elementwise("k_norm", tokens))
        comm = L * 2 * self.collective("all_reduce", tokens * s.hidden * self.cb, self.tp)
        pp = 0.0
        if self.pp > 1:
            pp = (self.pp - 1) * (tokens * s.hidden * self.cb / self.hw.link_bw + self.p.allreduce_latency_s)
        return self._layer_gemms(tokens), other, self.elementwise("embedding", tokens), comm, pp

    def _seq_terms(self, num_seqs: int) -> tuple[float, float, float, float]:
        """(LM head, final norm, sampling, logits all-gather): the parts of ``_dense_terms`` that
        depend on the sequences only."""
        return (self.gemm("lm_head", num_seqs), self.elementwise("rmsnorm", num_seqs), self.sampling(num_seqs),
                self.collective("all_gather", num_seqs * self.shapes.vocab * 4, self.tp))

    def step_time(self, shape: BatchShape) -> StepTime:
        nt, cl = shape.new_tokens, shape.context_lens
        n, dec_n = len(nt), nt.count(1)  # single-token sequences decode, the others are prefill chunks
        swapped = shape.blocks_swapped_in + shape.blocks_swapped_out  # from here: the swap term's seconds
        if swapped or shape.blocks_loaded or shape.blocks_loaded_disk:
            swapped = self.host_link().seconds(swapped, shape.blocks_loaded, shape.blocks_loaded_disk)
        if dec_n == n:
            return self._price(sum(nt), n, [], n, sum(cl) + n, max(cl) + 1 if n else 0, swapped)
        if dec_n == n - 1:  # one chunk (the common mixed step): its tokens are all but the decodes'
            tokens = sum(nt)
            q = tokens - dec_n
            c = cl[nt.index(q)]
            if not dec_n:
                return self._price(tokens, n, [(q, c)], 0, 0, 0, swapped)
            top = max(cl)
            if top > c:  # the longest context is a decode's
                return self._price(tokens, n, [(q, c)], dec_n, sum(cl) - c + dec_n, top + 1, swapped)
        tokens = dec_kv = dec_max = 0
        chunks = []
        for q, c in zip(nt, cl):
            tokens += q
            if q == 1:
                dec_kv += c + 1
                if c >= dec_max:
                    dec_max = c + 1
            else:
                chunks.append((q, c))
        return self._price(tokens, n, chunks, dec_n, dec_kv, dec_max, swapped)

    def beside_decodes(self, dec_n: int, dec_kv: int, dec_max: int, chunks: list) -> StepTime | None:
        """``step_time`` of a step of ``dec_n`` decodes (``dec_kv``: their contexts plus one
        each, summed; ``dec_max``: the largest such, 0 without decodes) and the prefill
        ``chunks`` ((tokens, context) in plan order), nothing swapped: ``step_time`` prices a
        shape from exactly these aggregates (integer sums, so in any order), so without building
        it the value is the same. None for a subclass that prices steps otherwise (a flow of
        decode steps and admissions then builds the shape: ``sim.flow``)."""
        if type(self).step_time is not RooflineCostModel.step_time:
            return None
        n, tokens, prefill = dec_n + len(chunks), dec_n, []
        for q, c in chunks:
            tokens += q
            if q == 1:  # a one-token chunk is priced as a decode (step_time cannot tell them apart)
                dec_n += 1
                dec_kv += c + 1
                if c + 1 > dec_max:
                    dec_max = c + 1
            else:
                prefill.append((q, c))
        return self._price(tokens, n, prefill, dec_n, dec_kv, dec_max, 0)

    def decode_step(self, num_seqs: int, kv_tokens: int, longest: int) -> StepTime:
        """A step of ``num_seqs`` single-token sequences attending over ``kv_tokens`` cached
        tokens in total (the longest over ``longest``): exactly ``step_time`` of that BatchShape,
        without building it (the engine's decode fast-forward prices many such steps)."""
        return self._price(num_seqs, num_seqs, (), num_seqs, kv_tokens, longest, 0)

    def decode_total(self, num_seqs: int, kv_tokens: int, longest: int) -> float:
        """``decode_step(...).total`` with the same side effects (out-of-range counts), without
        building a StepTime: the fast-forward's per-step price for models without
        ``decode_totals`` when no per-step rows are kept."""
        if (type(self)._price is not RooflineCostModel._price or type(self).decode_step is not RooflineCostModel.decode_step
                or self.p.grows()):
            return self.decode_step(num_seqs, kv_tokens, longest).total
        n = num_seqs
        gemm, other, comm, oor = self._dense_part(n, n)
        ad = self.layers_full * self.attn_decode(n, kv_tokens, longest)
        if self.layers_window:
            W = self.shapes.window
            ad = ad + self.layers_window * self.attn_decode(n, min(kv_tokens, n * W), min(longest, W))
        self._oor += oor
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n
        return gemm + 0.0 + ad + comm + other + cpu + 0.0

    def _plain_decode(self) -> bool:
        """True when decode steps are priced by this class's own roofline (subclasses that
        price decode attention or the dense part otherwise get no vectorised series; nor does a
        host overhead per token or context token, which the series' constant CPU term leaves out)."""
        return (type(self).attn_decode is RooflineCostModel.attn_decode
                and type(self)._dense_part is RooflineCostModel._dense_part and not self.p.grows())

    def decode_totals(self, num_seqs: int, kv_tokens: int, longest: int, steps: int):
        """The ``total`` of ``decode_step`` for ``steps`` consecutive steps (kv_tokens grows by
        num_seqs, longest by 1 each step), with the same floating-point operations (less some
        whose result cannot matter, see ``_memory_bound_terms``), so the values are identical: a
        list for short runs (under ``LOOP_STEPS`` where memory-bound, else ``VECTOR_STEPS``), a
        numpy array for long ones; None for subclasses that price decode attention otherwise. No
        side effects."""
        if steps < LOOP_STEPS:
            mb = self._mb if self._mb is not None and self._mb.p is self.p else self._memory_bound_terms()
            if mb.series:  # memory-bound and this class's own decode pricing: one loop
                run = mb.runs.get(num_seqs) or self._memory_bound_run(num_seqs)
                g0, comm, other, cpu, qb, step, K, db, full, floor = run
                nb = kv_tokens * K + qb  # the first step's attention bytes (an int)
                nbs = range(nb, nb + steps * step, step)
                out = []  # (plain loops: in a comprehension these names would be closure cells, slower per step)
                if nb / db >= floor:
                    for x in nbs:
                        out.append(g0 + full * (x / db) + comm + other + cpu)
                else:
                    for x in nbs:
                        r = x / db
                        out.append(g0 + full * (r if r >= floor else floor) + comm + other + cpu)
                return out
        parts = self._decode_parts(num_seqs, kv_tokens, longest, steps)
        return None if parts is None else parts[-1]

    def _memory_bound_terms(self) -> _MemoryBound:
        """The constants of ``decode_totals``' short-run loop and ``_price``'s decode
        attention (``_MemoryBound``), kept in ``_mb`` until ``p`` is replaced (the two class
        checks are asked once, not per step).

        ``memory_bound``: every layer has full-attention GQA decode (no window, no MLA), whole
        bytes per KV and activation element, and the FLOPs term of ``_roof`` is below its bytes
        term at every KV length. A step's price is then ``_price``'s, with the same operations
        less those whose result cannot matter. ``_decode_terms``' bytes are the integer
        ``kv * K + n * QB`` (K = 2 kv_heads head_dim kv_bytes, QB = 2 q_heads head_dim act_bytes),
        exact in any grouping, so consecutive steps' bytes are a ``range``; divided by ``db`` as
        there. The FLOPs term is not computed: when ``F / df`` (F = 4 q_heads head_dim,
        df = attn_peak attn_eff) is below ``K / db`` by far more than rounding (a relative margin of
        1e-9 against a few units of 2**-53), the computed FLOPs term is below the computed bytes
        term at every ``kv >= 0``, so ``_roof``'s max is the bytes term. Bytes terms only grow
        with ``kv`` (integer bytes, a division by a positive constant), so if the first step's is
        at or above the kernel floor, all are. ``_price``'s last addition, of a 0.0 swap term, is
        left out: a sum whose first term is ``gemm + 0.0`` is never -0.0, and adding 0.0 to any
        other value returns it unchanged."""
        p = self.p
        lin = self._decode_linear()
        F, K, QB = lin if lin is not None else (0.0, 0, 0)
        df, db = self.attn_peak * p.attn_eff, self.bw * p.mem_eff
        ok = (lin is not None and not self.layers_window and type(K) is int and type(QB) is int
              and F / df * (1.0 + 1e-9) < K / db)
        self._mb = _MemoryBound(p, ok, {}, lin, K, QB, db, self.layers_full, p.kernel_floor_s,
                                ok and self._plain_decode(), ok and type(self).attn_decode is RooflineCostModel.attn_decode)
        return self._mb

    _LINEAR_PROBES = ((1, 1), (3, 1000), (257, 123_457), (4096, 1 << 31))

    def _decode_linear(self) -> tuple | None:
        """(F, K, QB) when ``_decode_terms(n, kv)`` is exactly ``(F * kv, K * kv + QB * n)`` with
        whole bytes (the GQA form): read off ``_decode_terms`` itself and checked on probe points, so the fast
        decode pricing below (``_memory_bound_terms``, ``_decode_attn_list``) follows any edit of
        that one formula, and a formula of another form (MLA's constant term, an edit that is
        not linear) is priced by the general path instead. None otherwise."""
        f0, b0 = self._decode_terms(0, 0)
        F, kb = self._decode_terms(0, 1)
        _, nb = self._decode_terms(1, 0)
        if f0 != 0 or b0 != 0:
            return None
        K, QB = kb - b0, nb - b0
        if type(K) is not int or type(QB) is not int:  # (whole bytes: exact in any grouping)
            return None
        for n, kv in self._LINEAR_PROBES:
            if self._decode_terms(n, kv) != (F * kv, K * kv + QB * n):
                return None
        return F, K, QB

    def _memory_bound_run(self, n: int) -> tuple:
        """The constants of ``decode_totals``' short-run loop for ``n`` sequences (kept in ``_mb``)."""
        p, _, runs, _, K, QB, db, full, floor, _, _ = self._mb  # (a tuple: unpacked in field order)
        gemm, other, comm, _ = self._dense_part(n, n)
        cpu = p.cpu_step_s + p.cpu_per_seq_s * n
        runs[n] = out = (gemm + 0.0, comm, other, cpu, n * QB, n * K, K, db, full, floor)
        return out

    def _decode_parts(self, n: int, kv_tokens: int, longest: int, steps: int):
        """(gemm, other_gpu, comm, cpu, attn_decode per step, total per step) of ``steps``
        consecutive decode steps, composed as ``_price`` composes a step's total: per-step values
        as a list for short runs, a numpy array for long ones; None unless ``_plain_decode``."""
        if not self._plain_decode():
            return None
        gemm, other, comm, _ = self._dense_part(n, n)
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n
        if steps >= VECTOR_STEPS:
            ad = self._decode_attn_series(n, kv_tokens, steps)
            return gemm, other, comm, cpu, ad, gemm + 0.0 + ad + comm + other + cpu + 0.0
        ad = self._decode_attn_list(n, kv_tokens, longest, steps)
        g0 = gemm + 0.0  # (the first addition of _price's total; the rest in its order)
        return gemm, other, comm, cpu, ad, [g0 + x + comm + other + cpu + 0.0 for x in ad]

    def _decode_attn_list(self, n: int, kv_tokens: int, longest: int, steps: int) -> list[float]:
        """Decode attention of all layers for ``steps`` consecutive steps, one Python float each
        (the operations of ``_price``, in order: the short-run twin of ``_decode_attn_series``)."""
        full, win, W = self.layers_full, self.layers_window, self.shapes.window
        p = self.p
        mb = self._mb if self._mb is not None and self._mb.p is p else self._memory_bound_terms()
        if not win and mb.lin is not None:  # _roof(_decode_terms) inlined with its own constants
            fl, kvk, qb1 = mb.lin
            qb = n * qb1
            df, db, floor = self.attn_peak * p.attn_eff, self.bw * p.mem_eff, p.kernel_floor_s
            out = []
            for kv in range(kv_tokens, kv_tokens + steps * n, n):
                a, b = fl * kv / df, (kv * kvk + qb) / db
                r = a if a >= b else b
                out.append(full * (r if r >= floor else floor))
            return out
        attn, out = self.attn_decode, []
        for j in range(steps):
            kv = kv_tokens + j * n
            ad = full * attn(n, kv, longest + j)
            if win:
                ad = ad + win * attn(n, min(kv, n * W), min(longest + j, W))
            out.append(ad)
        return out

    def _decode_attn_series(self, n: int, kv_tokens: int, steps: int) -> np.ndarray:
        """Decode attention of all layers for ``steps`` consecutive steps (bit-identical to ``_price``)."""
        kv = kv_tokens + n * np.arange(steps, dtype=np.int64)
        ad = self.layers_full * self._decode_roof_series(n, kv)
        if self.layers_window:
            ad = ad + self.layers_window * self._decode_roof_series(n, np.minimum(kv, n * self.shapes.window))
        return ad

    def decode_series(self, num_seqs: int, kv_tokens: int, longest: int, steps: int) -> dict | None:
        """``decode_step`` for ``steps`` consecutive steps as columns (``total`` and each
        component), identical values: lists for short runs, numpy arrays for long ones (as
        ``decode_totals``); None where ``decode_totals`` is None. No side effects (the roofline
        has no calibrated range to leave)."""
        parts = self._decode_parts(num_seqs, kv_tokens, longest, steps)
        if parts is None:
            return None
        gemm, other, comm, cpu, ad, total = parts
        full = (lambda v: [v] * steps) if isinstance(total, list) else (lambda v: np.full(steps, v))  # noqa: E731
        return {"total": total, "gemm": full(gemm), "attn_prefill": full(0.0), "attn_decode": ad, "comm": full(comm),
                "other_gpu": full(other), "cpu": full(cpu), "swap": full(0.0), "source": self.source}

    def host_link(self) -> HostLink:
        """What prices blocks moved over the host link (swaps, tier loads): the config's
        (``sim.kv.tiers.host_link``, set by ``make_cost_model``) or the card's link alone."""
        if self.link is None:
            block_bytes = self.block_size * kv_bytes_per_token_per_gpu(self.model, self.tp, self.pp, self.kv_dtype)
            self.link = HostLink(block_bytes, self.hw.host_bw)
        return self.link

    def _price(self, tokens: int, n: int, chunks, dec_n: int, dec_kv: int, dec_max: int, swapped: float) -> StepTime:
        """The StepTime of a step's aggregates (``step_time``'s, ``decode_step``'s). The fixed part
        of a step with one prefill chunk (all but its decode attention and swap: the same values,
        computed by ``_fixed_part`` once) is memoised by (tokens, sequences, chunk) where this class
        prices prefill attention and the dense part itself (pure functions, counting nothing out of
        range but what the dense part's count replays), or where a subclass enables it and says
        in ``_memo_fixed`` what else a hit counts (the kernel database); a memo that reaches
        ``STEP_MEMO_ENTRIES`` starts again empty."""
        if len(chunks) == 1 and self._step_memo is not None:  # the common mixed step
            key = (tokens, n, chunks[0])
            fixed = self._step_memo.get(key)
            if fixed is None:
                if len(self._step_memo) >= STEP_MEMO_ENTRIES:
                    self._step_memo.clear()
                fixed = self._step_memo[key] = self._memo_fixed(tokens, n, chunks)
            gemm, ap, comm, other, cpu, oor, again = fixed
            self._oor += again
        else:
            gemm, ap, comm, other, cpu, oor = self._fixed_part(tokens, n, chunks)
        # attention runs in every layer of every stage; sliding-window layers see at most W keys
        ad = 0.0
        if dec_n:
            full = self.layers_full
            mb = self._mb if self._mb is not None and self._mb.p is self.p else self._memory_bound_terms()
            if mb.inline:  # memory-bound, this class's attn_decode: its value, inlined
                K, QB, db, floor = mb.K, mb.QB, mb.db, mb.floor
                ad = full * (r if (r := (dec_kv * K + dec_n * QB) / db) >= floor else floor)
            else:
                ad = full * self.attn_decode(dec_n, dec_kv, dec_max)
            if self.layers_window:
                W = self.shapes.window
                ad = ad + self.layers_window * self.attn_decode(dec_n, min(dec_kv, dec_n * W), min(dec_max, W))
        self._oor += oor
        if self.p.grows():  # per token of the step; per context token of its sequences after it
            cpu = cpu + self.p.cpu_per_token_s * tokens + self.p.cpu_per_seq_ctx_s * (dec_kv + sum(q + c for q, c in chunks))
        swap = swapped if swapped else 0.0  # seconds over the host link (``host_link``)
        total = gemm + ap + ad + comm + other + cpu + swap
        return StepTime(total, gemm, ap, ad, comm, other, cpu, swap, self.source, oor & COUNT_MASK)

    def _memo_fixed(self, tokens: int, n: int, chunks) -> tuple:
        """A step-memo entry: ``_fixed_part`` and the out-of-range queries a hit counts besides
        the dense part's (none here: this class's prefill attention counts nothing)."""
        return (*self._fixed_part(tokens, n, chunks), 0)

    def _fixed_part(self, tokens: int, n: int, chunks) -> tuple[float, float, float, float, float, int]:
        """(gemm, attn_prefill, comm, other_gpu, cpu, out-of-range queries of the dense part) of a
        step: all of ``_price`` but the decode attention and the swap."""
        gemm, other, comm, oor = self._dense_part(tokens, n) if n else (0.0, 0.0, 0.0, 0)
        ap = 0.0
        if chunks:
            ap = self.layers_full * self.attn_prefill(chunks)
            if self.layers_window:
                ap += self.layers_window * self.attn_prefill_window(chunks)
        cpu = self.p.cpu_step_s + self.p.cpu_per_seq_s * n if n else 0.0
        return gemm, ap, comm, other, cpu, oor

    def out_of_range_total(self) -> int:
        return self._oor & COUNT_MASK
