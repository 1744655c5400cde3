"""Kernel-database pricing of MoE-family models: routed experts by their real shape and quant
mode, shared experts, dense first layers, and DeepSeek's MLA attention (``KernelDbMoeCostModel``,
a ``KernelDbCostModel`` chosen by ``load_kerneldb_cost_model`` for every MoE or MLA model; dense
models keep the base class unchanged).

Per decoder layer on one GPU, in addition to (or instead of) the base model's operators:

- Weight formats (``weight_formats``): the GEMM and MoE tables are read in the format the
  published checkpoint uses. fp8 DeepSeek-V3/R1 and Qwen3 MoE checkpoints are block-scaled
  (128x128 tiles): ``fp8_block``; gpt-oss (``mxfp4``) quantises only its routed experts:
  ``w4a16_mxfp4`` experts (TRT-LLM: ``w4a8_mxfp4_mxfp8`` where measured, its Blackwell kernel),
  bf16 GEMMs elsewhere; bf16 and nvfp4 as named.
- Routed experts: the framework's ``moe_perf`` table (balanced routing, no expert parallelism,
  expert weights tensor-parallel over ``moe_tp`` = tp) at (hidden, intermediate, top-k, experts,
  tp, format), by tokens; the fastest kernel the collection measured. Shapes it lacks: roofline.
- Router (bf16), shared experts and dense first layers (gate-up, down): ``gemm_perf``.
- MLA, vLLM and TRT-LLM: the ``mla_*_module_perf`` tables time the whole attention block
  (q/kv down-projection ``qkv_a``, ``q_b``, attention with ``kv_b``, ``o``) per (heads per GPU,
  batch, length, GEMM format bf16/fp8_block, KV dtype). The step composes GEMMs per token and
  attention per sequence, so the block is split: the attention part is the module time minus the
  module's ``qkv_a``, ``q_b`` and ``o`` GEMMs (``gemm_perf`` in the module's format, at batch x
  length tokens for prefill, batch tokens for decode), kept at least ``MIN_RESIDUAL`` of the
  module; the step adds back the GEMMs in the model's own format. A homogeneous prefill or
  decode step at a table point thus costs the module time.
- MLA, SGLang (no module tables): ``context_mla_perf`` (prefill attention) plus the ``kv_b``
  up-projection of the attended tokens from ``gemm_perf``; ``generation_mla_perf`` (decode, over
  past tokens) plus the two absorption BMMs of ``mla_bmm_perf`` (``mla_gen_pre`` / ``post``, fp8
  where the weights are fp8 and the table has it, else bf16).
- Prefill chunks and decode batches use the same (batch, RMS length) / (batch, mean KV length)
  keys and causal-FLOP share as the base model's attention.
- Sliding-window layers (gpt-oss): prefill from the context-attention rows measured with the
  model's window (same keys; the share is of attended query-key pairs within the window),
  decode from the full-attention table at min(KV, window) tokens per sequence.

Rows are read from the installed package (``kerneldb_data``) and cached as ``.npz`` beside the
base grids (``<system>__<framework>__<version>__moe.npz``).
"""
from __future__ import annotations

import math

import numpy as np

from sim.cost import kerneldb_data as kd
from sim.cost.kerneldb import Grid, KernelDbCostModel, _attn_grid
from sim.cost.roofline import RooflineCostModel

CACHE_TAG = "moe8"  # bump when the derived layout changes
MOE_CODE = {"bfloat16": 0, "fp8": 1, "fp8_block": 2, "nvfp4": 3, "w4a16_mxfp4": 4, "w4a8_mxfp4_mxfp8": 5, "int4_wo": 6}
MXFP4_MOE = {"trtllm": ("w4a8_mxfp4_mxfp8", "w4a16_mxfp4")}
"""MoE formats of mxfp4 experts by framework, first measured one wins: TRT-LLM runs gpt-oss's
experts with mxfp8 activations where it has the kernel (Blackwell); others (and TRT-LLM on
Hopper) dequantise to bf16."""
DIST_CODE = {"balanced": 0, "power_law_1.01": 1, "power_law_1.2": 2}
"""Token-to-expert distributions of the ``moe_perf`` rows (``cost.expert_distribution``)."""
A2A_CODE = {"ll": 0, "ht": 1}
"""DeepEP kernels of the ``moe_a2a_perf`` rows: low-latency and high-throughput (normal) mode."""
WIDEEP_DIST = {"balanced": "uniform", "power_law_1.01": "power_law_1.01", "power_law_1.2": "power_law_1.2"}
"""``cost.expert_distribution`` -> the distribution of SGLang's ``wideep_generation_moe_perf`` rows
(their balanced routing is called ``uniform``)."""
SGLANG_DEEPEP_SOURCE = ("aiconfigurator-core 0.12.0: SGLang's wideep_generation_moe_perf (kernel_source deepepmoe: the "
                        "experts of SGLang's DeepEP MoE, DeepGEMM's masked grouped GEMM) and wideep_deepep_ll_perf "
                        "(DeepEP low-latency dispatch and combine by tokens per rank), the tables its SGLang DeepSeek "
                        "large-EP graph prices decode from (sdk/models/blocks/moe.py _large_ep_block_ops)")
"""Where an SGLang expert group with ``cost.moe_dispatch: deepep_ll`` is priced from."""
MLA_GEMM_CODE = {"bfloat16": 0, "fp8_block": 2}
MIN_RESIDUAL = 0.1
"""Floor of an MLA module's attention part, as a fraction of the module time (the subtraction
of separately timed GEMMs can leave less than the attention kernel; counted in the notes)."""

