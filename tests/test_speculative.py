"""Speculative decoding (``sim/speculative.py``): exact token counts and timings on tiny cases,
tokens conserved on random configs, the acceptance draws' mean, the published shape (large gains
at low batch, none or negative at high batch with a draft model), the draft's memory, and one
clear error per bad input."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from sim import simulate
from sim.cli import main
from sim.config import load_config
from sim.engine import Engine

EAGLE = {"method": "eagle", "num_speculative_tokens": 3, "acceptance": 0.7}


def one_request(tmp_path, output: int, spec: dict):
    path = tmp_path / "one.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,100,{output}\n")
    return simulate(tiny_config(workload={"trace": {"path": str(path)}}, speculative=spec))


def test_all_drafts_accepted_emit_k_plus_one_tokens_a_step(tmp_path):
    """Output 9, k 3, acceptance 1: the prefill gives token 1, then two verifications give 4
    each, the second's tokens arriving together (ITL gaps of 0 after its first)."""
    res = one_request(tmp_path, 9, {"method": "eagle", "num_speculative_tokens": 3, "acceptance": 1.0})
    r = res.requests.iloc[0]
    steps = res.steps
    assert r["generated_tokens"] == 9 and len(steps) == 3
    assert r["finish_s"] == pytest.approx(steps["start_s"].iloc[-1] + steps["duration_s"].iloc[-1], abs=0)
    assert list(steps["num_tokens"]) == [100, 4, 4]  # the verification: the decode token and 3 drafts
    gaps = sorted(res.itl_s.tolist())
    assert gaps[:6] == [0.0] * 6 and len(gaps) == 8
    s = res.summary["speculative"]
    assert s["verifications"] == 2 and s["accepted_draft_tokens"] == 6 and s["mean_acceptance_length"] == 4.0


def test_drafts_never_accepted_cost_a_step_per_token_and_more_time(tmp_path):
    off = one_request(tmp_path, 20, {})
    on = one_request(tmp_path, 20, {"method": "eagle", "num_speculative_tokens": 3, "acceptance": 0.0})
    assert len(on.steps) == len(off.steps) == 20
    assert on.summary["tpot_s"]["p50"] > off.summary["tpot_s"]["p50"]
    assert on.summary["speculative"]["mean_acceptance_length"] == 1.0


def test_the_last_tokens_are_capped_by_the_output():
    """Output 6 with acceptance 1 and k 4: 1 token, then 5 (not 5 + overshoot)."""
    res = simulate(tiny_config(workload={"rate": 1.0, "num_requests": 5, "prompt": {"kind": "fixed", "value": 50},
                                         "output": {"kind": "fixed", "value": 6}},
                               speculative={"method": "ngram", "num_speculative_tokens": 4, "acceptance": 1.0}))
    assert (res.requests["generated_tokens"] == 6).all()
    assert res.summary["speculative"]["verifications"] == 5


def test_the_mean_acceptance_length_is_the_model_s():
    """Per-position rates p: E[accepted + 1] = 1 + p1 + p1 p2 + p1 p2 p3."""
    res = simulate(tiny_config(workload={"rate": 4.0, "num_requests": 300}, speculative={
        "method": "eagle3", "num_speculative_tokens": 3, "acceptance": [0.8, 0.6, 0.5]}))
    want = 1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.5
    assert res.summary["speculative"]["mean_acceptance_length"] == pytest.approx(want, rel=0.03)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["eagle", "mtp", "ngram", "draft_model"]), k=st.integers(1, 6),
       p=st.floats(0.0, 1.0), blocks=st.integers(60, 800), rate=st.floats(1.0, 200.0), seed=st.integers(0, 50),
       scheduler=st.sampled_from(["vllm_v1", "sarathi", "priority", "srpt", "trtllm"]))
def test_every_request_emits_exactly_its_tokens_and_no_block_leaks(method, k, p, blocks, rate, seed, scheduler):
    sp = {"method": method, "num_speculative_tokens": k, "acceptance": p}
    model = "llama-3.1-8b"
    if method == "draft_model":
        model, sp["draft_model"] = "llama-3.1-70b", "llama-3.1-8b"
    cfg = load_config(tiny_config(model=model, parallelism={"tp": 4 if model.endswith("70b") else 1}, seed=seed,
                                  scheduler={"name": scheduler}, kv={"num_gpu_blocks": blocks},
                                  workload={"rate": rate, "num_requests": 30,
                                            "prompt": {"kind": "uniform", "min": 16, "max": 300},
                                            "output": {"kind": "uniform", "min": 1, "max": 80}},
                                  speculative=sp))
    eng = Engine(cfg)
    out = eng.run()
    from sim.metrics.records import requests_frame

    req = requests_frame(out)
    done = req[req.status == "finished"]
    assert len(req) == 30 and set(req.status) <= {"finished", "rejected"}
    assert (done.generated_tokens == done.output_tokens).all()
    assert all(rep.kv.num_used == 0 and not rep.scheduler.has_work() for rep in eng.replicas)


