import pytest

from sim.catalog import CatalogError, get_hardware, get_model, list_hardware, list_models

REQUIRED_MODELS = ["llama-2-7b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "mixtral-8x7b",
                   "qwen2.5-7b", "qwen2.5-72b"]
REQUIRED_HW = ["a100-80gb", "h100-sxm", "h200-sxm", "b200", "l40s", "mi300x"]


def test_required_cards_exist_with_sources():
    assert {m.id for m in list_models()} >= set(REQUIRED_MODELS)
    assert {h.id for h in list_hardware()} >= set(REQUIRED_HW)
    for card in [*list_models(), *list_hardware()]:
        assert card.source and any(s in card.source for s in ("reference table", "huggingface.co/", "resources.nvidia.com/")), card.id


@pytest.mark.parametrize("key,expected", [("Llama-3.1-8B", "llama-3.1-8b"), ("LLAMA-2-70B", "llama-2-70b"),
                                          ("meta-llama/Llama-2-7b-hf", "llama-2-7b"), ("Mixtral-8x7B-v0.1", "mixtral-8x7b")])
def test_model_lookup_is_case_insensitive_with_aliases(key, expected):
    assert get_model(key).id == expected


def test_hardware_aliases():
    assert get_hardware("H100 SXM").id == "h100-sxm"
    assert get_hardware("NVIDIA H200 SXM 141GB").id == "h200-sxm"


def test_unknown_id_lists_close_matches():
    with pytest.raises(CatalogError, match="did you mean.*llama-3.1-8b"):
        get_model("llama-3.1-8")
    with pytest.raises(CatalogError, match="h100-sxm"):
        get_hardware("h100-sxn")


def test_parameter_counts_match_published():
    # architecture-derived counts agree with the published sizes to 1%
    for m in list_models():
        assert abs(m.total_params / 1e9 - m.params_b) / m.params_b < 0.01, m.id


def test_kv_bytes_per_token_matches_reference():
    # reference models.csv kv_cache_bytes_per_token_bf16 column
    assert get_model("llama-2-7b").kv_bytes_per_token() == 524288
    assert get_model("llama-2-70b").kv_bytes_per_token() == 327680
    assert get_model("mixtral-8x7b").kv_bytes_per_token() == 131072
    assert get_model("llama-2-70b").kv_bytes_per_token("fp8") == 327680 // 2


def test_prices_are_dated_or_absent():
    h100 = get_hardware("h100-sxm")
    assert h100.price.usd_per_gpu_hour == 2.99 and h100.price.date
    assert get_hardware("b200").price is None  # none in the reference table: no invented number


def test_fp8_unavailable_on_a100():
    with pytest.raises(CatalogError, match="FP8"):
        get_hardware("a100-80gb").peak_flops("fp8")