FP8_BLOCK_MODELS = ("deepseek-v3", "deepseek-r1", "qwen3-235b-a22b", "qwen3-30b-a3b", "kimi-k2", "glm-5",
                    "minimax-m2.5")
"""Catalog models whose published fp8 checkpoints are block-scaled (128x128 weight tiles: the
``weight_block_size`` of their config.json ``quantization_config``; Kimi-K2-Instruct, zai-org/GLM-5-FP8
and MiniMax-M2.5 as shipped in aiconfigurator-core 0.12.0's model_configs)."""
FP8_CHANNEL_MODELS = ("llama-4-scout", "llama-4-maverick")
"""Catalog models whose fp8 checkpoints scale per output channel with dynamic per-token activation
scales (meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8, the FP8-dynamic Scout checkpoints). Their
experts run an fp8 grouped GEMM with finer scales than per-tensor: priced from the block-scaled
``fp8_block`` MoE rows, not the per-tensor ``fp8`` rows (vLLM 0.24's per-tensor fp8 MoE rows are
several times slower than its ``fp8_block`` and bf16 rows at decode sizes: not the kernel such a
checkpoint runs); their dense GEMMs from the per-tensor ``fp8`` GEMM table."""


BF16_ATTENTION_NVFP4 = ("deepseek-r1", "kimi-k2.5")
"""Catalog models whose NVFP4 checkpoints keep the attention projections in bf16: NVIDIA's DeepSeek-R1
NVFP4 checkpoints are made by TensorRT Model Optimizer's DeepSeek example, whose ``ptq.py`` disables
quantisation of ``*attn*`` unless asked (NVIDIA/TensorRT-Model-Optimizer ``examples/deepseek/ptq.py``;
``quantize_to_nvfp4.py`` writes the modules it did not quantise as bf16), and aiconfigurator-core 0.12.0
prices them so (``sdk/models/deepseek.py``: "Kimi-K2.5/R1 NVFP4 exclude the whole self_attn block from
quantization"); ``nvidia/Kimi-K2.5-NVFP4``'s ``quantization_config.ignore`` lists ``self_attn*`` of every
layer (aiconfigurator-core 0.12.0 ``model_configs/nvidia--Kimi-K2.5-NVFP4_config.json``). Their routed and
shared experts and dense MLPs are NVFP4."""
ATTENTION_GEMMS = ("qkv", "o", "qkv_a", "q_b", "kv_b")
"""The attention projections (``RooflineCostModel``'s GEMM names)."""


def attention_format(model, dtype: str) -> str | None:
    """The GEMM table dtype of the attention projections where the checkpoint keeps them in another
    format than its other GEMMs (``BF16_ATTENTION_NVFP4``), else None."""
    return "bfloat16" if dtype == "nvfp4" and model.id in BF16_ATTENTION_NVFP4 else None


TRTLLM_MLA_NORM_IN_ALLREDUCE = (
    "TensorRT-LLM tensorrt_llm/_torch/models/modeling_deepseekv3.py, DeepseekV3DecoderLayer: with TP > 1 and "
    "no attention DP (enable_fusion, on unless TRTLLM_DEEPSEEK_EAGER_FUSION_DISABLED=1) the MoE layers set "
    "PRE_MOE_FUSION / POST_MOE_FUSION and the dense layers POST_MLP_FUSION: the post-attention and the next "
    "layer's input RMSNorm run inside the all-reduce (AllReduceFusionOp.RESIDUAL_RMS_NORM)")
"""Where TRT-LLM's MLA (DeepSeek-V3 architecture) models fuse their norms into the all-reduce."""


def trtllm_norm_in_allreduce(framework: str, model, tp: int, dp: int) -> bool:
    """Whether a step's per-layer RMSNorms run inside TRT-LLM's all-reduce
    (``TRTLLM_MLA_NORM_IN_ALLREDUCE``): TRT-LLM, an MLA model (its DeepSeek-V3 decoder layer), TP > 1,
    no attention DP. (The dense first layers' post-attention norm is fused only for NVFP4 weights,
    ``PRE_MLP_FUSION``: three norms of 122 in DeepSeek-V3, counted as fused.)"""
    return framework == "trtllm" and bool(model.is_mla) and tp > 1 and dp <= 1


TRTLLM_SHARED_OVERLAP = (
    "TensorRT-LLM tensorrt_llm/_torch/models/modeling_deepseekv3.py, Deepseekv3MoE.forward: the routed experts "
    "(router GEMM and experts) and the shared experts run through maybe_execute_in_parallel on the main and an "
    "auxiliary stream (AuxStreamType.MoeShared); tensorrt_llm/_torch/modules/multi_stream_utils.py: multi-stream is "
    "only enabled when CUDA graph is turned on (decode-only batches; InferenceMAX's DeepSeek-R1 scripts and "
    "recipes set cuda_graph_config up to their max batch)")
"""Where TRT-LLM's DeepSeek-V3 MoE layers overlap their shared and routed experts."""


def trtllm_shared_overlap(framework: str, model, dp: int) -> bool:
    """Whether a decode-only step runs the shared experts beside the routed ones
    (``TRTLLM_SHARED_OVERLAP``): TRT-LLM, an MLA model with shared experts (its DeepSeek-V3 MoE layer),
    no attention DP (an expert group's step is composed apart, ``sim.cost.expert_parallel``)."""
    return framework == "trtllm" and bool(model.is_mla) and bool(model.num_shared_experts) and dp <= 1


def handles(model) -> bool:
    """True for the models this module prices (any MoE or MLA layout)."""
    return bool(model.is_moe or model.is_mla or model.num_shared_experts or model.first_dense_layers)


