"""Regression tests for the repros of issue 10 (no crash, no silent loss, no confusing answer):
exact outcomes of the livelock, the all-rejected run, silent clipping and scheduler fidelity."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import tiny_config
from policy_kit import make, req, step
from sim import simulate
from sim.catalog import get_model
from sim.cli import main
from sim.commands.table import print_summary
from sim.config import load_config
from sim.cost.memory import activation_peak
from sim.engine import Engine
from sim.errors import ServesimWarning
from sim.kv import KVManager
from sim.scheduler.sarathi import SarathiScheduler

QUIET = ["output.plots=false", "output.progress=false"]


def two_row_trace(tmp_path, prompt: int = 6300):
    """The issue's trace: a short request, then a long one a millisecond later."""
    p = tmp_path / "t.csv"
    p.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,16,40\n0.001,{prompt},60\n")
    return p


def run_trace(path, *sets):
    return simulate(None, overrides=[f"workload.trace.path={path}", "kv.num_gpu_blocks=400", *QUIET, *sets])


# ---- 1. livelock: a request that can never come back is aborted with a counted reason --------

def test_recompute_preempted_request_that_no_longer_fits_is_aborted_not_a_crash(tmp_path):
    # 400 blocks of 16 tokens, 4 kept free at admission. vllm (v0) admits both; the long one is
    # preempted by recompute when the pool runs out, and prompt + 37 generated tokens (6,337
    # tokens, 397 blocks) can never again be admitted under the watermark: vLLM v0 ignores it.
    res = run_trace(two_row_trace(tmp_path), "scheduler.name=vllm")
    short, long_ = res.requests.iloc[0], res.requests.iloc[1]
    assert (short.status, short.generated_tokens) == ("finished", 40)
    assert (long_.status, long_.generated_tokens, long_.preemptions) == ("rejected", 37, 1)
    assert long_.reject_reason == ("aborted: resuming needs 397 KV blocks at once for 6337 tokens; "
                                   "admission keeps 4 of the replica's 400 free (watermark)")
    r = res.summary["requests"]
    assert (r["arrived"], r["completed"], r["rejected"], r["unfinished"]) == (2, 1, 1, 0)
    assert r["rejected_by_reason"] == {"aborted": 1}


