"""An expert group's decode runs (``sim.grouprun``): with the fast paths on, a rank that only
decodes takes the group's steps without planning; every request row, step row and summary
figure is the same as stepping every rank by plan (``engine.fast_forward: false``), on random
groups (dp 2-8, every scheduler, small KV pools that preempt, swap, routers that read the
ranks' loads, closed-loop clients, rows on and off) and on hand-made cases."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.grouprun as grouprun
from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost import make_cost_model
from sim.cost import kerneldb_data as kd
from sim.cost.expert_parallel import dp_step_time
from sim.scheduler import REGISTRY
from sim.types import BatchShape
from test_fast_forward import assert_identical, both
from test_pools_expert_groups import ep_pools, fleets, moe_config

MOE = "qwen3-30b-a3b"  # 128 routed experts
EP = {2: 2, 3: 1, 4: 4, 5: 1, 6: 2, 7: 1, 8: 8}  # an expert-parallel degree for each dp (divides 128 and dp)


def group_config(dp: int, **sections) -> dict:
    return tiny_config(model=MOE, parallelism={"tp": 1, "dp": dp, "ep": EP[dp]}, **sections)


@pytest.fixture
def run_steps(monkeypatch):
    """Counts the group steps that ranks took in decode runs (so a test can tell the fast path
    was used, not only that the results agree)."""
    taken = []
    close = grouprun.GroupRuns.close

    def counting(self, i, end):
        taken.append(self.runs[i].k)
        return close(self, i, end)

    monkeypatch.setattr(grouprun.GroupRuns, "close", counting)
    return taken


groups = st.fixed_dictionaries({
    "dp": st.integers(2, 8),
    "groups": st.integers(1, 2),
    "scheduler": st.sampled_from(sorted(REGISTRY)),
    "router": st.sampled_from(["round_robin", "least_loaded", "power_of_two"]),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "blocks": st.integers(40, 600),  # small pools preempt
    "block_size": st.sampled_from([4, 16]),
    "rate": st.floats(1.0, 300.0),
    "n": st.integers(1, 60),
    "pmax": st.integers(1, 500),
    "omax": st.integers(1, 150),
    "seed": st.integers(0, 1000),
    "rows": st.booleans(),
})


def drawn_config(p: dict) -> dict:
    return group_config(
        p["dp"], seed=p["seed"], cluster={"replicas": p["groups"], "router": p["router"]},
        scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"], "preemption": p["preemption"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]),
        output={"step_records": p["rows"], "plots": False, "progress": False})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups)
def test_group_runs_are_exact_on_random_groups(p):
    assert_identical(*both(drawn_config(p)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.integers(2, 6), think=st.sampled_from([0.0, 0.3]), router=st.sampled_from(["round_robin", "least_loaded"]),
       seed=st.integers(0, 1000))
def test_group_runs_are_exact_for_closed_loop_clients(dp, think, router, seed):
    """A completion on one rank lets a client send to another rank in the middle of its run."""
    cfg = group_config(dp, seed=seed, cluster={"router": router}, kv={"num_gpu_blocks": 300},
                       workload={"num_requests": 40, "prompt": {"kind": "uniform", "min": 16, "max": 600},
                                 "output": {"kind": "uniform", "min": 1, "max": 200},
                                 "closed_loop": {"clients": 2 * dp + 1, "think_time_s": think}})
    assert_identical(*both(cfg))


@pytest.mark.parametrize("rows", [True, False])
def test_the_runs_take_most_steps_and_change_nothing(run_steps, rows):
    """A steady load: most ranks' steps are taken in runs, and the results are those of planning
    every step."""
    cfg = group_config(4, workload=uniform_workload(20.0, 200, 400, 120),
                       output={"step_records": rows, "plots": False, "progress": False})
    on = simulate({**cfg, "engine": {"fast_forward": True}})
    taken = sum(run_steps)
    run_steps.clear()
    off = simulate({**cfg, "engine": {"fast_forward": False}})
    assert not run_steps  # (off: no run)
    assert_identical(on, off)
    assert taken > 0.6 * on.summary["sim"]["steps"]


def test_two_ranks_decoding_step_at_the_group_price(tmp_path, run_steps):
    """Two ranks with one request each: after the prompt step, every step is a decode step of
    both ranks, taken in runs (one per rank, ended by the finish), each lasting
    ``dp_step_time`` of the two decode shapes, exactly."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,300,6\n0.0,200,6\n")
    cfg = group_config(2, workload={"trace": {"path": str(path)}})
    res = simulate(cfg)
    assert run_steps == [5, 5]  # the 5 decode steps of each rank, in one run each
    c = load_config(cfg)
    cm = make_cost_model(c, get_model(c.model), get_hardware(c.hardware))
    steps = res.steps.sort_values(["start_s", "replica"])
    assert len(steps) == 12 and list(steps["replica"]) == [0, 1] * 6
    d = steps["duration_s"].to_numpy()
    for j in range(1, 6):  # step j: request 0 has 300 + j - 1 tokens computed, request 1 200 + j - 1
        want = dp_step_time(cm, [BatchShape((1,), (300 + j - 1,), 0, 0, 1, 1),
                                 BatchShape((1,), (200 + j - 1,), 0, 0, 1, 1)])
        assert d[2 * j] == d[2 * j + 1] == want
    req = res.requests.sort_values("request_id")
    assert list(req["generated_tokens"]) == [6, 6] and (req["status"] == "finished").all()
    assert_identical(*both(cfg))