def weight_formats(model, dtype: str) -> tuple[str, str]:
    """(GEMM table dtype, MoE table dtype) of a model served with weight dtype ``dtype``."""
    if dtype == "mxfp4":
        return "bfloat16", "w4a16_mxfp4"
    if dtype == "int4":  # weight-only int4 experts (group 32): the database's int4_wo MoE rows
        return "bfloat16", "int4_wo"
    g = kd.GEMM_DTYPE[dtype]
    if g == "fp8" and model.id in FP8_BLOCK_MODELS:
        g = "fp8_block"
    if g == "fp8" and model.id in FP8_CHANNEL_MODELS:
        return g, "fp8_block"
    return g, g


# ---------------------------------------------------------------------------- deriving rows

def _newest(system: str, family: str, framework: str, table: str, version: str) -> str | None:
    have = kd.versions(system, family, framework, table)
    return version if version in have else (have[-1] if have else None)


def derive(system: str, framework: str, version: str) -> dict[str, np.ndarray]:
    """MoE, MLA and MLA-BMM rows of (system, framework, version) as flat float arrays."""
    d = kd.data_dir(system)
    out: dict[str, np.ndarray] = {}
    meta: dict[str, str] = {}
    mv = _newest(system, "moe", framework, "moe_perf", version)
    if mv:
        mo = kd._read(d / "moe" / framework / mv / "moe_perf.parquet")
        mo = mo[mo["distribution"].isin(DIST_CODE) & mo["moe_dtype"].isin(MOE_CODE)]
        meta["moe"] = f"{framework} {mv}"
        out["moe|rows"] = np.column_stack(
            [mo[c].to_numpy(dtype=float) for c in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                                    "moe_tp_size")]
            + [mo["moe_dtype"].map(MOE_CODE).to_numpy(dtype=float), mo["latency"].to_numpy(dtype=float) / 1e3,
               mo["moe_ep_size"].to_numpy(dtype=float), mo["distribution"].map(DIST_CODE).to_numpy(dtype=float)])
    cv = _newest(system, "mla", framework, "mla_context_module_perf", version)
    gv = _newest(system, "mla", framework, "mla_generation_module_perf", version)
    kind = "module" if cv and gv else None
    if kind is None:
        cv = _newest(system, "mla", framework, "context_mla_perf", version)
        gv = _newest(system, "mla", framework, "generation_mla_perf", version)
        kind = "kernel" if cv and gv else None
    if kind:
        meta["mla"] = f"{framework} {cv} ({'attention-block modules' if kind == 'module' else 'attention kernels'})"
        for name, v, table, length in (
                ("mlactx", cv, "mla_context_module_perf" if kind == "module" else "context_mla_perf", "isl"),
                ("mlagen", gv, "mla_generation_module_perf" if kind == "module" else "generation_mla_perf", "step")):
            a = kd._read(d / "mla" / framework / v / f"{table}.parquet")
            gcode = a["gemm_type"].map(MLA_GEMM_CODE) if "gemm_type" in a else -1.0
            a = a.assign(gcode=gcode)
            a = a[a["gcode"].notna()]
            ln = a[length].to_numpy(dtype=float)
            if name == "mlagen" and kind == "kernel":
                ln = ln + 1.0  # past tokens + the new one
            out[f"{name}|rows"] = np.column_stack([
                a["batch_size"].to_numpy(dtype=float), ln, a["num_heads"].to_numpy(dtype=float),
                (a["kv_cache_dtype"] == "fp8").to_numpy(dtype=float), a["gcode"].to_numpy(dtype=float),
                a["latency"].to_numpy(dtype=float) / 1e3])
        out["mla|kind"] = np.array([kind])
    bv = _newest(system, "mla_bmm", framework, "mla_bmm_perf", version)
    if bv:
        b = kd._read(d / "mla_bmm" / framework / bv / "mla_bmm_perf.parquet")
        b = b[b["bmm_dtype"].isin(("bfloat16", "fp8"))]
        meta["mla_bmm"] = f"{framework} {bv}"
        out["mlabmm|rows"] = np.column_stack([
            b["num_tokens"].to_numpy(dtype=float), b["num_heads"].to_numpy(dtype=float),
            (b["op_name"] == "mla_gen_pre").to_numpy(dtype=float), (b["bmm_dtype"] == "fp8").to_numpy(dtype=float),
            b["latency"].to_numpy(dtype=float) / 1e3])
    # sliding-window prefill: the context-attention rows measured with a window
    a = kd._read(d / "attention" / framework / version / "context_attention_perf.parquet",
                 ["kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
                  "kv_cache_dtype", "window_size", "latency"])
    a = a[(a["window_size"] > 0) & (a["attn_dtype"] == "bfloat16")]
    if len(a):
        src = a["kernel_source"].value_counts().idxmax()
        a = a[a["kernel_source"] == src]
        meta["attention ctx window"] = str(src)
        out["ctxwin|rows"] = np.column_stack([
            a[c].to_numpy(dtype=float) for c in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")]
            + [(a["kv_cache_dtype"] == "fp8").to_numpy(dtype=float), a["latency"].to_numpy(dtype=float) / 1e3,
               a["window_size"].to_numpy(dtype=float)])
    # DeepEP dispatch / combine (vLLM's and TRT-LLM's moe_a2a_perf: one node of 8 GPUs), bf16 messages
    av = kd.versions(system, "comm", framework, "moe_a2a_perf")
    if av:
        a2 = kd._read(d / "comm" / framework / av[-1] / "moe_a2a_perf.parquet")
        kind = a2["comm_backend"].str.extract(r"deepep_(ll|ht)$")[0].map(A2A_CODE)
        a2 = a2.assign(kind=kind)[kind.notna() & a2["comm_dtype"].isin(("default", "bfloat16"))]
        if len(a2):
            meta["moe_a2a"] = f"{framework} {av[-1]}"
            out["a2a|rows"] = np.column_stack(
                [a2["kind"].to_numpy(dtype=float), (a2["phase"] == "dispatch").to_numpy(dtype=float)]
                + [a2[c].to_numpy(dtype=float) for c in ("ep_size", "hidden_size", "topk", "num_experts", "num_tokens")]
                + [a2["latency"].to_numpy(dtype=float) / 1e3])
    # SGLang's DeepEP tables (``SGLANG_DEEPEP_SOURCE``): low-latency dispatch / combine by tokens per
    # rank (measured on one node; no EP column: ep_size 0 marks them) and the DeepEP MoE experts
    if framework == "sglang":
        lv = kd.versions(system, "comm", framework, "wideep_deepep_ll_perf")
        if lv:
            ll = kd._read(d / "comm" / framework / lv[-1] / "wideep_deepep_ll_perf.parquet")
            ll = ll[ll["node_num"] == 1]
            if len(ll):
                meta["moe_a2a"] = f"{framework} {lv[-1]} wideep_deepep_ll"
                rows = [np.column_stack([np.zeros(len(ll)), np.full(len(ll), float(ph == "dispatch")), np.zeros(len(ll))]
                                        + [ll[c].to_numpy(dtype=float) for c in ("hidden_size", "num_topk", "num_experts",
                                                                                 "num_token")]
                                        + [ll[f"{ph}_avg_t_us"].to_numpy(dtype=float) / 1e6])
                        for ph in ("dispatch", "combine")]
                out["a2a|rows"] = np.vstack(rows)
        wv = _newest(system, "moe", framework, "wideep_generation_moe_perf", version)
        if wv:
            w = kd._read(d / "moe" / framework / wv / "wideep_generation_moe_perf.parquet")
            w = w[w["moe_dtype"].isin(MOE_CODE) & w["distribution"].isin(WIDEEP_DIST.values())
                  & (w["moe_tp_size"] == 1)]
            if len(w):
                meta["wideep moe"] = f"{framework} {wv} wideep_generation_moe_perf"
                inv = {v: DIST_CODE[k] for k, v in WIDEEP_DIST.items()}
                out["wideep|rows"] = np.column_stack(
                    [w[c].to_numpy(dtype=float) for c in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                                          "moe_tp_size")]
                    + [w["moe_dtype"].map(MOE_CODE).to_numpy(dtype=float), w["latency"].to_numpy(dtype=float) / 1e3,
                       w["moe_ep_size"].to_numpy(dtype=float), w["distribution"].map(inv).to_numpy(dtype=float)])
    # attention-DP exchange: NCCL all-gather and reduce-scatter by GPU count (bf16 messages)
    nccl_v = kd.versions(system, "comm", "nccl", "nccl_perf")
    if nccl_v:
        nc = kd._read(d / "comm" / "nccl" / nccl_v[-1] / "nccl_perf.parquet")
        nc = nc[nc["op_name"].isin(("all_gather", "reduce_scatter")) & (nc["nccl_dtype"] == "half")]
        if len(nc):
            meta["dp exchange"] = f"nccl {nccl_v[-1]}"
        for (op, gpus), g in nc.groupby(["op_name", "num_gpus"]):
            (x,), t = kd._grid(g, ["message_size"])
            out[f"{op}|{int(gpus)}|x"], out[f"{op}|{int(gpus)}|t"] = x, t
    out["moe|meta"] = np.array([f"{k}={v}" for k, v in sorted(meta.items())])
    return out


