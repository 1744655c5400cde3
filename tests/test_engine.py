"""Exact outcomes of the engine on tiny cases, and invariants on many random ones."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_run_invariants, tiny_config, uniform_workload
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import load_config
from sim.cost.roofline import RooflineCostModel
from sim.engine import Engine
from sim.metrics.records import requests_frame
from sim.types import BatchShape


def one_request(prompt, output):
    return tiny_config(workload={"trace": None, "num_requests": 1, "rate": 1.0,
                                 "prompt": {"kind": "fixed", "value": prompt},
                                 "output": {"kind": "fixed", "value": output}})


@pytest.mark.parametrize("prompt,output", [(100, 1), (512, 5), (2000, 17)])
def test_single_request_ttft_is_prefill_and_e2e_adds_decodes(prompt, output):
    res = simulate(one_request(prompt, output))
    r = res.requests.iloc[0]
    cm = RooflineCostModel(get_model("llama-3.1-8b"), get_hardware("h100-sxm"))
    prefill = cm.step_time(BatchShape((prompt,), (0,))).total
    decodes = sum(cm.step_time(BatchShape((1,), (prompt + i,))).total for i in range(output - 1))
    assert r.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert r.e2e_s == pytest.approx(prefill + decodes, rel=1e-12)
    assert len(res.steps) == output
    assert r.generated_tokens == output


def test_long_request_rejected_with_reason_and_counted():
    cfg = one_request(130_000, 2000)  # beyond Llama-3.1-8B's 131,072-token context
    res = simulate(cfg)
    assert res.summary["requests"]["rejected"] == 1
    assert "context" in res.requests.iloc[0].reject_reason


def test_prompt_over_token_budget_rejected_by_vllm():
    cfg = {**one_request(9000, 3), "scheduler": {"name": "vllm"}}
    res = simulate(cfg)
    assert res.requests.iloc[0].status == "rejected"
    assert "max_num_batched_tokens" in res.requests.iloc[0].reject_reason


def test_preemption_by_recompute_when_blocks_run_out():
    cfg = tiny_config(kv={"num_gpu_blocks": 30}, workload={"rate": 100.0, "num_requests": 12,
                                                              "prompt": {"kind": "fixed", "value": 100},
                                                              "output": {"kind": "fixed", "value": 60}})
    res = simulate(cfg)
    assert res.summary["requests"]["preemptions"] > 0
    assert res.summary["requests"]["completed"] == 12
    assert (res.requests.generated_tokens == 60).all()


def test_static_batching_waits_for_whole_batch():
    cfg = tiny_config(scheduler={"name": "static", "max_num_seqs": 4},
                      workload={"rate": 1000.0, "num_requests": 8, "prompt": {"kind": "fixed", "value": 50},
                                "output": {"kind": "uniform", "min": 2, "max": 40}})
    res = simulate(cfg)
    req = res.requests
    starts = sorted(set(req.first_scheduled_s))
    assert len(starts) >= 2
    for t in starts[1:]:
        earlier = req[req.first_scheduled_s < t]
        # a batch is formed only after every member of the earlier batches has finished
        assert (earlier.finish_s <= t + 1e-12).all()
    assert req.groupby("first_scheduled_s").size().max() <= 4


def test_round_robin_spreads_requests():
    res = simulate(tiny_config(cluster={"replicas": 3}))
    counts = res.requests.replica.value_counts().to_dict()
    assert set(counts) == {0, 1, 2} and max(counts.values()) - min(counts.values()) <= 1


def test_same_seed_identical_summary_except_wall():
    a = simulate(tiny_config(seed=7)).summary
    b = simulate(tiny_config(seed=7)).summary
    c = simulate(tiny_config(seed=8)).summary
    for s in (a, b, c):
        s["sim"].pop("wall_s")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)


configs = st.fixed_dictionaries({
    "scheduler": st.sampled_from(["vllm", "static"]),
    "blocks": st.integers(40, 400),
    "block_size": st.sampled_from([4, 16, 32]),
    "replicas": st.integers(1, 3),
    "rate": st.floats(0.5, 200.0),
    "n": st.integers(1, 40),
    "pmax": st.integers(1, 600),
    "omax": st.integers(1, 80),
    "max_seqs": st.integers(1, 16),
    "budget": st.integers(64, 2048),
    "seed": st.integers(0, 10_000),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_invariants_on_random_small_configs(p):
    cfg = load_config(tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]},
        scheduler={"name": p["scheduler"], "max_num_seqs": p["max_seqs"], "max_num_batched_tokens": p["budget"]},
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"])))
    eng = Engine(cfg)
    out = eng.run()
    assert len(out.requests) == p["n"]
    assert_run_invariants(eng, out)
    steps_used = np.frombuffer(out.steps.kv_blocks_used, np.int32) if len(out.steps.kv_blocks_used) else []
    assert all(u <= p["blocks"] for u in steps_used)
    for rep in eng.replicas:
        assert rep.kv.num_free == p["blocks"] and not rep.kv.held
    tokens = np.frombuffer(out.steps.num_tokens, np.int32) if len(out.steps.num_tokens) else np.zeros(0)
    req = requests_frame(out)
    assert tokens.sum() >= req.loc[req["status"] == "finished", "prompt_tokens"].sum()


def test_goodput_per_slo_class_uses_each_class_limits():
    cfg = tiny_config(
        workload={"num_requests": 200, "rate": 20.0, "tenants": [
            {"name": "chat", "rate": 10.0, "slo_class": "tight"}, {"name": "batch", "rate": 10.0, "slo_class": "loose"}]},
        slo={"classes": {"tight": {"ttft_s": 0.012, "tpot_s": 0.2}, "loose": {"ttft_s": 60.0, "tpot_s": 1.0}}})
    g = simulate(cfg).summary["goodput"]
    tight, loose = g["by_class"]["tight"], g["by_class"]["loose"]
    assert loose["slo_attainment"] == 1.0 and tight["slo_attainment"] < 1.0
    assert tight["arrived"] + loose["arrived"] == 200
    met = tight["slo_attainment"] * tight["arrived"] + loose["slo_attainment"] * loose["arrived"]
    assert g["slo_attainment"] == pytest.approx(met / 200)
    assert set(g["by_tenant"]) == {"chat", "batch"}


def test_only_the_engine_imports_simpy():
    """The engine owns simulated time (docs/architecture.md section 2): the objects it drives (faults and
    autoscaling, closed-loop clients) wait on its environment without importing simpy."""
    import re
    from pathlib import Path

    import sim

    root = Path(sim.__file__).parent
    importers = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                       if re.search(r"^\s*(import simpy|from simpy\b)", p.read_text(), re.M))
    assert importers == ["engine.py"]


def test_with_output_limit_is_replace():
    """The engine's fast copy of a spec matches dataclasses.replace on every field (a field added
    to RequestSpec without updating with_output_limit fails here)."""
    import dataclasses

    from sim.types import RequestSpec
    vals = {f.name: i + 1 for i, f in enumerate(dataclasses.fields(RequestSpec))}
    vals.update(block_hashes=(1, 2), session_id="s", slo_class="c", tenant="t", arrival_s=0.5)
    spec = RequestSpec(**vals)
    assert spec.with_output_limit(77) == dataclasses.replace(spec, max_output_tokens=77)


def test_output_limits_set_by_the_workload_or_by_the_engine_give_the_same_run(monkeypatch):
    """A synthetic workload hands out specs that carry their output limit (the context minus the
    prompt, within the output distribution's bound: none here, a lognormal without max); the
    engine sets the same limit on a spec without one. An Orca policy reserving the limit, on a
    model with a short context (4,096 tokens), makes the limit matter: the rows are the same
    either way."""
    import sim.workload as workload

    wl = {**uniform_workload(40.0, 120, 4000, 300), "output": {"kind": "lognormal", "median": 300, "sigma": 1.0}}
    cfg = tiny_config(model="llama-2-7b", cluster={"replicas": 2}, kv={"num_gpu_blocks": 600},
                      scheduler={"name": "orca", "reserve": "max_output_tokens"}, workload=wl)
    with_limits = requests_frame(Engine(load_config(cfg)).run())
    plain = workload.synthetic_requests
    monkeypatch.setattr(workload, "synthetic_requests", lambda cfg, rng, info, max_context=None, **kw: plain(cfg, rng, info, **kw))
    eng = Engine(load_config(cfg))
    assert next(iter(eng.workload)).max_output_tokens is None  # the engine sets them now
    without = requests_frame(eng.run())
    assert without.equals(with_limits)
    assert (with_limits.status == "finished").sum() > 50 and (with_limits.status == "rejected").sum() > 0
