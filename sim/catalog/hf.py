"""A model card from a Hugging Face ``config.json`` (``--model path/to/config.json``).

Supported ``model_type`` values and the keys read (Hugging Face ``transformers`` config classes):

- dense: ``llama``, ``mistral``, ``qwen2``, ``qwen3``: ``num_hidden_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads`` (default: the attention heads), ``head_dim``
  (default: hidden / heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``,
  ``tie_word_embeddings``, ``sliding_window`` (when ``use_sliding_window`` is not false);
  ``qwen2`` has QKV biases, ``llama`` has them when ``attention_bias`` is true.
- MoE: ``mixtral`` (``num_local_experts``, ``num_experts_per_tok``; experts of ``intermediate_size``),
  ``qwen3_moe`` (``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``; dense layers
  from ``mlp_only_layers`` / ``decoder_sparse_step`` are not supported and rejected),
  ``gpt_oss`` (``num_local_experts``, ``num_experts_per_tok``; experts of ``intermediate_size``;
  ``sliding_window`` on the ``layer_types`` marked ``sliding_attention``).
- MLA + MoE: ``deepseek_v3`` (and ``deepseek_v2``): ``n_routed_experts``, ``n_shared_experts``,
  ``moe_intermediate_size``, ``first_k_dense_replace``, ``q_lora_rank``, ``kv_lora_rank``,
  ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``. The multi-token-prediction layer
  (``num_nextn_predict_layers``) is not part of the served model and is not counted.

A missing key or an unsupported ``model_type`` is one ``CatalogError`` line naming it. The card's
``params_b`` is derived from the architecture (config.json carries no parameter count).
"""
from __future__ import annotations

import json
from pathlib import Path

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MOE = ("mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "deepseek_v2")
SUPPORTED = DENSE + MOE


def card_from_hf_config(path: str | Path):
    """A ModelCard from a Hugging Face ``config.json`` file."""
    from sim.catalog import CatalogError, ModelCard

    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except OSError as e:
        raise CatalogError(f"cannot read model config {path}: {e.strerror}") from None
    except ValueError as e:
        raise CatalogError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise CatalogError(f"{path}: a config.json is a JSON object")
    kind = cfg.get("model_type")
    if kind is None:
        raise CatalogError(f"{path}: missing key 'model_type' (supported: {', '.join(SUPPORTED)})")
    if kind not in SUPPORTED:
        raise CatalogError(f"{path}: unsupported model_type {kind!r} (supported: {', '.join(SUPPORTED)})")

    def whole(key: str, v, least: int = 1) -> int:
        """A count: a whole JSON number (not a boolean, not 4096.7) of at least ``least``."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), -float("inf")) \
                or int(v) != v:
            raise CatalogError(f"{path}: {key} must be a whole number, got {json.dumps(v)}")
        if v < least:
            raise CatalogError(f"{path}: {key} must be at least {least}, got {int(v)}")
        return int(v)

    def need(key: str, *alt: str, least: int = 1) -> int:
        for k in (key, *alt):
            if cfg.get(k) is not None:
                return whole(k, cfg[k], least)
        raise CatalogError(f"{path}: missing key {key!r} (needed for model_type {kind!r})")

    def opt(key: str, default, least: int = 1):
        return default if cfg.get(key) is None else whole(key, cfg[key], least)

    layers, hidden, heads = need("num_hidden_layers"), need("hidden_size"), need("num_attention_heads")
    kv_heads = opt("num_key_value_heads", heads)
    head_dim = opt("head_dim", hidden // heads)
    name = str(cfg.get("_name_or_path") or (path.parent.name if path.stem == "config" else path.stem) or "hf-model")
    f = dict(
        id=path.stem.lower() if path.stem != "config" else (path.parent.name.lower() or "hf-model"),
        name=name, hf_repo=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=need("intermediate_size"),
        vocab_size=need("vocab_size"), max_context=need("max_position_embeddings"), params_b=0.0,
        source=f"Hugging Face config.json read from {path.name} (model_type {kind})",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=kind == "qwen2" or (kind in ("llama", "gpt_oss") and bool(cfg.get("attention_bias"))),
    )
    if cfg.get("sliding_window") is not None and cfg.get("use_sliding_window", True) is not False:
        f["sliding_window"] = need("sliding_window")
    if kind == "mixtral":
        f.update(num_experts=need("num_local_experts"), experts_top_k=need("num_experts_per_tok"))
    elif kind == "qwen3_moe":
        if cfg.get("mlp_only_layers") or opt("decoder_sparse_step", 1) != 1:
            raise CatalogError(f"{path}: qwen3_moe with dense layers (mlp_only_layers / decoder_sparse_step) is not supported")
        f.update(num_experts=need("num_experts"), experts_top_k=need("num_experts_per_tok"),
                 moe_intermediate_size=need("moe_intermediate_size"))
    elif kind == "gpt_oss":
        f.update(num_experts=need("num_local_experts"),
                 experts_top_k=need("num_experts_per_tok", "experts_per_token"))
        types = cfg.get("layer_types")
        if "sliding_window" in f and types:
            f["sliding_window_layers"] = sum(t == "sliding_attention" for t in types)
    elif kind in ("deepseek_v3", "deepseek_v2"):
        rope, nope, v = need("qk_rope_head_dim"), need("qk_nope_head_dim"), need("v_head_dim")
        q_lora = opt("q_lora_rank", None, least=0)
        f.update(num_experts=need("n_routed_experts"), experts_top_k=need("num_experts_per_tok"),
                 moe_intermediate_size=need("moe_intermediate_size"),
                 num_shared_experts=opt("n_shared_experts", 0, least=0),
                 first_dense_layers=opt("first_k_dense_replace", 0, least=0),
                 attention_kind="mla", kv_lora_rank=need("kv_lora_rank"),
                 q_lora_rank=q_lora or None, qk_rope_head_dim=rope, qk_nope_head_dim=nope,
                 v_head_dim=v, head_dim=nope + rope, num_kv_heads=heads)
        if opt("moe_layer_freq", 1) != 1:
            raise CatalogError(f"{path}: {kind} with moe_layer_freq != 1 is not supported")
    try:
        card = ModelCard(**f)
    except CatalogError as e:
        raise CatalogError(f"{path}: {str(e).removeprefix(f['id'] + ': ')}") from None
    return ModelCard(**{**f, "params_b": round(card.total_params / 1e9, 2),
                        "active_params_b": round(card.active_params / 1e9, 2) if card.is_moe else None})
