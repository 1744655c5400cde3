"""Model and hardware cards: architecture and datasheet facts, each with its source.

Cards are YAML files in ``models/`` and ``hardware/``. Ids are lowercase slugs looked up
case-insensitively; the reference names are aliases. This module needs only pyyaml so that
``kernels/`` can read the same cards on a bare GPU machine.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

import yaml

HERE = Path(__file__).parent

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "nvfp4": 0.5625, "mxfp4": 0.53125, "int4": 0.5625, "fp32": 4}
"""Bytes per element, block scales included. nvfp4 (NVIDIA ModelOpt / Blackwell): a 4-bit E2M1 value
plus one FP8 (E4M3) scale per 16 values = 4 + 8/16 = 4.5 bits; mxfp4 (OCP microscaling, gpt-oss): a
4-bit E2M1 value plus one 8-bit E8M0 scale per 32 values = 4 + 8/32 = 4.25 bits; int4 (Kimi-K2.5's
compressed-tensors ``pack-quantized`` experts: symmetric 4-bit integers, one bf16 scale per group of
32) = 4 + 16/32 = 4.5 bits. The per-tensor fp32 scale of nvfp4 is negligible and not counted."""

WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4")
COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "nvfp4": "fp4", "mxfp4": None, "int4": None, "fp32": None}
"""Tensor-core dtype a GEMM with these weights runs in. fp8 weights run W8A8 on fp8 tensor cores
(vLLM's fp8 path on Hopper/Ada/Blackwell/MI300X); nvfp4 runs W4A4 on Blackwell fp4 tensor cores;
mxfp4 (gpt-oss) and int4 (Kimi-K2.5) are priced weight-only: dequantised and multiplied in the
activation dtype (None), as vLLM's Triton/Marlin MoE kernels do on Hopper and Ampere. fp32 (the
whole model in fp32, as PyTorch runs on a CPU) has no tensor-core peak in the cards: it is
simulated only from a profile with fp32 rows, whose roofline fallback uses the bf16 peak with
efficiency factors fitted on those fp32 rows (the factors absorb the ratio; ``calibration.fit``)."""
EXPERTS_ONLY = ("mxfp4", "int4")
"""Weight formats whose checkpoints quantise only the routed experts (gpt-oss's mxfp4 and Kimi-K2.5's
int4 leave attention, shared experts and dense layers in bf16: their ``modules_to_not_convert`` /
``ignore`` lists)."""


class CatalogError(ValueError):
    """An unknown id or a malformed card."""


@dataclass(frozen=True)
class ModelCard:
    id: str
    name: str
    hf_repo: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    params_b: float
    source: str
    aliases: tuple[str, ...] = ()
    num_experts: int = 0
    experts_top_k: int = 0
    active_params_b: float | None = None
    sliding_window: int | None = None
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    # MoE beyond Mixtral: expert size, shared experts, dense first layers (DeepSeek, Qwen3-MoE, gpt-oss)
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    # attention: "gqa" (MHA/GQA/MQA by num_kv_heads) or "mla" (DeepSeek multi-head latent attention)
    attention_kind: str = "gqa"
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # layers that use ``sliding_window`` (None: all layers when a window is set; gpt-oss: 18 of 36)
    sliding_window_layers: int | None = None
    # a norm of the queries and keys before rotary (Qwen3 and MiniMax-M2: RMSNorm with weights;
    # Llama-4 Scout: an L2 norm): two more elementwise kernels per layer
    qk_norm: bool = False

    def __post_init__(self):
        self._check_shape()
        if self.attention_kind not in ("gqa", "mla"):
            raise CatalogError(f"{self.id}: attention_kind must be gqa or mla, not {self.attention_kind!r}")
        if self.attention_kind == "mla":
            need = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
            missing = [k for k in need if getattr(self, k) is None]
            if missing:
                raise CatalogError(f"{self.id}: MLA attention needs {', '.join(missing)}")
        if self.first_dense_layers and not self.num_experts:
            raise CatalogError(f"{self.id}: first_dense_layers is only meaningful for MoE models")
        if not 0 <= self.first_dense_layers <= self.num_layers:
            raise CatalogError(f"{self.id}: first_dense_layers must lie in [0, num_layers]")

    def _check_shape(self) -> None:
        """Sizes are whole numbers of at least 1 (0 layers or heads would divide by zero; 4096.7
        or ``true`` is a typo), attention heads split evenly into KV-head groups, and an MoE
        routes each token to between 1 and all of its experts."""
        sizes = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                 "intermediate_size", "vocab_size", "max_context")
        least_of = {**dict.fromkeys(sizes, 1), "num_experts": 0, "experts_top_k": 0}
        if self.sliding_window is not None:
            least_of["sliding_window"] = 1
        for name, least in least_of.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise CatalogError(f"{self.id}: {name} must be a whole number, got {v!r}")
            if v < least:
                raise CatalogError(f"{self.id}: {name} must be at least {least}, got {v}")
        if self.attention_kind == "gqa" and self.num_attention_heads % self.num_kv_heads:
            raise CatalogError(f"{self.id}: {self.num_attention_heads} attention heads do not split into "
                               f"groups over {self.num_kv_heads} KV heads (heads must be a multiple of KV heads)")
        if self.num_experts and not 1 <= self.experts_top_k <= self.num_experts:
            raise CatalogError(f"{self.id}: experts_top_k ({self.experts_top_k}) must lie in 1..num_experts "
                               f"({self.num_experts})")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention_kind == "mla"

    @property
    def expert_intermediate(self) -> int:
        """Intermediate size of one routed (and one shared) expert."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @property
    def window_layers(self) -> int:
        """Layers whose attention is limited to ``sliding_window`` tokens."""
        if not self.sliding_window:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    # ----- parameter counts derived from the architecture (not the published rounding) -----
    @property
    def attn_replicated_params_per_layer(self) -> int:
        """Attention parameters every tensor-parallel rank holds whole: MLA's down-projections
        (q_a, kv_a, with their norms; vLLM keeps them replicated), 0 for GQA."""
        if not self.is_mla:
            return 0
        h, ql, kvl = self.hidden_size, self.q_lora_rank or 0, self.kv_lora_rank
        return h * (ql + kvl + self.qk_rope_head_dim) + ql + kvl

    @property
    def attn_params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        if self.is_mla:
            H, qk = self.num_attention_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q_up = (self.q_lora_rank or h) * H * qk  # q_b (or a plain q projection without q_lora)
            kv_up = self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
            o = H * self.v_head_dim * h
            return self.attn_replicated_params_per_layer + q_up + kv_up + o
        q, kv = self.num_attention_heads * d, self.num_kv_heads * d
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return h * (q + 2 * kv) + bias + q * h

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden_size * self.expert_intermediate

    @property
    def moe_layer_params(self) -> int:
        """An MoE layer's MLP: routed experts, shared experts, router."""
        return (self.num_experts + self.num_shared_experts) * self.expert_params + self.hidden_size * self.num_experts

    @property
    def mlp_params_per_layer(self) -> int:
        """MLP parameters of an average layer (dense first layers and MoE layers averaged)."""
        if self.is_moe:
            return (self.moe_layers * self.moe_layer_params + self.dense_layers * self.dense_mlp_params) / self.num_layers
        return self.dense_mlp_params

    def _params(self, experts_per_moe_layer: int) -> int:
        h = self.hidden_size
        mlp = self.dense_layers * self.dense_mlp_params
        if self.is_moe:
            mlp += self.moe_layers * ((experts_per_moe_layer + self.num_shared_experts) * self.expert_params
                                      + h * self.num_experts)
        emb = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else emb
        return self.num_layers * (self.attn_params_per_layer + 2 * h) + int(mlp) + emb + head + h

    @property
    def total_params(self) -> int:
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: the top-k routed experts (plus shared experts) of each
        MoE layer, everything else whole, embedding and LM head included (the convention of the
        published figures, e.g. Mixtral-8x7B 12.9B, DeepSeek-V3 37B)."""
        return self._params(self.experts_top_k) if self.is_moe else self.total_params

    @property
    def kv_elems_per_token_per_layer(self) -> int:
        """Cached elements per token per layer: K and V of every KV head (GQA), or the one
        compressed latent plus the decoupled rotary key shared by all heads (MLA)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def parallelism_problem(self, tp: int, pp: int = 1) -> str | None:
        """Why this model cannot be split ``tp`` ways by tensor parallelism and into ``pp``
        pipeline stages (None when it can): heads, the MLP width and layers must divide evenly;
        KV heads must divide ``tp`` or be replicated over it, as in vLLM."""
        if self.num_attention_heads % tp:
            return f"tp={tp} does not divide {self.id}'s {self.num_attention_heads} attention heads"
        if self.num_kv_heads and self.num_kv_heads % tp and tp % self.num_kv_heads:
            return f"tp={tp} neither divides nor is a multiple of {self.id}'s {self.num_kv_heads} KV heads"
        if self.dense_layers and self.intermediate_size % tp:
            return f"tp={tp} does not divide {self.id}'s MLP intermediate size {self.intermediate_size}"
        if self.is_moe and self.expert_intermediate % tp:
            return f"tp={tp} does not divide {self.id}'s expert intermediate size {self.expert_intermediate}"
        if self.num_layers % pp:
            return f"pp={pp} does not divide {self.id}'s {self.num_layers} layers"
        return None

    def expert_parallel_problem(self, tp: int, ep: int = 1, dp: int = 1) -> str | None:
        """Why this model cannot place its routed experts ``ep`` ways over the ``tp`` x ``dp`` GPUs
        of one expert group (None when it can), as the key to change says first. The group's GPUs
        hold the experts ``ep`` ways and split each expert's width ``moe_tp`` = tp x dp / ep ways
        (vLLM and SGLang: ep = tp x dp; TRT-LLM: moe_tp x moe_ep = tp x dp)."""
        if ep == 1:
            return None
        if not self.is_moe:
            return (f"parallelism.ep: {self.id} has no routed experts (its card gives no num_experts): "
                    f"expert parallelism needs an MoE model; set ep=1")
        if self.num_experts % ep:
            return f"parallelism.ep: ep={ep} does not divide {self.id}'s {self.num_experts} routed experts"
        if (tp * dp) % ep:
            return f"parallelism.ep: ep={ep} does not divide the tp x dp = {tp * dp} GPUs of the expert group"
        moe_tp = tp * dp // ep
        if self.expert_intermediate % moe_tp:
            return (f"parallelism.ep: the expert width {self.expert_intermediate} does not split "
                    f"tp x dp / ep = {moe_tp} ways")
        return None

    def kv_bytes_per_token(self, dtype: str = "bf16") -> int:
        """KV-cache bytes one token occupies across the whole model (all layers, K and V)."""
        return int(self.num_layers * self.kv_elems_per_token_per_layer * DTYPE_BYTES[dtype])


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    provider: str
    offer: str
    date: str
    basis: str
    source: str


