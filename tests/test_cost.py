import pytest

from sim.catalog import get_hardware, get_model
from sim.cost.memory import plan_memory, weights_per_gpu
from sim.cost.roofline import RooflineCostModel
from sim.errors import CapacityError
from sim.types import BatchShape

M8, H100 = get_model("llama-3.1-8b"), get_hardware("h100-sxm")


def test_decode_batch1_between_1x_and_1_5x_weight_streaming():
    cm = RooflineCostModel(M8, H100)
    t = cm.step_time(BatchShape((1,), (512,))).total
    lower = M8.total_params * 2 / H100.mem_bw
    assert 1.0 * lower <= t <= 1.5 * lower


def test_prefill_4096_between_1x_and_2x_compute_bound():
    cm = RooflineCostModel(M8, H100)
    t = cm.step_time(BatchShape((4096,), (0,))).total
    flops = 2 * M8.total_params * 4096
    lower = flops / H100.peak_flops("bf16")
    assert 1.0 * lower <= t <= 2.0 * lower


def test_breakdown_sums_to_total_and_names_components():
    cm = RooflineCostModel(get_model("llama-3.1-70b"), H100, tp=4)
    st = cm.step_time(BatchShape((300, 1, 1), (0, 800, 2000)))
    parts = st.gemm + st.attn_prefill + st.attn_decode + st.comm + st.other_gpu + st.cpu + st.swap
    assert st.total == pytest.approx(parts)
    assert st.comm > 0 and st.attn_prefill > 0 and st.attn_decode > 0 and st.source == "roofline"


def test_tensor_parallel_speeds_up_decode_but_adds_communication():
    m = get_model("llama-3.1-70b")
    s = BatchShape((1,) * 8, (1000,) * 8)
    t2 = RooflineCostModel(m, H100, tp=2).step_time(s)
    t8 = RooflineCostModel(m, H100, tp=8).step_time(s)
    assert t8.total < t2.total and t8.comm > t2.comm


def test_moe_reads_only_active_experts_at_batch_1():
    mix = get_model("mixtral-8x7b")
    t = RooflineCostModel(mix, H100, tp=2).step_time(BatchShape((1,), (100,))).total
    active = mix.active_params_b * 1e9 * 2 / 2 / H100.mem_bw  # active weights per GPU
    total = mix.total_params * 2 / 2 / H100.mem_bw
    assert active < t < total


def test_swap_priced_over_host_link():
    cm = RooflineCostModel(M8, H100)
    st = cm.step_time(BatchShape((), (), blocks_swapped_out=100))
    block_bytes = 16 * M8.kv_bytes_per_token()
    assert st.swap == pytest.approx(100 * block_bytes / H100.host_bw)


def test_memory_plan_matches_formula():
    p = plan_memory(M8, H100, tp=1, pp=1, dtype="bf16", kv_dtype="bf16", block_size=16, gpu_memory_utilization=0.9,
                    max_num_batched_tokens=8192, max_num_seqs=256)
    # the H100's driver-reported total (79.10 GiB), not the datasheet's 80
    usable = int(79.10 * 2**30) * 0.9 - p.weights_bytes - p.activation_bytes - p.overhead_bytes
    assert p.num_gpu_blocks == int(usable // (16 * 131072))
    assert weights_per_gpu(M8, 1, 1, "bf16") == pytest.approx(M8.total_params * 2)


def test_override_blocks_and_too_big_model_error_names_numbers():
    p = plan_memory(M8, H100, tp=1, pp=1, dtype="bf16", kv_dtype="bf16", block_size=16, gpu_memory_utilization=0.9,
                    max_num_batched_tokens=8192, max_num_seqs=256, num_gpu_blocks=1234)
    assert p.num_gpu_blocks == 1234 and not p.derived
    with pytest.raises(CapacityError, match=r"llama-2-70b does not fit on a100-80gb.*weights need 128\.\d GiB"):
        plan_memory(get_model("llama-2-70b"), get_hardware("a100-80gb"), tp=1, pp=1, dtype="bf16", kv_dtype="bf16",
                    block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)