@pytest.mark.parametrize("name", ["vllm_v1", "sarathi", "static", "priority", "sjf", "srpt", "lookahead"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_the_livelock_trace_ends_for_every_scheduler(tmp_path, name, preemption):
    res = run_trace(two_row_trace(tmp_path), f"scheduler.name={name}", f"kv.preemption={preemption}")
    r = res.summary["requests"]
    assert r["completed"] + r["rejected"] == 2 and r["unfinished"] == 0
    if name in ("vllm_v1", "priority", "sjf", "srpt", "lookahead"):  # chunked: the long one resumes by chunks
        assert r["completed"] == 2


def test_vllm_v1_resumes_the_preempted_request_chunk_by_chunk(tmp_path):
    res = run_trace(two_row_trace(tmp_path), "scheduler.name=vllm_v1")
    assert list(res.requests.status) == ["finished", "finished"]
    assert list(res.requests.preemptions) == [0, 1]


def test_handed_off_request_that_cannot_fit_a_decode_replica_is_aborted(tmp_path):
    # prompt 6,336 tokens = 396 blocks: admitted by the prefill replica (396 <= 400 - 4); on the
    # decode replica it needs prompt + 1 token = 397 blocks at once, more than the watermark allows
    res = run_trace(two_row_trace(tmp_path, prompt=6336), "cluster.replicas=2", "cluster.prefill_replicas=1",
                    "scheduler.name=vllm_v1")
    long_ = res.requests.iloc[1]
    assert (long_.status, long_.generated_tokens, long_.first_token_s > 0) == ("rejected", 1, True)
    assert long_.reject_reason.startswith("aborted: resuming needs 397 KV blocks at once for 6337 tokens")
    assert res.summary["requests"]["completed"] == 1


def test_no_progress_guard_drops_the_stuck_head_with_a_reason():
    """A policy that plans nothing although a request waits on an idle replica: the request is
    aborted with a reason instead of the engine raising."""
    s = make("vllm", 10, 4)
    r = req(0, 30, 5)  # 8 blocks for its prompt: fits
    s.add(r)
    r.num_generated = 8  # as after a recompute preemption: 38 tokens = 10 blocks
    s.kv.watermark_blocks = 1  # 10 > 10 - 1: it can never be admitted again
    assert s.schedule(0.0).empty
    (dropped, reason), = s.drop_stuck()
    assert dropped is r and not s.has_work()
    assert reason == ("aborted: resuming needs 10 KV blocks at once for 38 tokens; admission keeps 1 of the "
                      "replica's 10 free (watermark)")


# ---- 2. an all-rejected run: well-formed summary and table; rejections by reason ------------

ALL_REJECTED = ["model=llama-2-7b", "workload.prompt.kind=fixed", "workload.prompt.value=5000",
                "workload.num_requests=50", *QUIET]


def test_all_rejected_run_gives_a_well_formed_summary_and_table(capsys):
    res = simulate(None, overrides=ALL_REJECTED)
    s = res.summary
    assert s["requests"] == {"arrived": 50, "completed": 0, "rejected": 50, "unfinished": 0, "preemptions": 0,
                             "rejected_by_reason": {"exceeds_context": 50}}
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"):
        assert set(s[key].values()) == {None}
    assert s["throughput"]["output_tokens_per_s"] == 0 and s["cost"]["usd_per_million_output_tokens"] is None
    print_summary(s, res.config)
    out = capsys.readouterr().out
    assert "50 rejected (exceeds_context 50)" in out and "no output tokens" in out


def test_cli_all_rejected_run_exits_cleanly(tmp_path, capsys):
    rc = main(["run", "--model", "llama-2-7b", "--set", "workload.prompt.kind=fixed", "--set",
               "workload.prompt.value=5000", "--num-requests", "50", "--no-plots", "--out", str(tmp_path / "r")])
    assert rc == 3  # nothing served: the results are written, and the exit status says so
    cap = capsys.readouterr()
    assert "exceeds_context 50" in cap.out
    assert "every request was rejected" in cap.err and "workload.clip_to_context=true" in cap.err
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["requests"]["rejected_by_reason"] == {
        "exceeds_context": 50}


def test_rejections_by_reason_are_printed_on_every_run(capsys):
    cfg = tiny_config(scheduler={"name": "vllm", "max_num_batched_tokens": 200})
    res = simulate(cfg)
    reasons = res.summary["requests"]["rejected_by_reason"]
    assert reasons == {"exceeds_token_budget": int((res.requests.prompt_tokens > 200).sum())} and reasons[
        "exceeds_token_budget"] > 0
    print_summary(res.summary, res.config)
    assert f"rejected (exceeds_token_budget {reasons['exceeds_token_budget']})" in capsys.readouterr().out


# ---- 3. clipping is counted, reported and warned about ----------------------------------------

def test_a_fixed_prompt_above_the_inherited_max_is_counted_as_clipped(capsys):
    with pytest.warns(ServesimWarning, match=r"20 of 20 request\(s\) had their prompt length clipped to workload.prompt's "
                                             r"bounds \[1, 8192\]; its fixed value 200000 lies outside them"):
        res = simulate(None, overrides=["workload.prompt.kind=fixed", "workload.prompt.value=200000",
                                        "workload.num_requests=20", *QUIET])
    assert res.summary["workload"]["clipped"] == {"prompt": 20, "output": 0}
    assert (res.requests.prompt_tokens == 8192).all()
    # one clipping warning; 20 prompts of 8,192 tokens at 12 req/s also overload one H100 (its verdict warns)
    assert [w.split(";")[0] for w in res.summary["warnings"] if not w.startswith("verdict: overloaded")] == [
        "20 of 20 request(s) had their prompt length clipped to workload.prompt's bounds [1, 8192]"]
    assert res.summary["verdict"]["state"] == "overloaded"
    print_summary(res.summary, res.config)
    assert "clipped to their length distributions' bounds: 20 prompts, 0 outputs" in capsys.readouterr().out


def test_clipped_lengths_are_counted_per_request_exactly():
    with pytest.warns(ServesimWarning, match=r"30 of 30 request\(s\) had their output length clipped"):
        res = simulate(tiny_config(workload={"num_requests": 30, "prompt": {"kind": "uniform", "min": 10, "max": 100},
                                             "output": {"kind": "fixed", "value": 3, "min": 5}}))
    assert res.summary["workload"]["clipped"] == {"prompt": 0, "output": 30}
    assert (res.requests.output_tokens == 5).all()


def test_clip_to_context_is_counted_separately():
    ctx = get_model("llama-2-7b").max_context
    cfg = tiny_config(model="llama-2-7b", workload={"num_requests": 4, "clip_to_context": True,
                                                    "prompt": {"kind": "fixed", "value": ctx + 10, "max": ctx + 10},
                                                    "output": {"kind": "fixed", "value": 7}})
    with pytest.warns(ServesimWarning, match="clipped to llama-2-7b's context"):
        res = simulate(cfg)
    wl = res.summary["workload"]
    assert wl["clipped"] == {"prompt": 0, "output": 0}
    assert wl["clipped_to_context"] == {"prompt": 4, "output": 0}  # the output kept, the prompt shortened
    assert (res.requests.output_tokens == 7).all() and (res.requests.prompt_tokens == ctx - 7).all()
    huge = tiny_config(model="llama-2-7b", workload={"num_requests": 2, "clip_to_context": True,
                                                     "prompt": {"kind": "fixed", "value": 10},
                                                     "output": {"kind": "fixed", "value": ctx + 5, "max": ctx + 5}})
    with pytest.warns(ServesimWarning, match="clipped to llama-2-7b's context"):
        r = simulate(huge).requests
    assert (r.prompt_tokens == 1).all() and (r.output_tokens == ctx - 1).all()  # only an output past the context is cut


def test_lognormal_truncation_is_counted_but_warns_only_past_one_percent(recwarn):
    wl = {"num_requests": 200, "rate": 50.0, "prompt": {"kind": "uniform", "min": 10, "max": 50}}
    few = simulate(tiny_config(workload={**wl, "output": {"kind": "lognormal", "median": 20, "sigma": 1.0, "max": 260}}))
    n = few.summary["workload"]["clipped"]["output"]
    assert 0 < n <= 2 and n == int((few.requests.output_tokens == 260).sum()) and few.summary["warnings"] == []
    many = simulate(tiny_config(workload={**wl, "output": {"kind": "lognormal", "median": 20, "sigma": 1.0, "max": 30}}))
    n = many.summary["workload"]["clipped"]["output"]
    assert n > 2 and many.summary["warnings"] == [
        f"{n} of 200 request(s) had their output length clipped to workload.output's bounds [1, 30]"]


def test_an_unclipped_run_has_no_warning():
    res = simulate(tiny_config())
    assert res.summary["workload"]["clipped"] == {"prompt": 0, "output": 0} and res.summary["warnings"] == []


# ---- 7. scheduler fidelity -----------------------------------------------------------------------

def test_default_scheduler_is_vllm_v1():
    assert load_config(None).scheduler.name == "vllm_v1"


def test_sarathi_reserves_the_whole_prompt_on_admission():
    """Sarathi-Serve (vLLM v0's block manager): the first chunk allocates blocks for the whole
    prompt, so later chunks never ask for memory."""
    s = make("sarathi", 20, 4, chunk_size=8)
    a = req(0, 30, 2)
    s.add(a)
    step(s)
    assert a.num_computed == 8 and s.kv.held[0] == 8  # 30 tokens = 8 blocks, all taken now
    step(s)
    assert a.num_computed == 16 and s.kv.held[0] == 8  # the second chunk takes none


class PerChunkSarathi(SarathiScheduler):
    """The old behaviour, for comparison: KV for each chunk only as it is scheduled."""

    def reserve(self, r, total_tokens):
        return total_tokens


def preemptions(cls, seed: int) -> tuple[int, int]:
    """(preemptions, of which of half-prefilled requests) for 12 requests on a 24-block pool."""
    rng = np.random.default_rng(seed)
    s = cls(cls.Knobs(chunk_size=8), KVManager(24, 4, 0.0))
    for i in range(12):
        s.add(req(i, int(rng.integers(4, 40)), int(rng.integers(1, 30))))
    total = half = 0
    while s.has_work():
        progress = {r.id: 0 < r.num_computed < r.prompt_tokens for r in s.running}
        plan = step(s)
        total += len(plan.preempted)
        half += sum(progress.get(i, False) for i in plan.preempted)
    return total, half


def test_whole_prompt_reservation_spares_half_prefilled_requests():
    """Decode growth preempted half-prefilled requests when KV was taken chunk by chunk (issue
    10: 865 preemptions against 16); with the whole prompt reserved on admission it rarely does."""
    assert preemptions(SarathiScheduler, 0) == (4, 2)
    assert preemptions(PerChunkSarathi, 0) == (12, 10)
    for seed in range(1, 6):
        (whole, whole_half), (chunk, chunk_half) = preemptions(SarathiScheduler, seed), preemptions(PerChunkSarathi, seed)
        assert whole < chunk and whole_half < chunk_half


def test_sarathi_activation_reserve_is_sized_from_the_chunk():
    cfg = load_config(tiny_config(scheduler={"name": "sarathi", "chunk_size": 512, "max_num_batched_tokens": 8192}))
    eng = Engine(cfg)
    m = get_model(cfg.model)
    assert eng.mem.activation_bytes == activation_peak(m, 1, "bf16", 512, 256)
    v1 = Engine(load_config(tiny_config(scheduler={"name": "vllm_v1"})))
    assert v1.mem.activation_bytes == activation_peak(m, 1, "bf16", 8192, 256)
    assert eng.mem.num_gpu_blocks > v1.mem.num_gpu_blocks


@pytest.mark.parametrize("name,warns", [("vllm", True), ("static", True), ("vllm_v1", False), ("sarathi", False)])
def test_prefix_caching_with_a_scheduler_that_ignores_hits_warns(name, warns, recwarn):
    # (system prompts: a workload without shared prefixes would warn that its hit rate is 0 as well)
    res = simulate(tiny_config(scheduler={"name": name}, kv={"prefix_caching": True},
                               workload={"system_prompts": {"count": 2, "tokens": 64}}))
    msgs = [str(w.message) for w in recwarn.list if issubclass(w.category, ServesimWarning)]
    assert bool(msgs) == warns and bool(res.summary["warnings"]) == warns
    if warns:
        assert msgs == [f"kv.prefix_caching is on but scheduler '{name}' never uses prefix-cache hits (blocks are "
                        "cached, no prefill is skipped); schedulers that use them: lookahead, orca, priority, "
                        "sarathi, sjf, srpt, trtllm, vllm_v1"]
