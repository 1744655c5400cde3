"""plan over disaggregated fleets: static bounds from the cost model, xPyD sized from them and
verified by simulation, the chosen fleet a runnable pools config, the Pareto figure, the time
estimate said first."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from sim.api import simulate
from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost import make_cost_model
from sim.sweep.capacity import SearchSettings, judge
from sim.sweep.fleets import Layout, Unit, _which, static_bounds
from sim.sweep.plan import plan
from sim.types import BatchShape

S = SearchSettings(ttft_p99_s=2.0, tpot_p99_s=0.1, seeds=(0,), rel_tol=0.1, min_requests=150)
BASE = {"workload": {"num_requests": 150}, "cost": {"model": "roofline"}}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan_disagg")
    said = []
    res = plan("llama-3.1-8b", 8.0, gpus=["h100-sxm", "a100-80gb"], tps=[1], schedulers=[("vllm_v1", ())], settings=S,
               out=out, base=BASE, workers=2, progress=False, layouts=("agg", "disagg"), verify_top=2,
               say=said.append)
    return res, said


def test_static_bounds_follow_the_cost_model():
    base = {"model": "llama-3.1-8b", "cost": {"model": "roofline"}}
    pre, dec, why = static_bounds(base, Unit("h100-sxm", 1), 1000.0, 200.0, 0.05)
    cfg = load_config(base)
    cost = make_cost_model(cfg, get_model("llama-3.1-8b"), get_hardware("h100-sxm"))
    assert pre == pytest.approx(1 / cost.step_time(BatchShape((1000,), (0,))).total, rel=1e-12)
    b = int(why.split()[1])
    step = lambda n: cost.step_time(BatchShape((1,) * n, (1100,) * n)).total  # noqa: E731
    assert step(b) <= 0.05 and ("max_num_seqs" in why or "KV" in why or step(b + 1) > 0.05)
    assert "max_num_seqs" not in why or b == load_config(base).scheduler.knobs().max_num_seqs
    assert dec == pytest.approx(b / (200 * step(b)), rel=1e-12)


def test_a_missed_slo_grows_its_own_pool():
    assert _which({}, "p99 TTFT 3 s > 2 s") == "prefill"
    assert _which({}, "p99 TPOT 300 ms > 100 ms") == "decode"
    pools = {"pools": {"prefill": {"busy_share": 0.3}, "decode": {"busy_share": 0.9}}}
    assert _which(pools, "overloaded: queue growing") == "decode"
    lay = Layout(Unit("h200-sxm", 8), Unit("h100-sxm", 4), 2, 3, "vllm_v1")
    assert lay.label == "2P h200-sxm tp8 + 3D h100-sxm tp4 vllm_v1"
    assert [p["replicas"] for p in lay.pools()] == [2, 3] and [p["role"] for p in lay.pools()] == ["prefill", "decode"]


def test_plan_ranks_aggregated_and_disaggregated_fleets(planned):
    res, said = planned
    t = res.table
    assert said and said[0].startswith("plan: 2 aggregated candidate(s), 2 (GPU, TP) unit(s)") and "about" in said[0]
    assert set(t["layout"]) == {"agg", "disagg"}
    dis = t[t["layout"] == "disagg"]
    assert 2 <= len(dis) <= 4  # the two cheapest pairs by their bound, and the cheapest of each kind
    lay = pd.read_parquet(res.out / "layouts.parquet")
    assert len(lay) == 4  # every (prefill, decode) pair of the two units
    est = lay.estimate_usd_per_hour.to_numpy()
    assert (est[:-1] <= est[1:]).all()  # cheapest first
    for r in dis.itertuples():
        assert r.gpus == r.prefill_replicas * r.prefill_tp + r.decode_replicas * r.decode_tp
        row = lay[(lay.prefill == f"{r.prefill_hardware} tp{int(r.prefill_tp)}")
                  & (lay.decode == f"{r.decode_hardware} tp{int(r.decode_tp)}")]
        # verification only adds replicas to the bound-sized layout
        assert r.prefill_replicas >= row.prefill_replicas.iloc[0] and r.decode_replicas >= row.decode_replicas.iloc[0]
        assert row.prefill_replicas.iloc[0] == math.ceil(8.0 / row.prefill_bound_rps.iloc[0])
    ok = t[t["status"] == "ok"]
    assert t.loc[0, "usd_per_hour"] == ok["usd_per_hour"].min()
    for name in ("plan.parquet", "plan.md", "plan.json", "figures/pareto.png", "figures/pareto.svg", "layouts.parquet"):
        assert (res.out / name).is_file()
    assert "Disaggregated layouts: 4 (prefill, decode) pairs" in (res.out / "plan.md").read_text()


def test_a_chosen_disaggregated_fleet_is_a_runnable_pools_config(tmp_path):
    """Disaggregated layouts only: the chosen fleet is written with cluster.pools and meets the
    SLOs when run."""
    res = plan("llama-3.1-8b", 8.0, gpus=["h100-sxm"], tps=[1], schedulers=[("vllm_v1", ())], settings=S,
               out=tmp_path, base=BASE, workers=1, progress=False, layouts=("disagg",), verify_top=1)
    assert res.chosen is not None and res.chosen["layout"] == "disagg"
    run = simulate(tmp_path / "config.yaml", plots=False, progress=False)
    pools = run.config.cluster.pools
    assert [p.role for p in pools] == ["prefill", "decode"]
    assert [p.replicas for p in pools] == [res.chosen["prefill_replicas"], res.chosen["decode_replicas"]]
    assert judge(run.summary, S) == (True, "within SLOs")
    assert run.summary["cost"]["usd"] / run.summary["cost"]["gpu_hours"] == pytest.approx(2.99)