def test_an_arrival_ends_its_ranks_run_and_no_other(tmp_path, run_steps):
    """Round robin gives the third request, arriving at 0.05 s, to rank 0: rank 0's run ends
    there (it plans the prompt step), rank 1's goes on to its request's finish (39 steps)."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,64,40\n0.0,64,40\n0.05,64,5\n")
    cfg = group_config(2, workload={"trace": {"path": str(path)}}, cluster={"router": "round_robin"})
    res = simulate(cfg)
    steps = res.steps
    assert run_steps[0] < 39 and 39 in run_steps  # rank 0's first run ends early; rank 1's does not
    assert list(steps[steps.prefill_tokens > 0].replica) == [0, 1, 0]
    assert steps.start_s[steps.prefill_tokens > 0].iloc[-1] >= 0.05
    assert_identical(*both(cfg))


def test_a_pool_that_cannot_grow_preempts_as_planned(run_steps):
    """A KV pool too small for the batch's growth: runs stop before the step whose blocks the
    pool cannot give, and the rank's plan preempts; preemptions happen, results are equal."""
    cfg = group_config(2, kv={"num_gpu_blocks": 48, "block_size": 4},
                       workload=uniform_workload(50.0, 40, 40, 120))
    on, off = both(cfg)
    assert on.summary["requests"]["preemptions"] > 0
    assert_identical(on, off)
    assert run_steps


@pytest.mark.skipif(kd.package_root() is None, reason="aiconfigurator-core (a dependency) is not installed")
@pytest.mark.parametrize("seed", [0, 1])
def test_group_runs_are_exact_priced_by_the_kernel_database(seed):
    """DeepSeek-V3 fp8 on H200 priced by the kernel database (MLA decode attention, measured
    experts and exchange, out-of-range counts): the wide-EP benchmark's layout, smaller."""
    cfg = {"model": "deepseek-v3", "hardware": "h200-sxm", "dtype": "fp8",
           "parallelism": {"tp": 1, "dp": 8, "ep": 8}, "cost": {"model": "kerneldb", "framework": "vllm"},
           "workload": {"rate": 8.0, "num_requests": 300}, "seed": seed,
           "output": {"plots": False, "progress": False, "step_records": bool(seed)}}
    assert_identical(*both(cfg))


