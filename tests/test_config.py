import pytest

from sim.config import build_config, load_config
from sim.errors import ConfigError


def test_default_config_is_the_documented_default():
    c = load_config()
    assert (c.model, c.hardware, c.parallelism.tp, c.scheduler.name) == ("llama-3.1-8b", "h100-sxm", 1, "vllm_v1")
    assert c.workload.arrival == "poisson" and c.workload.num_requests >= 1000
    assert (c.slo.ttft_s, c.slo.tpot_s) == (2.0, 0.2)


def test_unknown_key_named_with_path_and_suggestion():
    with pytest.raises(ConfigError, match=r"kv\.blok_size; did you mean kv\.block_size"):
        build_config({"kv": {"blok_size": 8}})
    with pytest.raises(ConfigError, match=r"unknown config key paralelism"):
        build_config({"paralelism": {"tp": 2}})


def test_policy_knobs_checked_against_the_policy():
    with pytest.raises(ConfigError, match=r"scheduler\.max_num_seq; did you mean scheduler\.max_num_seqs"):
        build_config({"scheduler": {"name": "vllm", "max_num_seq": 8}})
    with pytest.raises(ConfigError, match="unknown scheduler 'vlm'"):
        build_config({"scheduler": {"name": "vlm"}})


@pytest.mark.parametrize("data,match", [
    ({"kv": {"gpu_memory_utilization": 1.5}}, r"kv\.gpu_memory_utilization"),
    ({"parallelism": {"tp": 0}}, r"parallelism\.tp"),
    ({"workload": {"rate": -1}}, r"workload\.rate"),
    ({"model": "gpt-5"}, r"model: unknown model"),
])
def test_out_of_range_values_name_their_path(data, match):
    with pytest.raises(ConfigError, match=match):
        build_config(data)


def test_set_overrides_address_the_same_keys():
    c = build_config({}, ["scheduler.name=static", "parallelism.tp=2", "kv.prefix_caching=true", "workload.rate=2.5"])
    assert c.scheduler.name == "static" and c.parallelism.tp == 2 and c.kv.prefix_caching and c.workload.rate == 2.5
    with pytest.raises(ConfigError, match="key=value"):
        build_config({}, ["scheduler.name"])


def test_config_is_frozen():
    c = load_config()
    with pytest.raises(Exception):
        c.seed = 3


def test_set_changes_one_knob_of_a_default_section():
    c = build_config({}, ["workload.prompt.max=1000"])
    assert (c.workload.prompt.kind, c.workload.prompt.median, c.workload.prompt.max) == ("lognormal", 1020, 1000)
    c = build_config({"workload": {"prompt": {"kind": "fixed", "value": 5}}}, ["workload.prompt.value=7"])
    assert (c.workload.prompt.kind, c.workload.prompt.value, c.workload.prompt.max) == ("fixed", 7, None)


def test_roofline_and_block_size_defaults_have_one_source():
    """cost.roofline is built from RooflineParams (defaults and bounds); the block-size default is
    sim.kv.blocks.DEFAULT_BLOCK_SIZE everywhere."""
    import inspect
    from dataclasses import fields

    from sim.config import Roofline
    from sim.cost.profiled import load_profiled_cost_model
    from sim.cost.roofline import RooflineCostModel, RooflineParams
    from sim.kv.blocks import DEFAULT_BLOCK_SIZE

    assert {k: f.default for k, f in Roofline.model_fields.items()} == {f.name: f.default for f in fields(RooflineParams)}
    assert RooflineParams(**load_config().cost.roofline.model_dump()) == RooflineParams()
    for key, bad in (("gemm_eff", 0.0), ("mem_eff", 1.01), ("cpu_step_s", -1e-6)):
        with pytest.raises(ConfigError, match=f"cost.roofline.{key}"):
            load_config({"cost": {"roofline": {key: bad}}})
    assert load_config().kv.block_size == DEFAULT_BLOCK_SIZE
    for fn in (RooflineCostModel.__init__, load_profiled_cost_model):
        assert inspect.signature(fn).parameters["block_size"].default == DEFAULT_BLOCK_SIZE