@dataclass(frozen=True)
class HardwareCard:
    id: str
    name: str
    vendor: str
    memory_gib: float
    memory_type: str
    mem_bw_tbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    interconnect: str
    interconnect_gbps_bidir: float | None
    host_link: str
    host_link_gbps_bidir: float
    tdp_w: float
    source: str
    aliases: tuple[str, ...] = ()
    price: Price | None = None
    fp4_tflops: float | None = None
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    usable_memory_gib: float | None = None
    usable_memory_source: str | None = None

    @property
    def memory_bytes(self) -> int:
        """Datasheet capacity (read in binary units)."""
        return int(self.memory_gib * 2**30)

    @property
    def usable_memory_bytes(self) -> int:
        """What the driver reports as total device memory (``torch.cuda.mem_get_info``, the figure
        vLLM multiplies by ``gpu_memory_utilization``); the datasheet figure when the card has none."""
        gib = self.usable_memory_gib if self.usable_memory_gib is not None else self.memory_gib
        return int(gib * 2**30)

    def supports(self, weight_dtype: str) -> bool:
        """Whether this GPU runs ``weight_dtype`` weights: in its tensor cores (``dtypes``), or, for
        weight-only formats (mxfp4), by dequantising to bf16."""
        return weight_dtype in self.dtypes or (weight_dtype in DTYPE_BYTES and COMPUTE_DTYPE.get(weight_dtype) is None)

    def check_dtype(self, weight_dtype: str) -> None:
        """Raise CatalogError (one line) when this GPU lacks ``weight_dtype`` in hardware."""
        if not self.supports(weight_dtype):
            raise CatalogError(f"{self.name} has no {weight_dtype} tensor cores (hardware dtypes: "
                               f"{', '.join(self.dtypes)}); choose one of those")

    @property
    def mem_bw(self) -> float:
        """HBM bandwidth in bytes/s."""
        return self.mem_bw_tbps * 1e12

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense tensor-core rate in FLOP/s for a compute dtype (bf16, fp16, fp8, fp4; a weight dtype
        is mapped to the dtype its GEMMs run in, see ``COMPUTE_DTYPE``)."""
        if dtype in COMPUTE_DTYPE and dtype not in ("bf16", "fp16", "fp8"):
            dtype = COMPUTE_DTYPE[dtype] or "bf16"
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise CatalogError(f"hardware {self.id!r} has no FP8 tensor cores (datasheet); use dtype bf16")
            return self.fp8_tflops * 1e12
        if dtype == "fp4":
            if self.fp4_tflops is None:
                raise CatalogError(f"hardware {self.id!r} has no FP4 tensor cores (datasheet); use dtype bf16 or fp8")
            return self.fp4_tflops * 1e12
        return self.bf16_tflops * 1e12

    @property
    def link_bw(self) -> float:
        """Per-direction bandwidth between GPUs of a replica in bytes/s (PCIe when no NVLink)."""
        bidir = self.interconnect_gbps_bidir or self.host_link_gbps_bidir
        return bidir / 2 * 1e9

    @property
    def host_bw(self) -> float:
        """Per-direction host-link bandwidth in bytes/s (swap transfers)."""
        return self.host_link_gbps_bidir / 2 * 1e9


def _slug(s: str) -> str:
    return s.strip().lower()


def _build(cls, raw: dict, path: Path):
    known = {f.name for f in fields(cls)}
    unknown = set(raw) - known
    if unknown:
        raise CatalogError(f"{path.name}: unknown field(s) {sorted(unknown)}")
    raw = dict(raw)
    raw["aliases"] = tuple(raw.get("aliases") or ())
    if "dtypes" in raw:
        raw["dtypes"] = tuple(raw["dtypes"] or ())
    if cls is HardwareCard and raw.get("price"):
        raw["price"] = Price(**raw["price"])
    try:
        return cls(**raw)
    except TypeError as e:
        raise CatalogError(f"{path.name}: {e}") from None


@lru_cache(maxsize=None)
def _card_from_path(kind: str, path: str):
    cls = ModelCard if kind == "models" else HardwareCard
    try:
        raw = _yaml(Path(path).read_text())
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: a card is a mapping of fields")
    return _build(cls, raw, Path(path))


def _yaml(text: str):
    """A card's YAML: PyYAML's safe loading, parsed by libyaml where PyYAML was built with it
    (several times faster; the same constructors, so the same values)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (safe)


