"""A model card from a Hugging Face ``config.json`` (``--model path/to/config.json``).

Supported ``model_type`` values and the keys read (Hugging Face ``transformers`` config classes):

- dense: ``llama``, ``mistral``, ``qwen2``, ``qwen3``: ``num_hidden_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads`` (default: the attention heads), ``head_dim``
  (default: hidden / heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``,
  ``tie_word_embeddings``, ``sliding_window`` (when ``use_sliding_window`` is not false);
  ``qwen2`` has QKV biases, ``llama`` has them when ``attention_bias`` is true; ``qwen3`` (and
  ``qwen3_moe``) normalise each head's query and key (``qk_norm``), as do models with
  ``use_qk_norm`` (MiniMax-M2, Llama-4 Scout).
- MoE: ``mixtral`` (``num_local_experts``, ``num_experts_per_tok``; experts of ``intermediate_size``),
  ``qwen3_moe`` (``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``; dense layers
  from ``mlp_only_layers`` / ``decoder_sparse_step`` are not supported and rejected),
  ``gpt_oss`` (``num_local_experts``, ``num_experts_per_tok``; experts of ``intermediate_size``;
  ``sliding_window`` on the ``layer_types`` marked ``sliding_attention``).
- MLA + MoE: ``deepseek_v3`` (and ``deepseek_v2``): ``n_routed_experts``, ``n_shared_experts``,
  ``moe_intermediate_size``, ``first_k_dense_replace``, ``q_lora_rank``, ``kv_lora_rank``,
  ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``. The multi-token-prediction layer
  (``num_nextn_predict_layers``) is not part of the served model and is not counted.
  ``kimi_k2`` (Kimi-K2) is the same architecture; ``kimi_k25`` (Kimi-K2.5) nests it in
  ``text_config`` beside a vision tower that is not served here. ``glm_moe_dsa`` (GLM-5) is MLA +
  MoE with DeepSeek sparse attention: the card prices dense MLA over the whole context (the
  lightning indexer and its top-``index_topk`` token selection are not expressed, nor counted).
- GQA + MoE with q/k norm: ``minimax_m2`` (``num_local_experts``, ``num_experts_per_tok``,
  experts of ``intermediate_size``, no shared expert).
- ``llama4`` (``text_config``): every ``interleave_moe_layer_step``-th layer is MoE
  (``num_local_experts`` experts of ``intermediate_size`` and one shared expert of the same size,
  top ``num_experts_per_tok``), the others dense MLPs of ``intermediate_size_mlp``; the card
  counts the dense layers (``first_dense_layers``: the cost model sums per layer, so their order
  does not matter). Chunked local attention (``attention_chunk_size``) on three layers in four
  (the RoPE layers; every fourth is a global NoPE layer, transformers' ``no_rope_layer_interval``
  default of 4) is expressed as a sliding window of the chunk size on those layers: a token
  attends to at most a chunk of keys either way, and the engines keep at most a chunk of KV for
  them; within a chunk the true cost is lower (a token sees only the keys of its own chunk).

A missing key or an unsupported ``model_type`` is one ``CatalogError`` line naming it. The card's
``params_b`` is derived from the architecture (config.json carries no parameter count).
"""
from __future__ import annotations

import json
from pathlib import Path

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MLA = ("deepseek_v3", "deepseek_v2", "kimi_k2", "kimi_k25", "glm_moe_dsa")
MOE = ("mixtral", "qwen3_moe", "gpt_oss", "minimax_m2", "llama4", *MLA)
NESTED = ("kimi_k25", "llama4")
"""Multimodal configs whose language model is in ``text_config`` (the vision tower is not served)."""
LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig no_rope_layer_interval default
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

    if kind in NESTED:
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise CatalogError(f"{path}: missing key 'text_config' (needed for model_type {kind!r})")
        cfg = {**text, "_name_or_path": cfg.get("_name_or_path") or text.get("_name_or_path"),
               "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))}

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
        qk_norm=kind in ("qwen3", "qwen3_moe") or bool(cfg.get("use_qk_norm")),
    )
    window = cfg.get("sliding_window")
    if window not in (None, 0) and cfg.get("use_sliding_window", True) is not False:  # (0: none)
        f["sliding_window"] = need("sliding_window")
    if kind in ("mixtral", "minimax_m2"):
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
    elif kind == "llama4":
        step = opt("interleave_moe_layer_step", 1)
        moe_layers = layers // step
        f.update(num_experts=need("num_local_experts"), experts_top_k=need("num_experts_per_tok"),
                 moe_intermediate_size=need("intermediate_size"), num_shared_experts=1,
                 intermediate_size=need("intermediate_size_mlp") if moe_layers < layers else need("intermediate_size"),
                 first_dense_layers=layers - moe_layers)
        chunk = opt("attention_chunk_size", None)
        if chunk:
            f.update(sliding_window=chunk, sliding_window_layers=layers - layers // LLAMA4_NOPE_INTERVAL)
    elif kind in MLA:
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