def test_gains_shrink_with_the_batch_and_turn_negative_for_a_draft_model():
    """The published shape (EAGLE-3 paper: 1.38x throughput at batch 64 in SGLang, where batch 1
    gains most): verification of k + 1 tokens a sequence is cheap while decode is memory-bound,
    and costs more than it saves once the batch makes it compute-bound."""
    def tpot(clients, spec):
        return simulate(tiny_config(model="llama-3.1-70b", parallelism={"tp": 4}, workload={
            "closed_loop": {"clients": clients}, "num_requests": max(120, 3 * clients),
            "prompt": {"kind": "fixed", "value": 1000}, "output": {"kind": "fixed", "value": 200}},
            speculative=spec)).summary["tpot_s"]["p50"]

    draft = {"method": "draft_model", "draft_model": "llama-3.1-8b", "num_speculative_tokens": 3, "acceptance": 0.7}
    low = tpot(1, {}) / tpot(1, draft)
    high = tpot(256, {}) / tpot(256, draft)
    assert low > 1.3 and high < 1.0


def test_a_draft_takes_memory_from_the_kv_cache():
    plain = Engine(load_config(tiny_config(model="llama-3.1-70b", parallelism={"tp": 4})))
    drafted = Engine(load_config(tiny_config(model="llama-3.1-70b", parallelism={"tp": 4}, speculative={
        "method": "draft_model", "draft_model": "llama-3.1-8b", "acceptance": 0.7})))
    eagle = Engine(load_config(tiny_config(model="llama-3.1-70b", parallelism={"tp": 4}, speculative=EAGLE)))
    assert drafted.mem.num_gpu_blocks < eagle.mem.num_gpu_blocks < plain.mem.num_gpu_blocks


@pytest.mark.parametrize("sets, words", [
    (["speculative.method=eagle", "speculative.acceptance=0.7", "speculative.num_speculative_tokens=0"],
     "speculative.num_speculative_tokens"),
    (["speculative.method=eagle", "speculative.acceptance=1.5"], "speculative.acceptance"),
    (["speculative.method=eagle", "speculative.acceptance=[0.9,0.8,0.7,0.6]", "speculative.num_speculative_tokens=3"],
     "4 rates for 3 draft tokens"),
    (["speculative.method=eagle"], "give the acceptance rate"),
    (["model=llama-3.1-70b", "parallelism.tp=4", "speculative.method=draft_model", "speculative.acceptance=0.7",
      "speculative.draft_model=qwen2.5-7b"], "vocabulary"),
    (["speculative.method=draft_model", "speculative.acceptance=0.7", "speculative.draft_model=llama-3.1-70b"],
     "is not smaller"),
    (["speculative.method=draft_model", "speculative.acceptance=0.7"], "needs the draft's card"),
    (["speculative.method=eagle", "speculative.acceptance=0.7", "scheduler.name=static"], "token-budget schedulers"),
])
def test_bad_speculation_is_one_clear_line(capsys, sets, words):
    argv = ["run", "--num-requests", "3", "--no-plots", "--quiet"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_summary_json_has_the_speculative_block(tmp_path):
    assert main(["run", "--num-requests", "50", "--no-plots", "--quiet", "--out", str(tmp_path), "--set",
                 "speculative.method=mtp", "--model", "deepseek-v3", "--hardware", "h200-sxm", "--tp", "8",
                 "--dtype", "fp8", "--set", "cost.model=roofline"]) == 0
    s = json.loads((tmp_path / "summary.json").read_text())["speculative"]
    assert s["method"] == "mtp" and s["acceptance_rates"] == [0.85, 0.85, 0.85]


def test_results_are_the_same_with_fast_paths_on_and_off():
    from test_fast_forward import assert_identical, both

    cfg = tiny_config(cluster={"replicas": 2}, workload={"rate": 30.0, "num_requests": 80},
                      output={"step_records": False, "plots": False, "progress": False}, speculative=EAGLE)
    assert_identical(*both(cfg))