@lru_cache(maxsize=None)
def _hf_card(path: str) -> ModelCard:
    from sim.catalog.hf import card_from_hf_config

    return card_from_hf_config(path)


@lru_cache(maxsize=None)
def _load_all(kind: str) -> dict[str, ModelCard | HardwareCard]:
    cls = ModelCard if kind == "models" else HardwareCard
    cards = {}
    for path in sorted((HERE / kind).glob("*.yaml")):
        card = _build(cls, _yaml(path.read_text()), path)
        cards[card.id] = card
    return cards


def _lookup(kind: str, key: str | ModelCard | HardwareCard):
    if not isinstance(key, str):
        return key
    if kind == "models" and key.lower().endswith(".json"):  # a Hugging Face config.json, by path
        if not Path(key).is_file():
            raise CatalogError(f"model config file {key} does not exist")
        return _hf_card(str(Path(key).resolve()))
    if kind == "models" and (Path(key) / "config.json").is_file():  # a Hugging Face checkout
        return _hf_card(str((Path(key) / "config.json").resolve()))
    if key.endswith((".yaml", ".yml")):  # a user's own card, by path
        path = Path(key)
        if not path.is_file():
            raise CatalogError(f"card file {key} does not exist")
        return _card_from_path(kind, str(path.resolve()))
    cards = _load_all(kind)
    names = {}
    for card in cards.values():
        for n in (card.id, card.name, *card.aliases):
            names[_slug(n)] = card
    hit = names.get(_slug(key))
    if hit is not None:
        return hit
    close = difflib.get_close_matches(_slug(key), list(names), n=3, cutoff=0.5)
    close_ids = sorted({names[c].id for c in close})
    hint = f"; did you mean {', '.join(close_ids)}?" if close_ids else ""
    singular = kind[:-1] if kind.endswith("s") else kind
    own = "; or give a Hugging Face config.json (or the folder holding it), or a card .yaml" if kind == "models" else ""
    raise CatalogError(f"unknown {singular} {key!r}{hint} (known: {', '.join(sorted(cards))}){own}")


