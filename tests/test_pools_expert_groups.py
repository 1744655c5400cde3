"""Pools with expert parallelism and attention data parallelism (``cluster.pools[i].parallelism``
ep and dp): a pool replica with dp > 1 is an expert group of dp ranks, as the top-level
``parallelism.dp`` makes one. The same runs as the aggregated path where they must be; a decode
pool's steps priced exactly as the aggregated expert group's; conservation on random fleets;
fast paths on == off; bad input named by pool and key."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import one_error, tiny_config, uniform_workload
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost import make_cost_model
from sim.cost.expert_parallel import dp_step_time
from sim.engine import Engine
from sim.metrics.records import steps_frame
from sim.types import BatchShape
from test_pools import fleet_pools, fleet_strategy, identical_runs, run_fleet, same_run, trace

MOE = "qwen3-30b-a3b"


def pool(name, hardware="h100-sxm", role="both", replicas=1, tp=1, ep=None, dp=None, **kw):
    par = {"tp": tp, **({"ep": ep} if ep is not None else {}), **({"dp": dp} if dp is not None else {})}
    return {"name": name, "hardware": hardware, "role": role, "replicas": replicas, "parallelism": par, **kw}


def moe_config(**sections):
    return tiny_config(model=MOE, **sections)


# ------------------------------------------------------------------ the aggregated equivalent

@pytest.mark.parametrize("tp,ep,dp,replicas", [(1, 4, 4, 1), (2, 4, 2, 2), (2, 2, 1, 2)])
def test_a_pool_with_ep_and_dp_runs_as_the_top_level_parallelism(tp, ep, dp, replicas):
    wl = uniform_workload(20.0, 60, 600, 60)
    agg = simulate(moe_config(parallelism={"tp": tp, "ep": ep, "dp": dp}, cluster={"replicas": replicas},
                              workload=wl))
    pooled = simulate(moe_config(cluster={"pools": [pool("g", tp=tp, ep=ep, dp=dp, replicas=replicas)]}, workload=wl))
    same_run(agg, pooled)
    b = pooled.summary["pools"]["g"]
    assert b["gpus"] == replicas * tp * dp
    assert (b.get("ep", 1), b.get("dp", 1)) == (ep, dp)
    assert pooled.summary["cost"]["gpu_hours"] == pytest.approx(agg.summary["cost"]["gpu_hours"], rel=1e-12)
    if dp > 1:
        assert sorted(pooled.requests["replica"].unique()) == list(range(replicas * dp))  # the router sees ranks


def test_ep_and_dp_default_to_the_top_level_parallelism():
    from sim.cluster.pools import fleet

    cfg = load_config(moe_config(parallelism={"tp": 2, "ep": 2},
                                 cluster={"pools": [pool("a", tp=2), pool("b", tp=1, ep=4, dp=4)]}))
    a, b = fleet(cfg)
    assert (a.tp, a.ep, a.dp, a.gpus_per_replica) == (2, 2, 1, 2)
    assert (b.tp, b.ep, b.dp, b.gpus_per_replica, b.ranks) == (1, 4, 4, 4, 4)
    assert b.cfg.parallelism.ep == 4 and b.cfg.parallelism.dp == 4


def test_a_decode_pool_of_expert_groups_steps_at_the_aggregated_groups_price(tmp_path):
    """One request: prefilled on an H100 (tp 2), its KV sent at the slower end's link (one
    decode rank's GPU: 64 GB/s), decoded on rank 0 of a decode group of two ranks (tp 1, ep 2,
    dp 2) whose other rank runs a dummy batch: each decode step is the aggregated run's
    ``dp_step_time`` for the same group."""
    prompt, output = 700, 5
    pools = [pool("p", tp=2, ep=1, dp=1, role="prefill"), pool("d", tp=1, ep=2, dp=2, role="decode")]
    res = simulate(moe_config(cluster={"pools": pools}, workload=trace(tmp_path, [(0, prompt, output)])))
    agg = load_config(moe_config(parallelism={"tp": 1, "ep": 2, "dp": 2}))
    m, hw = get_model(MOE), get_hardware("h100-sxm")
    cd = make_cost_model(agg, m, hw)
    cp = make_cost_model(load_config(moe_config(parallelism={"tp": 2})), m, hw)
    prefill = cp.step_time(BatchShape((prompt,), (0,), tp=2)).total
    transfer = prompt * m.kv_bytes_per_token() / (hw.host_bw * 1)
    idle = BatchShape((), (), 0, 0, 1, 1)
    decodes = [dp_step_time(cd, [BatchShape((1,), (prompt + i,), 0, 0, 1, 1), idle]) for i in range(output - 1)]
    r = res.requests.iloc[0]
    assert r.ttft_s == pytest.approx(prefill, rel=1e-12)
    dsteps = res.steps[res.steps.replica >= 1].sort_values("start_s")
    assert set(dsteps.replica) == {1}  # the least loaded rank, the lowest index first
    assert dsteps.start_s.iloc[0] == pytest.approx(prefill + transfer, rel=1e-12)
    assert list(dsteps.duration_s) == pytest.approx(decodes, rel=1e-12)
    assert r.e2e_s == pytest.approx(prefill + transfer + sum(decodes), rel=1e-9)
    s = res.summary["pools"]
    assert s["d"]["gpus"] == 2 and s["p"]["gpus"] == 2 and s["d"]["dp"] == 2
    assert res.summary["cost"]["gpu_hours"] == pytest.approx(4 * res.summary["sim"]["simulated_s"] / 3600, rel=1e-9)


# ---------------------------------------------------------------- conservation, random fleets

GPUS = ["h100-sxm", "h200-sxm"]
LAYOUTS = [(1, 1, 1), (2, 1, 1), (2, 2, 1), (1, 2, 2), (1, 4, 4), (2, 4, 2), (1, 1, 2)]  # (tp, ep, dp)
a_pool = st.fixed_dictionaries({"hardware": st.sampled_from(GPUS), "layout": st.sampled_from(LAYOUTS),
                                "replicas": st.integers(1, 2)})
fleets = fleet_strategy(a_pool)


def ep_pools(p) -> list[dict]:
    def one(name, q, role):
        tp, ep, dp = q["layout"]
        return pool(name, q["hardware"], role, q["replicas"], tp, ep, dp)

    return fleet_pools(p, one)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets)
def test_conservation_on_random_fleets_with_expert_groups(p):
    """Every request prefilled on one entry rank, decoded on one rank, its KV moved at most once
    (from the rank that prefilled it); arrived = completed + rejected; every block back; ranks of
    one group step together; the pools block counts the GPUs of every group."""
    pools = ep_pools(p)
    eng, out, req, moved, role = run_fleet(p, pools, moe_config)
    assert len(eng.replicas) == sum(q["replicas"] * q["parallelism"]["dp"] for q in pools)
    # the ranks of one expert group step together: equal start, equal duration
    group_of, i = {}, 0
    while i < len(eng.replicas):
        d = eng.replicas[i].pool.dp
        group_of.update((j, i) for j in range(i, i + d))
        i += d
    steps = steps_frame(out)
    for _, rows in steps.groupby([steps.replica.map(group_of), "start_s"]):
        assert rows.duration_s.nunique() == 1
    assert out.num_gpus == sum(q["replicas"] * q["parallelism"]["tp"] * q["parallelism"]["dp"] for q in pools)


# ------------------------------------------------------------------------- fast paths

@pytest.mark.parametrize("seed", [0, 1])
def test_fast_paths_on_equal_off_with_an_expert_group_pool(seed):
    """The replicas' fast paths stay off in a fleet with an expert-group pool (the groups' rank
    runs, ``sim.grouprun``, are on); the results are the same with the switch on or off."""
    pools = [pool("g", tp=1, ep=2, dp=2), pool("h", "h200-sxm", tp=2, ep=1, dp=1)]
    runs = []
    for ff in (True, False):
        cfg = moe_config(seed=seed, cluster={"pools": pools, "router": "round_robin"}, engine={"fast_forward": ff},
                         workload=uniform_workload(30.0, 120, 800, 100))
        assert Engine(load_config(cfg)).fast_forward is False
        runs.append(simulate(cfg))
    identical_runs(*runs)


# ------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("model,pools,message", [
    (MOE, [pool("a"), pool("b", tp=1, ep=3)], "cluster.pools[1].parallelism.ep (b): ep=3 does not divide"),
    (MOE, [pool("a"), pool("b", tp=1, ep=4, dp=2)],
     "cluster.pools[1].parallelism.ep (b): ep=4 does not divide the tp x dp = 2 GPUs"),
    ("llama-3.1-8b", [pool("a", ep=2)], "cluster.pools[0].parallelism.ep (a): llama-3.1-8b has no routed experts"),
    (MOE, [pool("a", dp=0)], "cluster.pools[0].parallelism.dp: Input should be greater than or equal to 1"),
    (MOE, [pool("a", ep=2, dp=2, autoscale={"target": 4, "max_replicas": 2})],
     "cluster.pools[0].autoscale (a): autoscaling is not simulated with attention data parallelism"),
])
def test_bad_expert_group_pools_are_one_line_naming_the_pool_and_key(tmp_path, capsys, tripwire, model, pools,
                                                                     message):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": model, "cluster": {"pools": pools}}))
    err = one_error(capsys, ["run", str(path), "--quiet"])
    assert message in err