def load(system: str, framework: str, version: str, *, use_cache: bool = True) -> dict[str, np.ndarray]:
    """The rows of ``derive``, from the cache when present (same folder as the base grids)."""
    path = kd.cache_root() / f"v{kd.CACHE_FORMAT}" / f"{system}__{framework}__{version}__{CACHE_TAG}.npz"
    return kd.cached_arrays(path, lambda: derive(system, framework, version), use_cache)


def with_moe_rows_of(arrays: dict, system: str, framework: str, hardware: str, *,
                     use_cache: bool = True) -> dict[str, np.ndarray]:
    """``arrays`` with the routed-expert rows of another framework's collection on ``system`` (its
    newest version) in place of their own (``cost.moe_table``); ``moe|meta`` names them."""
    _, version = kd.resolve(hardware, framework, None)
    other = load(system, framework, version, use_cache=use_cache)
    if "moe|rows" not in other:
        raise kd.KernelDbUnavailable(f"cost.moe_table: {framework} {version} has no moe_perf rows for {system}")
    meta = dict(m.split("=", 1) for m in arrays.get("moe|meta", np.array([])).tolist())
    meta["moe"] = dict(m.split("=", 1) for m in other["moe|meta"].tolist())["moe"] + " (cost.moe_table)"
    return {**arrays, "moe|rows": other["moe|rows"],
            "moe|meta": np.array([f"{k}={v}" for k, v in sorted(meta.items())])}


def _table2(rows: np.ndarray) -> Grid | None:
    """A (batch, length) grid of the minimum latency over rows (batch, length, latency), NaN
    cells filled along batch, then length."""
    if not len(rows):
        return None
    b, s, t = kd.min_grid(rows[:, 0], rows[:, 1], rows[:, 2])
    if np.isnan(t).any() or len(b) < 2 or len(s) < 2:
        return None
    return Grid([b, s], t)


