"""plan: skips what does not fit, sizes and verifies fleets, writes a runnable config and figures."""
from __future__ import annotations

import pandas as pd
import pytest

from sim.sweep.capacity import SearchSettings, judge
from sim.sweep.plan import pareto_front, parse_schedulers, plan

S = SearchSettings(ttft_p99_s=2.0, tpot_p99_s=0.1, seeds=(0,), rel_tol=0.1, min_requests=150)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan70b")
    res = plan("llama-3.1-70b", 3.0, gpus=["h100-sxm", "a100-80gb", "mi300x"], tps=[1, 4], schedulers=[("vllm", ())],
               settings=S, out=out, base={"workload": {"num_requests": 150}, "cost": {"model": "roofline"}}, workers=2, progress=False)
    return res


def test_plan_chooses_a_verified_priced_fleet(planned):
    t = planned.table
    assert planned.chosen is not None and planned.chosen["status"] == "ok" and planned.chosen["verified"]
    assert t.loc[0, "chosen"] and t["chosen"].sum() == 1
    ok = t[t["status"] == "ok"]
    assert t.loc[0, "usd_per_hour"] == ok["usd_per_hour"].min()
    # GPUs without a public price are listed with cost unknown and never chosen
    mi = t[t["hardware"] == "mi300x"]
    assert (mi["status"] != "ok").all() and mi["usd_per_hour"].isna().all()
    assert (mi[mi["status"] == "cost unknown"]["note"].str.contains("no public price")).all()
    # tp=1 of a 70B model does not fit an 80 GB GPU: skipped, saying so
    nofit = t[(t["tp"] == 1) & t["hardware"].isin(["h100-sxm", "a100-80gb"])]
    assert (nofit["status"] == "does not fit").all() and nofit["note"].str.contains("weights need").all()
    # sizing: replicas >= rate / capacity, headroom consistent
    row = t.loc[0]
    assert row["replicas"] * row["capacity_rps_min"] >= 3.0 * (1 - 1e-9)
    assert row["headroom"] == pytest.approx(row["capacity_rps_min"] * row["replicas"] / 3.0 - 1)
    assert row["gpus"] == row["replicas"] * row["tp"]
    assert row["cost_model"] in ("roofline", "profiled")
    if row["cost_model"] != "profiled":
        assert "unprofiled" in row["note"]


def test_plan_fleet_config_runs_and_meets_slos(planned):
    from sim.api import simulate

    res = simulate(planned.out / "config.yaml", plots=False, progress=False)
    assert res.config.cluster.replicas == planned.chosen["replicas"]
    assert res.config.parallelism.tp == planned.chosen["tp"]
    assert judge(res.summary, S) == (True, "within SLOs")


def test_plan_outputs(planned):
    out = planned.out
    for name in ("plan.parquet", "plan.md", "plan.json", "config.yaml", "figures/pareto.png", "figures/pareto.svg"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    md = (out / "plan.md").read_text()
    assert "Lambda" in md and "no public price for mi300x" in md  # price source and date in the table
    assert len(pd.read_parquet(out / "plan.parquet")) == 3 * 2


def test_pareto_front_and_scheduler_parsing():
    assert pareto_front([1, 2, 3, 4], [5, 3, 4, 1]) == [0, 1, 3]
    assert parse_schedulers("vllm,static,vllm+max_num_seqs=64") == [
        ("vllm", ()), ("static", ()), ("vllm", (("max_num_seqs", 64),))]
