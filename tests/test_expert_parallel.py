"""Expert and attention-data parallelism: config checks, memory, and the cost model's price of an
expert-parallel step (sim/cost/expert_parallel.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost import make_cost_model
from sim.cost.expert_parallel import dp_step_time, group_part, rank_part
from sim.cost.memory import weights_per_gpu
from sim.cost.roofline import RooflineCostModel
from sim.errors import ConfigError
from sim.types import BatchShape


def cfg(**par):
    return {"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8", "parallelism": {"tp": 8, **par},
            "cost": {"model": "roofline"}}


@pytest.mark.parametrize("over, key, words", [
    ({"model": "llama-3.1-8b", "dtype": "bf16", "parallelism": {"tp": 8, "ep": 2}}, "parallelism.ep", "no routed experts"),
    ({"parallelism": {"tp": 8, "ep": 3}}, "parallelism.ep", "does not divide deepseek-v3's 256 routed experts"),
    ({"parallelism": {"tp": 8, "ep": 16}}, "parallelism.ep", "tp x dp = 8 GPUs"),
    ({"parallelism": {"tp": 8, "ep": 8, "dp": 2}, "faults": {"events": [{"kind": "crash", "at_s": 1, "replica": 0,
                                                                         "duration_s": 1}]}},
     "parallelism.dp", "faults are not simulated with attention data parallelism"),
])
def test_bad_expert_parallelism_is_one_line_naming_the_key(over, key, words):
    with pytest.raises(ConfigError) as e:
        load_config(cfg() | over)
    msg = str(e.value)
    assert key in msg and words in msg and "\n" not in msg


def test_expert_parallelism_keeps_the_weight_bytes_and_dp_splits_the_experts():
    m = get_model("deepseek-v3")
    tp8 = weights_per_gpu(m, 8, 1, "fp8")
    assert tp8 == weights_per_gpu(m, 8, 1, "fp8", dp=1)
    # dp=2 x tp=4: attention held by each tp=4 group, experts over all 8 GPUs
    dp2 = weights_per_gpu(m, 4, 1, "fp8", dp=2)
    experts = m.moe_layers * m.num_experts * m.expert_params  # fp8: one byte each
    assert dp2 - weights_per_gpu(m, 4, 1, "fp8") == pytest.approx(experts / 8 - experts / 4)


def test_ep_with_dp1_runs_end_to_end_and_prices_experts_at_the_real_split():
    from sim.api import simulate

    c = load_config(cfg(ep=8) | {"workload": {"num_requests": 8, "rate": 50.0}, "output": {"plots": False,
                                                                                          "progress": False}})
    res = simulate(c, plots=False, progress=False)
    assert (res.requests["status"] == "finished").sum() == 8
    cm = make_cost_model(c, get_model(c.model), get_hardware(c.hardware))
    assert (cm.shapes.ep, cm.shapes.moe_tp) == (8, 1)
    assert cm.shapes.gemms["expert_down"][1] == 2048  # whole experts, 32 of them on each GPU


def test_skew_multiplies_the_routed_experts_only():
    m, hw = get_model("deepseek-v3"), get_hardware("h200-sxm")
    base = RooflineCostModel(m, hw, tp=8, ep=8, dtype="fp8")
    skew = RooflineCostModel(m, hw, tp=8, ep=8, dtype="fp8", expert_skew=1.5)
    assert skew.moe(512) == pytest.approx(1.5 * base.moe(512))
    sh = BatchShape((512,), (0,), tp=8)
    assert skew.step_time(sh).total - base.step_time(sh).total == pytest.approx(
        m.moe_layers * 0.5 * base.moe(512))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=2, max_size=2))
def test_a_dp_step_is_the_slowest_rank_plus_the_groups_experts(tokens):
    m, hw = get_model("deepseek-v3"), get_hardware("h200-sxm")
    cm = RooflineCostModel(m, hw, tp=4, ep=8, dp=2, dtype="fp8")
    shapes = [BatchShape(tuple([1] * t), tuple([100] * t), tp=4) for t in tokens]
    t = dp_step_time(cm, shapes)
    own = [rank_part(cm, s) if s.new_tokens else 0.0 for s in shapes]
    assert t == pytest.approx(max(own) + group_part(cm, sum(max(1, x) for x in tokens)))
    # the step is never faster than either rank alone would be without the other's tokens
    assert t >= max(own)
    # more tokens on the busiest rank never makes the step faster
    more = [BatchShape(tuple([1] * (tokens[0] + 8)), tuple([100] * (tokens[0] + 8)), tp=4), shapes[1]]
    assert dp_step_time(cm, more) >= t - 1e-12


def _db():
    from sim.cost import kerneldb_data as kd

    if kd.package_root() is None:
        pytest.skip("aiconfigurator-core (the kernel database) is not installed")
    return kd


def test_dp_exchange_and_ep_experts_come_from_the_database_tables():
    import pandas as pd

    from sim.cost.kerneldb import load_kerneldb_cost_model

    kd = _db()
    m, hw = get_model("deepseek-v3"), get_hardware("h200-sxm")
    cm = load_kerneldb_cost_model(m, hw, framework="vllm", tp=4, ep=8, dp=2, dtype="fp8")
    system, version = kd.resolve("h200-sxm", "vllm", None)
    nccl = kd.versions(system, "comm", "nccl", "nccl_perf")[-1]
    nc = pd.read_parquet(kd.data_dir(system) / "comm" / "nccl" / nccl / "nccl_perf.parquet")
    nc = nc[(nc.num_gpus == 8) & (nc.nccl_dtype == "half")]
    tokens = 64  # 64 x 7168 elements lies between two measured message sizes: the sum of the two
    elements = tokens * m.hidden_size  # collectives lies between their sums there
    lo, hi = nc.message_size[nc.message_size <= elements].max(), nc.message_size[nc.message_size >= elements].min()
    both = [sum(nc[(nc.op_name == op) & (nc.message_size == x)].latency.min() for op in ("all_gather", "reduce_scatter"))
            / 1e3 for x in (lo, hi)]
    assert min(both) <= cm.dp_exchange(tokens) <= max(both)
    assert cm.dp_exchange(tokens) < cm.dp_exchange(4 * tokens)
    assert any("attention-DP exchange" in n and "nccl_perf" in n for n in cm.notes)
    # the routed experts at moe_tp 1, moe_ep 8 (whole experts, 32 per GPU), by the group's tokens
    mv = kd.versions(system, "moe", "vllm", "moe_perf")
    mo = pd.read_parquet(kd.data_dir(system) / "moe" / "vllm" / (version if version in mv else mv[-1]) / "moe_perf.parquet")
    mo = mo[(mo.hidden_size == 7168) & (mo.inter_size == 2048) & (mo.topk == 8) & (mo.num_experts == 256)
            & (mo.moe_tp_size == 1) & (mo.moe_ep_size == 8) & (mo.distribution == "balanced") & (mo.moe_dtype == "fp8_block")]
    t = int(mo.num_tokens.iloc[len(mo) // 2])
    assert cm.moe(t) == pytest.approx(mo[mo.num_tokens == t].latency.min() / 1e3, rel=1e-9)


def test_int4_quantises_only_the_routed_experts():
    m = get_model("kimi-k2.5")
    bf16, int4 = weights_per_gpu(m, 8, 1, "bf16"), weights_per_gpu(m, 8, 1, "int4")
    experts = m.moe_layers * m.num_experts * m.expert_params / 8
    assert bf16 - int4 == pytest.approx(experts * (2 - 0.5625))  # 4 bits + a bf16 scale per 32
    with pytest.raises(ConfigError, match="dtype int4: quantises the routed experts"):
        load_config({"model": "llama-3.1-8b", "dtype": "int4"})


def test_deepep_dispatch_and_combine_come_from_moe_a2a_perf():
    import pandas as pd

    from sim.cost.kerneldb import load_kerneldb_cost_model

    kd = _db()
    m, hw = get_model("deepseek-v3"), get_hardware("h200-sxm")
    cm = load_kerneldb_cost_model(m, hw, framework="vllm", tp=1, ep=8, dp=8, dtype="fp8", moe_dispatch="deepep_ll")
    system, _ = kd.resolve("h200-sxm", "vllm", None)
    v = kd.versions(system, "comm", "vllm", "moe_a2a_perf")[-1]
    a = pd.read_parquet(kd.data_dir(system) / "comm" / "vllm" / v / "moe_a2a_perf.parquet")
    a = a[(a.comm_backend == "deepep_ll") & (a.ep_size == 8) & (a.hidden_size == 7168) & (a.topk == 8)
          & (a.num_experts == 256) & (a.num_tokens == 64)]
    want = sum(a[a.phase == ph].latency.min() for ph in ("dispatch", "combine")) / 1e3
    assert cm.dp_exchange(8 * 64) == pytest.approx(want, rel=1e-9)  # 64 tokens on each of 8 ranks
    assert any("DeepEP ll dispatch + combine" in n for n in cm.notes)
    # no rows for 16 GPUs: the all-gather / reduce-scatter, said so
    wide = load_kerneldb_cost_model(m, hw, framework="vllm", tp=1, ep=16, dp=16, dtype="fp8", moe_dispatch="deepep_ll")
    assert any("no deepep_ll moe_a2a_perf rows for 16 GPUs" in n for n in wide.notes)


def test_sglang_deepep_low_latency_prices_from_sglangs_wideep_tables():
    """SGLang with ``moe_dispatch: deepep_ll`` and attention DP: the exchange is DeepEP low-latency
    dispatch + combine from ``wideep_deepep_ll_perf`` by each rank's tokens, the routed experts
    DeepEP's MoE from ``wideep_generation_moe_perf`` (uniform rows for balanced routing) by the group's
    tokens; without it, the all-gather and the ``moe_perf`` rows as before."""
    import pandas as pd

    from sim.cost.kerneldb import load_kerneldb_cost_model

    kd = _db()
    m, hw = get_model("deepseek-r1"), get_hardware("gb200")
    system, _ = kd.resolve("gb200", "sglang", None)
    lv = kd.versions(system, "comm", "sglang", "wideep_deepep_ll_perf")
    wv = kd.versions(system, "moe", "sglang", "wideep_generation_moe_perf")
    if not lv or not wv:
        pytest.skip("this aiconfigurator-core has no SGLang wideep tables for GB200")
    cm = load_kerneldb_cost_model(m, hw, framework="sglang", tp=1, ep=32, dp=32, dtype="fp8", moe_dispatch="deepep_ll")
    ll = pd.read_parquet(kd.data_dir(system) / "comm" / "sglang" / lv[-1] / "wideep_deepep_ll_perf.parquet")
    ll = ll[(ll.node_num == 1) & (ll.hidden_size == 7168) & (ll.num_topk == 8) & (ll.num_experts == 256)
            & (ll.num_token == 64)]
    assert cm.dp_exchange(32 * 64) == pytest.approx(float(ll.dispatch_avg_t_us.min() + ll.combine_avg_t_us.min()) / 1e6,
                                                    rel=1e-9)  # 64 tokens on each of 32 ranks
    w = pd.read_parquet(kd.data_dir(system) / "moe" / "sglang" / wv[-1] / "wideep_generation_moe_perf.parquet")
    w = w[(w.moe_ep_size == 32) & (w.moe_tp_size == 1) & (w.distribution == "uniform") & (w.moe_dtype == "fp8_block")
          & (w.hidden_size == 7168) & (w.inter_size == 2048) & (w.topk == 8) & (w.num_experts == 256)
          & (w.num_tokens == 1024)]
    assert cm.moe(1024) == pytest.approx(float(w.latency.min()) / 1e3, rel=1e-9)
    assert any("SGLang's DeepEP MoE" in n for n in cm.notes) and any("DeepEP ll dispatch" in n for n in cm.notes)
    ag = load_kerneldb_cost_model(m, hw, framework="sglang", tp=1, ep=32, dp=32, dtype="fp8")
    assert any("MoE experts: moe_perf" in n for n in ag.notes) and ag.moe(1024) != cm.moe(1024)
    assert ag.dp_exchange(32 * 64) != cm.dp_exchange(32 * 64)


def test_a_pools_own_moe_dispatch_builds_its_own_cost_model():
    """``cluster.pools[i].moe_dispatch``: only that pool's cost model changes; a bad value names the key."""
    from sim.cluster.pools import fleet

    base = {"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8", "cost": {"model": "roofline"},
            "cluster": {"pools": [{"name": "p", "role": "prefill", "hardware": "h200-sxm",
                                   "parallelism": {"tp": 1, "ep": 8, "dp": 8}},
                                  {"name": "d", "role": "decode", "hardware": "h200-sxm", "moe_dispatch": "deepep_ll",
                                   "parallelism": {"tp": 1, "ep": 8, "dp": 8}}]}}
    p, d = fleet(load_config(base))
    assert p.cfg.cost.moe_dispatch == "allgather" and d.cfg.cost.moe_dispatch == "deepep_ll" and p.key != d.key
    base["cluster"]["pools"][1]["moe_dispatch"] = "nvlink"
    with pytest.raises(ConfigError) as e:
        load_config(base)
    assert "cluster.pools.1.moe_dispatch" in str(e.value).replace("[", ".").replace("]", "") and "\n" not in str(e.value)