def get_model(key: str | ModelCard) -> ModelCard:
    """Model card by id or alias (case-insensitive); unknown ids list the close matches."""
    return _lookup("models", key)


CPU_HOST_IDS = ("cpu", "cpu-host")
"""Ids the CPU profiler writes (``kernels.profile --device cpu``); not catalog hardware: the CPU
host's card is a test card with placeholder figures, given by its path."""


def get_hardware(key: str | HardwareCard) -> HardwareCard:
    """Hardware card by id or alias (case-insensitive); unknown ids list the close matches. The
    CPU profiler's id ``cpu`` is not in the catalog: its error names the test card to give."""
    try:
        return _lookup("hardware", key)
    except CatalogError:
        if isinstance(key, str) and key.strip().lower() in CPU_HOST_IDS:
            raise CatalogError(f"hardware {key!r} is the CPU host the profiler writes, not catalog hardware: give its "
                               "card by path, hardware=calibration/cards/cpu-host.yaml (a test card with placeholder "
                               "figures; id cpu, so it finds the fitted CPU tables)") from None
        raise


def load_model_card(path: str | Path) -> ModelCard:
    """A model card from a YAML file outside the catalog (same fields as ``models/*.yaml``)."""
    path = Path(path)
    try:
        raw = _yaml(path.read_text())
    except OSError as e:
        raise CatalogError(f"cannot read model card {path}: {e.strerror}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path.name}: a model card is a YAML mapping")
    return _build(ModelCard, raw, path)


def list_models() -> list[ModelCard]:
    return list(_load_all("models").values())


def list_hardware() -> list[HardwareCard]:
    return list(_load_all("hardware").values())