def test_the_cost_model_is_asked_the_same_questions(monkeypatch):
    """Out-of-range counts replay what each question counted: with runs, every rank's routed
    experts are asked for as often, with the same tokens, as when each step is priced by plan."""
    from collections import Counter

    from sim.cost.roofline import RooflineCostModel

    asked = Counter()
    moe = RooflineCostModel.moe

    def counting(self, tokens):
        asked[tokens] += 1
        return moe(self, tokens)

    monkeypatch.setattr(RooflineCostModel, "moe", counting)
    cfg = group_config(3, workload=uniform_workload(30.0, 80, 300, 80))
    on = simulate({**cfg, "engine": {"fast_forward": True}})
    on_asked = Counter(asked)
    asked.clear()
    off = simulate({**cfg, "engine": {"fast_forward": False}})
    assert on_asked == asked and sum(asked.values()) > 2 * on.summary["sim"]["steps"] / 3
    assert_identical(on, off)


def test_a_run_goes_on_past_a_finish(tmp_path, run_steps):
    """Rank 0 gets two requests of 6 and 10 tokens (round robin gives rank 1 a one-token one, which
    never decodes): after the prompt step, one run of 9 decode steps; the first request leaves at
    the end of its 5th, on time, and the rest runs as a batch of one, each step at the group's
    price of the batch it had."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,300,6\n0.0,1,1\n0.0,200,10\n")
    cfg = group_config(2, workload={"trace": {"path": str(path)}}, cluster={"router": "round_robin"})
    res = simulate(cfg)
    assert run_steps == [9]  # rank 0's one run; rank 1's one-token request never decodes
    steps = res.steps[res.steps.replica == 0].reset_index(drop=True)
    assert list(steps.batch_size) == [2] + [2] * 5 + [1] * 4 and list(steps.decode_tokens) == [0] + [2] * 5 + [1] * 4
    c = load_config(cfg)
    cm = make_cost_model(c, get_model(c.model), get_hardware(c.hardware))
    idle = BatchShape((), (), 0, 0, 1, 1)
    for j in range(1, 10):
        shape = (BatchShape((1, 1), (300 + j - 1, 200 + j - 1), 0, 0, 1, 1) if j <= 5
                 else BatchShape((1,), (200 + j - 1,), 0, 0, 1, 1))
        assert steps.duration_s[j] == dp_step_time(cm, [shape, idle])
    req = res.requests.set_index("request_id")
    assert req.finish_s[0] == steps.start_s[6] and req.finish_s[2] == steps.start_s[9] + steps.duration_s[9]
    assert_identical(*both(cfg))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets)
def test_group_runs_are_exact_in_random_fleets(p):
    """Fleets of pools with expert groups (prefill and decode pools: a decode rank's requests
    arrive by KV transfer) and plain replicas, on two GPUs: runs on equal runs off."""
    runs = [simulate(moe_config(
        seed=p["seed"], cluster={"pools": ep_pools(p), "router": p["router"]}, scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"], "preemption": p["preemption"]}, engine={"fast_forward": ff},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]))) for ff in (True, False)]
    assert_identical(*runs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([4, 8]), seed=st.integers(0, 1000), rows=st.booleans(), omax=st.integers(20, 300))
def test_group_runs_are_exact_with_sliding_window_layers(dp, seed, rows, omax):
    """gpt-oss-120b (half its layers attend over a 128-token window: a step's price reads the
    batch's longest context), ranks whose batches lose their longest request as it finishes."""
    cfg = tiny_config(model="gpt-oss-120b", hardware="h200-sxm", parallelism={"tp": 1, "dp": dp, "ep": dp}, seed=seed,
                      workload=uniform_workload(40.0, 60, 400, omax),
                      output={"step_records": rows, "plots": False, "progress": False})
    assert_identical(*both(cfg))


def test_the_group_clock_is_trimmed_under_open_runs(monkeypatch):
    """The clock keeps only the steps open runs read: trimmed every few steps here (as every 4,096
    in a long run), the runs read the same times."""
    monkeypatch.setattr(grouprun, "TRIM", 6)
    kept = []
    trim = grouprun.GroupRuns._trim

    def watching(self):
        trim(self)
        kept.append((len(self.starts), self.stepped))

    monkeypatch.setattr(grouprun.GroupRuns, "_trim", watching)
    cfg = group_config(3, workload=uniform_workload(20.0, 80, 300, 150))
    assert_identical(*both(cfg))
    assert kept and max(n for n, _ in kept) < kept[-1][1] / 3  # (670 group steps; at most 113 kept)
