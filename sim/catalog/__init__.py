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

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


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

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    # ----- parameter counts derived from the architecture (not the published rounding) -----
    @property
    def attn_params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_kv_heads * d
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return h * (q + 2 * kv) + bias + q * h

    @property
    def mlp_params_per_layer(self) -> int:
        dense = 3 * self.hidden_size * self.intermediate_size
        if self.is_moe:
            return self.num_experts * dense + self.hidden_size * self.num_experts  # + router
        return dense

    @property
    def total_params(self) -> int:
        per_layer = self.attn_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden_size
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return self.num_layers * per_layer + emb + head + self.hidden_size

    def parallelism_problem(self, tp: int, pp: int = 1) -> str | None:
        """Why this model cannot be split ``tp`` ways by tensor parallelism and into ``pp``
        pipeline stages (None when it can): heads, the MLP width and layers must divide evenly;
        KV heads must divide ``tp`` or be replicated over it, as in vLLM."""
        if self.num_attention_heads % tp:
            return f"tp={tp} does not divide {self.id}'s {self.num_attention_heads} attention heads"
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            return f"tp={tp} neither divides nor is a multiple of {self.id}'s {self.num_kv_heads} KV heads"
        if self.intermediate_size % tp:
            return f"tp={tp} does not divide {self.id}'s MLP intermediate size {self.intermediate_size}"
        if self.num_layers % pp:
            return f"pp={pp} does not divide {self.id}'s {self.num_layers} layers"
        return None

    def kv_bytes_per_token(self, dtype: str = "bf16") -> int:
        """KV-cache bytes one token occupies across the whole model (all layers, K and V)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * DTYPE_BYTES[dtype]


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

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def mem_bw(self) -> float:
        """HBM bandwidth in bytes/s."""
        return self.mem_bw_tbps * 1e12

    def dtype_problem(self, dtype: str) -> str | None:
        """Why this GPU cannot compute in ``dtype`` (None when it can): fp8 needs FP8 tensor
        cores (the datasheet's FP8 rate)."""
        if dtype == "fp8" and self.fp8_tflops is None:
            return f"hardware {self.id!r} has no FP8 tensor cores (datasheet); use dtype bf16"
        return None

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense tensor-core rate in FLOP/s for a compute dtype."""
        if dtype == "fp8":
            if (why := self.dtype_problem(dtype)) is not None:
                raise CatalogError(why)
            return self.fp8_tflops * 1e12
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
        raw = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: a card is a mapping of fields")
    return _build(cls, raw, Path(path))


@lru_cache(maxsize=None)
def _load_all(kind: str) -> dict[str, ModelCard | HardwareCard]:
    cls = ModelCard if kind == "models" else HardwareCard
    cards = {}
    for path in sorted((HERE / kind).glob("*.yaml")):
        card = _build(cls, yaml.safe_load(path.read_text()), path)
        cards[card.id] = card
    return cards


def _lookup(kind: str, key: str | ModelCard | HardwareCard):
    if not isinstance(key, str):
        return key
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
    raise CatalogError(f"unknown {singular} {key!r}{hint} (known: {', '.join(sorted(cards))})")


def get_model(key: str | ModelCard) -> ModelCard:
    """Model card by id or alias (case-insensitive); unknown ids list the close matches."""
    return _lookup("models", key)


def get_hardware(key: str | HardwareCard) -> HardwareCard:
    """Hardware card by id or alias (case-insensitive); unknown ids list the close matches."""
    return _lookup("hardware", key)


def load_model_card(path: str | Path) -> ModelCard:
    """A model card from a YAML file outside the catalog (same fields as ``models/*.yaml``)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise CatalogError(f"cannot read model card {path}: {e.strerror}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path.name}: a model card is a YAML mapping")
    return _build(ModelCard, raw, path)


def list_models() -> list[ModelCard]:
    return list(_load_all("models").values())


def list_hardware() -> list[HardwareCard]:
    return list(_load_all("hardware").values())
