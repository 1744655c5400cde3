"""Attention data parallelism in the engine (``parallelism.dp``): each replica is an expert group
of dp ranks, each rank its own scheduler and KV pool; a group steps as one, at the pace of
``sim.cost.expert_parallel.dp_step_time`` (the slowest rank's own part, then the group's experts
and exchange; an idle rank runs a dummy batch)."""
import pytest

from conftest import tiny_config
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.cli import main
from sim.config import load_config
from sim.cost import make_cost_model
from sim.cost.expert_parallel import dp_step_time
from sim.engine import Engine
from sim.types import BatchShape

MOE = {"model": "qwen3-30b-a3b", "hardware": "h100-sxm"}


def dp_config(dp: int, **sections):
    return tiny_config(**MOE, parallelism={"tp": 1, "dp": dp, "ep": dp}, **sections)


def trace(tmp_path, rows):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return {"trace": {"path": str(path)}}


def test_every_rank_serves_and_a_group_steps_together():
    res = simulate(dp_config(4, workload={"rate": 8.0, "num_requests": 60}))
    req, steps = res.requests, res.steps
    assert (req["status"] == "finished").all() and (req["generated_tokens"] == req["output_tokens"]).all()
    assert sorted(req["replica"].unique()) == [0, 1, 2, 3]  # round robin over the ranks
    for _, g in steps.groupby("start_s"):  # ranks stepping together end together
        assert g["duration_s"].nunique() == 1
    assert res.summary["cost"]["gpu_hours"] == pytest.approx(4 * res.summary["sim"]["simulated_s"] / 3600)


def test_two_ranks_one_request_each_step_at_the_group_price(tmp_path):
    cfg = dp_config(2, workload=trace(tmp_path, [(0.0, 300, 3), (0.0, 200, 3)]))
    res = simulate(cfg)
    c = load_config(cfg)
    cm = make_cost_model(c, get_model(c.model), get_hardware(c.hardware))
    first = dp_step_time(cm, [BatchShape((300,), (0,), 0, 0, 1, 1), BatchShape((200,), (0,), 0, 0, 1, 1)])
    steps = res.steps.sort_values(["start_s", "replica"])
    assert steps["duration_s"].iloc[0] == pytest.approx(first, rel=1e-12)
    assert list(steps["replica"].iloc[:2]) == [0, 1]


def test_an_idle_rank_runs_a_dummy_batch(tmp_path):
    cfg = dp_config(2, workload=trace(tmp_path, [(0.0, 300, 2)]))
    res = simulate(cfg)
    c = load_config(cfg)
    cm = make_cost_model(c, get_model(c.model), get_hardware(c.hardware))
    want = dp_step_time(cm, [BatchShape((300,), (0,), 0, 0, 1, 1), BatchShape((), (), 0, 0, 1, 1)])
    assert len(res.steps) == 2 and set(res.steps["replica"]) == {0}
    assert res.steps["duration_s"].iloc[0] == pytest.approx(want, rel=1e-12)


def test_the_router_sees_ranks():
    eng = Engine(load_config(dp_config(4, cluster={"replicas": 2, "router": "least_loaded"})))
    assert len(eng.replicas) == 8 and len(eng.entry_pool) == 8


@pytest.mark.parametrize("sets, words", [
    (["faults.events=[{kind: crash, at_s: 1, replica: 0, duration_s: 1}]"], "faults"),
    (["cluster.prefill_replicas=1", "cluster.replicas=2"], "disaggregation"),
])
def test_what_dp_does_not_simulate_yet_is_one_line(capsys, sets, words):
    argv = ["run", "--model", "qwen3-30b-a3b", "--set", "parallelism.tp=1",
            "--set", "parallelism.dp=2", "--set", "parallelism.ep=2", "--num-requests", "3", "--no-plots", "--quiet"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "parallelism.dp" in err[0] and words in err[0], err


def test_speculative_decoding_in_an_expert_group(tmp_path):
    """Each rank's decodes verify their drafts: a request emits its accepted drafts plus one token
    a step, every acceptance is drawn, and the drafts' time is part of the group's step."""
    wl = trace(tmp_path, [(0.0, 100, 12), (0.0, 80, 12)])
    cfg = dp_config(2, workload=wl, speculative={"method": "mtp", "num_speculative_tokens": 2, "acceptance": 1.0})
    res = simulate(cfg)
    req = res.requests
    assert (req["status"] == "finished").all() and (req["generated_tokens"] == 12).all()
    sp = res.summary["speculative"]
    assert sp["acceptance_rate"] == 1.0 and sp["draft_tokens"] == sp["accepted_draft_tokens"] > 0
    # all drafts accepted: the prompt step gives the first token, then 3 a step (2 drafts + 1): 11 / 3 -> 4 steps
    assert len(res.steps[res.steps["replica"] == 0]) == 1 + 4
    plain = simulate(dp_config(2, workload=wl))
    assert len(plain.steps[plain.steps["replica"] == 0]) == 12
    # never accepted: one token a step, as without drafts, each step dearer by its drafts
    none = simulate(dp_config(2, workload=wl, speculative={"method": "mtp", "num_speculative_tokens": 2,
                                                          "acceptance": 0.0}))
    assert len(none.steps[none.steps["replica"] == 0]) == 12
    d_none = none.steps.sort_values(["start_s", "replica"])["duration_s"].to_numpy()
    d_plain = plain.steps.sort_values(["start_s", "replica"])["duration_s"].to_numpy()
    assert (d_none[2:] > d_plain[2:]).all()  # the decode steps (after each rank's prompt step)