def _table1(x: np.ndarray, t: np.ndarray) -> Grid | None:
    if len(x) < 2:
        return None
    xs = np.unique(x)
    return Grid([xs], np.array([t[x == v].min() for v in xs]))


# ---------------------------------------------------------------------------- the cost model

class KernelDbMoeCostModel(KernelDbCostModel):
    """``KernelDbCostModel`` for MoE and MLA models: experts, shared experts, dense first layers
    and MLA attention from the database where it has the table, the roofline elsewhere (named in
    ``notes``)."""

    def __init__(self, model, hw, *, framework: str, version: str, system: str, arrays: dict, **kw):
        RooflineCostModel.__init__(self, model, hw, **kw)
        self._start_tables(framework, version, system, arrays)
        self._group_memo: dict = {}  # moe and dp_exchange by tokens (``_memo``)
        self.gemm_dtype, self.moe_dtype = weight_formats(model, self.dtype)
        self.attn_gemm_dtype = attention_format(model, self.dtype)
        if self.attn_gemm_dtype:
            self.notes.append(f"attention projections: {self.attn_gemm_dtype} GEMMs (the {self.dtype} checkpoint keeps "
                              f"them unquantised), the other GEMMs {self.gemm_dtype}")
        if model.id in FP8_CHANNEL_MODELS and self.moe_dtype == "fp8_block":
            self.notes.append("fp8 experts of a per-channel / dynamic fp8 checkpoint: the fp8_block MoE rows (the "
                              "per-tensor fp8 rows time another kernel, several times slower at decode sizes)")
        self.meta.update(dict(s.split("=", 1) for s in arrays.get("moe|meta", np.array([])).tolist()))
        # the tables' own composition: TRT-LLM's static fp8 scales and fused elementwise kernels
        # (``kerneldb.engine_kernels``) are applied to dense models only, but for the norms of
        # TRT-LLM's DeepSeek-V3 decoder layers (``TRTLLM_MLA_NORM_IN_ALLREDUCE``)
        fused = frozenset({"rmsnorm"}) if trtllm_norm_in_allreduce(framework, model, self.tp, self.dp) else frozenset()
        self.engine = {"static_fp8": False, "fp8_input": frozenset(), "fused": fused}
        self.shared_overlap = trtllm_shared_overlap(framework, model, self.dp)
        if self.shared_overlap:
            self.notes.append("decode-only steps: shared experts on a second stream beside the router and routed "
                              "experts (TRT-LLM Deepseekv3MoE, CUDA graphs): the longer of the two per MoE layer")
        if framework == "trtllm":
            self.notes.append("TRT-LLM kernel fusions (static fp8 scales, rotary/KV write in attention"
                              + (") are modelled for dense models only; the norms run inside the all-reduce"
                                 " (DeepSeek-V3 decoder layers, TP > 1 without attention DP)" if fused else
                                 ", norm in the all-reduce) are modelled for dense models only")
                              + ": priced here as the tables compose them")
        s = self.shapes
        mla_gemm = "fp8_block" if self.gemm_dtype in ("fp8", "fp8_block") else "bfloat16"
        self._load_gemms(arrays, ("bfloat16", self.gemm_dtype, *((mla_gemm,) if s.mla else ())))
        if self.gemm_dtype == "fp8_block" and "gemm|fp8|t" in arrays and self._launch_bound(arrays):
            self.notes.append("block-scaled fp8 GEMMs: from the per-tensor fp8 table (this collection's fp8_block "
                              "GEMMs take over twice as long at one token: launch-bound, not what a CUDA-graph "
                              "engine sees)")
            self.gemm_dtype = "fp8"
            self._gemms["fp8"] = Grid([arrays[f"gemm|fp8|{a}"] for a in "mnk"], arrays["gemm|fp8|t"])
        self._load_allreduce(arrays)
        if s.mla:
            self._mla_init(arrays, mla_gemm)
        else:
            self._load_attention(arrays)
        self._ctx_win = None
        if s.window_layers:
            rows = arrays.get("ctxwin|rows")
            win = None if rows is None else _attn_grid(rows[rows[:, 7] == s.window][:, :7], s.q_heads, s.kv_heads,
                                                       s.head_dim, self.kv_fp8, "q")
            if win is None:
                self.notes.append(f"prefill attention of the {s.window_layers} sliding-window layers: roofline "
                                  f"(no context-attention rows with a {s.window}-token window)")
            else:
                self._ctx_win = win[0]
                self.notes += [f"windowed prefill attention {n}" for n in (win[1],) if n]
            self.notes.append(f"decode attention of the {s.window_layers} sliding-window layers: the full-attention "
                              f"table at min(KV, {s.window}) tokens per sequence")
        self._exchange = {op: Grid([arrays[f"{op}|{self.tp * self.dp}|x"]], arrays[f"{op}|{self.tp * self.dp}|t"])
                          for op in ("all_gather", "reduce_scatter") if f"{op}|{self.tp * self.dp}|x" in arrays}
        self._a2a = self._a2a_grids(arrays.get("a2a|rows")) if self.moe_dispatch != "allgather" else None
        if self.dp > 1 and self._a2a is not None and framework == "sglang":
            self.notes.append(f"attention-DP exchange: DeepEP ll dispatch + combine, {self.meta.get('moe_a2a')} (one node's "
                              f"rows, used for the {self.tp * self.dp} GPUs of the group), by each rank's tokens")
        elif self.dp > 1 and self._a2a is not None:
            self.notes.append(f"attention-DP exchange: DeepEP {self.moe_dispatch[-2:]} dispatch + combine, moe_a2a_perf "
                              f"{self.meta.get('moe_a2a')} at {self.tp * self.dp} GPUs, by each rank's tokens")
        elif self.dp > 1:
            self.notes.append(
                (f"attention-DP exchange: no {self.moe_dispatch} moe_a2a_perf rows for {self.tp * self.dp} GPUs of this "
                 f"shape, priced as " if self.moe_dispatch != "allgather" else "attention-DP exchange: ")
                + f"all-gather before the experts, reduce-scatter after, over {self.tp * self.dp} GPUs: "
                + (f"nccl_perf {self.meta.get('dp exchange')}" if len(self._exchange) == 2 else "roofline (not in nccl_perf)"))
        self._moe = self._moe_grid(arrays.get("moe|rows"))
        wide = None
        if framework == "sglang" and self.moe_dispatch == "deepep_ll" and self.dp > 1:  # SGLang's DeepEP MoE
            wide = self._moe_grid(arrays.get("wideep|rows"))
            if wide is not None:
                self._moe = wide
        for fmt in MXFP4_MOE.get(framework, ()) if self.moe_dtype == "w4a16_mxfp4" else ():
            grid = self._moe_grid(arrays.get("moe|rows"), fmt)
            if grid is not None:
                self.moe_dtype, self._moe = fmt, grid
                break
        if s.num_experts and self._moe is None:
            self.notes.append(f"MoE experts: roofline (no {self.moe_dtype} moe_perf rows of hidden {s.hidden}, "
                              f"intermediate {model.expert_intermediate}, top-{s.top_k} of {s.num_experts}, "
                              f"moe_tp {s.moe_tp}, moe_ep {s.ep}, {self._moe_dist})")
        elif s.num_experts and wide is not None:
            self.notes.append(f"MoE experts: SGLang's DeepEP MoE (DeepGEMM masked grouped GEMM), {self.meta.get('wideep moe')} "
                              f"{self.moe_dtype} rows at moe_ep {s.ep}, {self._moe_dist} routing, by the expert group's "
                              "tokens" + (f"; x{self.expert_skew:g} expert-load skew" if self.expert_skew != 1.0 else ""))
        elif s.num_experts:
            self.notes.append(f"MoE experts: moe_perf {self.meta.get('moe')} {self.moe_dtype} rows at moe_tp {s.moe_tp}, "
                              f"moe_ep {s.ep}, {self._moe_dist} routing, by the expert group's tokens"
                              + (f"; x{self.expert_skew:g} expert-load skew" if self.expert_skew != 1.0 else ""))
        self.notes.append("norms, activation, rotary, embedding, KV write, sampling, logits all-gather: roofline "
                          "(no table)")
        unused = (("attention ctx", "attention gen") if s.mla else ("mla", "mla_bmm")) \
            + (("mla_bmm",) if s.mla and self._mla_kind != "kernel" else ()) \
            + (() if self._ctx_win is not None else ("attention ctx window",)) + (() if s.num_experts else ("moe",)) \
            + (() if self.dp > 1 else ("dp exchange",)) + (() if self._a2a is not None and self.dp > 1 else ("moe_a2a",)) \
            + (() if wide is not None else ("wideep moe",))
        self.meta = {k: v for k, v in self.meta.items() if k not in unused}

    # ------------------------------------------------------------------ tables
    def _launch_bound(self, arrays: dict) -> bool:
        """True when the fp8_block GEMM table at one token (hidden x 2048, the smallest common
        shape) is over twice the per-tensor fp8 one."""
        blk = self._gemms["fp8_block"]
        fp8 = Grid([arrays[f"gemm|fp8|{a}"] for a in "mnk"], arrays["gemm|fp8|t"])
        x = (1.0, 7168.0, 2048.0)
        return blk(blk.clamp(x)[0]) > 2.0 * fp8(fp8.clamp(x)[0])

    def _moe_grid(self, rows, fmt: str | None = None) -> Grid | None:
        """The routed experts' time by the expert group's tokens: ``moe_perf`` rows of this shape and
        format at the real ``moe_tp`` / ``moe_ep`` split and the configured token distribution
        (``_moe_dist`` says which was used: the balanced rows where the skewed ones are missing)."""
        s, m = self.shapes, self.model
        fmt = fmt or self.moe_dtype
        self._moe_dist = self.expert_distribution
        if not s.num_experts or rows is None:
            return None
        sel = rows[(rows[:, 1] == m.hidden_size) & (rows[:, 2] == m.expert_intermediate) & (rows[:, 3] == s.top_k)
                   & (rows[:, 4] == s.num_experts) & (rows[:, 5] == s.moe_tp) & (rows[:, 6] == MOE_CODE[fmt])
                   & (rows[:, 8] == s.ep)]
        pick = sel[sel[:, 9] == DIST_CODE[self.expert_distribution]]
        if not len(pick) and self.expert_distribution != "balanced":
            pick, self._moe_dist = sel[sel[:, 9] == 0], "balanced (no rows of the chosen distribution)"
        return _table1(pick[:, 0], pick[:, 7]) if len(pick) else None

    def _a2a_grids(self, rows) -> tuple[Grid, Grid] | None:
        """(dispatch, combine) by tokens per rank: the ``moe_a2a_perf`` rows of the configured DeepEP
        mode at this expert group's GPUs and this model's hidden size, top-k and experts (SGLang's
        ``wideep_deepep_ll_perf`` rows, ep_size 0: measured on one node, for any group)."""
        if rows is None or not self.shapes.num_experts:
            return None
        m, s = self.model, self.shapes
        sel = rows[(rows[:, 0] == A2A_CODE[self.moe_dispatch[-2:]]) & ((rows[:, 2] == self.tp * self.dp) | (rows[:, 2] == 0))
                   & (rows[:, 3] == m.hidden_size) & (rows[:, 4] == s.top_k) & (rows[:, 5] == s.num_experts)]
        grids = [_table1(sel[sel[:, 1] == ph][:, 6], sel[sel[:, 1] == ph][:, 7]) for ph in (1.0, 0.0)]
        return None if None in grids else (grids[0], grids[1])

    def dp_exchange(self, tokens: int) -> float:
        if self.dp <= 1 or tokens <= 0:
            return 0.0
        return self._memo(self._group_memo, ("exchange", tokens), lambda: self._exchange_lookup(tokens))

    def _exchange_lookup(self, tokens: int) -> float:
        if self._a2a is not None:  # each rank dispatches and combines its own tokens
            per = float(max(1, -(-tokens // self.dp)))
            roof = lambda x: RooflineCostModel.dp_exchange(self, int(x[0]) * self.dp) / 2  # noqa: E731
            return sum(self._lookup(g, roof, (per,)) for g in self._a2a)
        if len(self._exchange) < 2:
            return super().dp_exchange(tokens)
        world, elements = self.tp * self.dp, float(tokens * self.shapes.hidden)
        roof = lambda x: RooflineCostModel.collective(self, "all_gather", 2.0 * x[0], world)  # noqa: E731
        return sum(self._lookup(g, roof, (elements,)) for g in self._exchange.values())

    def moe(self, tokens: int) -> float:
        """The routed experts of one MoE layer for ``tokens`` tokens (memoised by tokens with the
        counts replayed, ``_memo``: an expert group asks for every rank's and the group's tokens
        at each step)."""
        if self._moe is None:
            return super().moe(tokens)
        return self._memo(self._group_memo, ("moe", tokens), lambda: self._moe_lookup(tokens))

    def _moe_lookup(self, tokens: int) -> float:
        roof = lambda x: RooflineCostModel.moe(self, max(1, round(x[0]))) / self.expert_skew  # noqa: E731
        return self._lookup(self._moe, roof, (float(tokens),)) * self.expert_skew

    def _mla_init(self, arrays: dict, mla_gemm: str) -> None:
        s = self.shapes
        kind = str(arrays["mla|kind"][0]) if "mla|kind" in arrays else None
        self._mla_kind, self._bmm = kind, {}
        self._mla_ctx = self._mla_gen = None
        if kind is None:
            self.notes.append("MLA attention: roofline (no MLA table for this framework)")
            return
        grids = {}
        for name in ("mlactx", "mlagen"):
            r = arrays[f"{name}|rows"]
            gcode = MLA_GEMM_CODE[mla_gemm] if kind == "module" else -1.0
            base = r[(r[:, 4] == gcode)]
            sel = base[(base[:, 2] == s.q_heads) & (base[:, 3] == float(self.kv_fp8))]
            if not len(sel):
                sel = base[base[:, 2] == s.q_heads]
                if len(sel):
                    self.notes.append(f"MLA {name[3:]} with a {'bf16' if self.kv_fp8 else 'fp8'} KV cache "
                                      f"(the table lacks the other)")
            grids[name] = _table2(sel[:, [0, 1, 5]]) if len(sel) else None
            if grids[name] is None:
                self.notes.append(f"MLA {'prefill' if name == 'mlactx' else 'decode'} attention: roofline "
                                  f"({s.q_heads} heads per GPU not in the table)")
        self._mla_ctx, self._mla_gen = grids["mlactx"], grids["mlagen"]
        if kind == "module":
            floored = 0
            sub = self.gemm_dtype if mla_gemm == "fp8_block" else mla_gemm  # fp8 where fp8_block is launch-bound
            for name, g in (("mlactx", self._mla_ctx), ("mlagen", self._mla_gen)):
                if g is None:
                    continue
                b, ln = (np.exp(np.array(a)) for a in g.la)
                t = np.exp(g.lt)
                for i, bi in enumerate(b):
                    for j, lj in enumerate(ln):
                        m = int(round(bi * lj)) if name == "mlactx" else int(round(bi))
                        oor = self._oor
                        gem = sum(self._gemm_mnk(m, *s.gemms[op], sub) for op in ("qkv_a", "q_b", "o"))
                        self._oor = oor
                        left = t[i, j] - gem
                        if left < MIN_RESIDUAL * t[i, j]:
                            left, floored = MIN_RESIDUAL * t[i, j], floored + 1
                        t[i, j] = left
                g.lt = np.log(t)
            self.notes.append(f"MLA attention: {self.meta.get('mla')}, module time ({mla_gemm} GEMMs) less "
                              f"its qkv_a/q_b/o GEMMs ({sub} table); {floored} cells held at {MIN_RESIDUAL:.0%} "
                              f"of the module")
        else:
            rows = arrays.get("mlabmm|rows")
            fp8 = 1.0 if self.gemm_dtype in ("fp8", "fp8_block") else 0.0
            for pre in (1.0, 0.0):
                g = None
                if rows is not None:
                    sel = rows[(rows[:, 1] == s.q_heads) & (rows[:, 2] == pre)]
                    pick = sel[sel[:, 3] == fp8] if (sel[:, 3] == fp8).any() else sel[sel[:, 3] == 0.0]
                    g = _table1(pick[:, 0], pick[:, 4]) if len(pick) else None
                self._bmm[pre] = g
            if None in self._bmm.values():
                self.notes.append(f"MLA decode absorption BMMs: not in mla_bmm_perf for {s.q_heads} heads per "
                                  f"GPU, left out")
            self.notes.append(f"MLA attention: {self.meta.get('mla')}, kv_b up-projection of prefill from gemm_perf, "
                              f"decode absorption BMMs from mla_bmm_perf")

    # ------------------------------------------------------------------ operators
    def gemm(self, op: str, m: int) -> float:
        if m <= 0:
            return 0.0
        n, k = self.shapes.gemms[op]
        if op in ("lm_head", "router"):
            dt = "bfloat16"
        elif self.attn_gemm_dtype and op in ATTENTION_GEMMS:
            dt = self.attn_gemm_dtype
        else:
            dt = self.gemm_dtype
        return self._gemm_mnk(m, n, k, dt)

    def attn_prefill(self, chunks) -> float:
        if not self.shapes.mla:
            return super().attn_prefill(chunks)
        if not chunks:
            return 0.0
        if self._mla_ctx is None:
            return RooflineCostModel.attn_prefill(self, chunks)
        return self._memo(self._attn_p, tuple(chunks), lambda: self._mla_prefill(chunks))

    def _mla_prefill(self, chunks) -> float:
        t, keys = self._prefill_lookup(self._mla_ctx, chunks)
        if self._mla_kind == "kernel":  # the kernel table leaves out the kv_b up-projection
            n, k = self.shapes.gemms["kv_b"]
            t += self._gemm_mnk(int(keys), n, k, self.attn_gemm_dtype or self.gemm_dtype)
        return t

    def attn_prefill_window(self, chunks) -> float:
        """One sliding-window layer: the windowed context table at (batch, RMS length), scaled by the
        chunks' share of the attended query-key pairs of whole windowed sequences."""
        if self._ctx_win is None:
            return super().attn_prefill_window(chunks)
        if not chunks:
            return 0.0
        W = self.shapes.window
        sq = work = full = 0.0
        for q, c in chunks:
            sq += (q + c) ** 2
            work += self._attended(q, c, W)
            full += self._attended(q + c, 0, W)
        b = len(chunks)
        roof = lambda x: RooflineCostModel.attn_prefill(  # noqa: E731
            self, [(max(1, round(x[1])), 0)] * max(1, round(x[0])), W)
        share = work / full
        return self._lookup(self._ctx_win, roof, (float(b), math.sqrt(sq / b)),
                            "sliding-window prefill attention (batch x RMS length)", self.layers_window * share) * share

    def attn_decode(self, num_seqs: int, kv_tokens: int, longest: int = 0) -> float:
        if not self.shapes.mla:
            return super().attn_decode(num_seqs, kv_tokens, longest)
        if not num_seqs:
            return 0.0
        if self._mla_gen is None:
            return RooflineCostModel.attn_decode(self, num_seqs, kv_tokens)
        return self._memo(self._attn_d, (num_seqs, kv_tokens), lambda: self._mla_decode(num_seqs, kv_tokens))

    def _mla_decode(self, num_seqs: int, kv_tokens: int) -> float:
        t = self._decode_lookup(self._mla_gen, num_seqs, kv_tokens)
        for g in self._bmm.values():  # the absorption BMMs (SGLang's kernel tables)
            if g is not None:
                c, out = g.clamp((float(num_seqs),))
                b = g(c) * (num_seqs / c[0] if out else 1.0)
                t += b
                if out:
                    self._oor += self._extrap.record("MLA absorption BMM (batch)", (float(num_seqs),), g,
                                                     b * self.layers_full)
        return t

    def _attn_decode_run(self, n: int, kv_tokens: int, longest: int, steps: int) -> tuple[list[float], list[int]]:
        """As the dense model's, with MLA decode (``_mla_decode``: the table, then the absorption
        BMMs of this batch size added in order) batched too."""
        mla = self.shapes.mla
        if type(self).attn_decode is not KernelDbMoeCostModel.attn_decode or (mla and self._mla_gen is None):
            return self._quiet_attn_decode(n, [(kv_tokens + j * n, longest + j) for j in range(steps)])
        if not mla:
            return self._grid_decode_run(self._gen, n, kv_tokens, steps)
        vals, outs = self._grid_decode_run(self._mla_gen, n, kv_tokens, steps)
        bmms, extra = [], 0
        for g in self._bmm.values():
            if g is not None:
                c, out = g.clamp((float(n),))
                bmms.append(g(c) * (n / c[0] if out else 1.0))
                extra += out
        if bmms:
            for j, t in enumerate(vals):
                for b in bmms:
                    t += b
                vals[j] = t
            outs = [o + extra for o in outs]
        return vals, outs

    # ------------------------------------------------------------------ composition
    def _dense_terms(self, tokens: int, num_seqs: int) -> tuple[float, float, float]:
        """The roofline's composition (attention GEMMs, dense first layers, routed + shared experts
        and router, LM head) with each operator priced above, the all-reduce from the database.
        A decode-only step (a token per sequence) of an engine that runs the shared experts beside
        the router and routed experts (``shared_overlap``) pays the longer of the two per MoE
        layer, not their sum."""
        gemm = self._gemm_terms(tokens, num_seqs)
        if self.shared_overlap and tokens == num_seqs:
            oor = self._oor  # (priced and counted above: asked again, counted once)
            routed = self.moe(tokens) + self.gemm("router", tokens)
            shared = self.gemm("shared_gate_up", tokens) + self.gemm("shared_down", tokens)
            self._oor = oor
            gemm -= self.shapes.moe_layers * min(routed, shared)
        return (gemm, *self._other_and_comm(tokens, num_seqs))

    def describe(self) -> dict:
        d = super().describe()
        d["moe_dtype"] = self.moe_dtype
        return d
