"""The serving front end (``frontend``: API overhead, tokenisation, detokenisation) and the
constant arrival process: exact outcomes on tiny cases, invariants on random ones."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from sim import simulate
from sim.cluster.frontend import Frontend
from sim.config import Frontend as FrontendConfig
from sim.config import load_config
from sim.errors import ConfigError
from sim.types import RequestSpec
from sim.workload.arrivals import arrival_times

FE = {"api_overhead_s": 0.004, "tokenize_s_per_token": 2e-5, "detokenize_s_per_token": 3e-4}


def one_request(frontend=None, **kw):
    """One request of a 200-token prompt and 3 output tokens, sent at t = 0."""
    cfg = tiny_config(workload={"num_requests": 1, "prompt": {"kind": "fixed", "value": 200},
                                "output": {"kind": "fixed", "value": 3}}, **kw)
    if frontend is not None:
        cfg["frontend"] = frontend
    return simulate(cfg)


def test_one_request_ttft_is_api_plus_tokenisation_plus_prefill_step_plus_detokenisation():
    res = one_request(FE)
    r, steps = res.requests.iloc[0], res.steps
    engine_at = 0.004 + 2e-5 * 200  # nothing before it: no queue at the front end
    assert r.arrival_s == 0.0 and r.engine_arrival_s == pytest.approx(engine_at, abs=1e-15)
    prefill = steps.duration_s.iloc[0]  # the first step computes the whole prompt, and emits the first token
    assert steps.prefill_tokens.iloc[0] == 200
    assert r.first_token_s == pytest.approx(engine_at + prefill, abs=1e-15)  # engine-side
    assert r.ttft_s == pytest.approx(engine_at + prefill + 3e-4, abs=1e-15)  # what the client sees
    assert r.e2e_s == pytest.approx(r.finish_s + 3e-4, abs=1e-15)
    # the engine's part is the run without a front end, shifted by its receipt: the same steps
    plain = one_request()
    assert plain.requests.ttft_s.iloc[0] == pytest.approx(prefill, abs=1e-15)
    assert np.allclose(plain.steps.duration_s, steps.duration_s, rtol=0, atol=0)
    # TPOT and the gaps between tokens are the engine's: the front end delays every token alike
    assert r.tpot_s == pytest.approx(plain.requests.tpot_s.iloc[0], rel=1e-12)
    assert res.summary["itl_s"]["mean"] == pytest.approx(plain.summary["itl_s"]["mean"], rel=1e-12)
    fe = res.summary["frontend"]
    assert fe["wait_s"]["max"] == pytest.approx(engine_at, abs=1e-15)
    assert fe["engine_ttft_s"]["max"] == pytest.approx(prefill, abs=1e-15)
    assert "frontend" not in plain.summary


def test_the_front_end_is_one_fifo_process():
    fe = Frontend(FrontendConfig(api_overhead_s=0.01, tokenize_s_per_token=1e-4))
    specs = [RequestSpec(0, 0.0, 100, 5), RequestSpec(1, 0.005, 50, 5), RequestSpec(2, 1.0, 10, 5)]
    out = list(fe.requests(specs))
    # 0: 0.01 later the tokeniser is free: + 100 x 1e-4; 1: ready at 0.015, waits for 0's tokens
    # (0.02), + 50 x 1e-4; 2: finds it free (1.01) + 10 x 1e-4
    assert [s.arrival_s for s in out] == pytest.approx([0.02, 0.025, 1.011], abs=1e-15)
    assert [s.sent_s for s in out] == [0.0, 0.005, 1.0]
    assert [s.id for s in out] == [0, 1, 2]
    assert list(fe.requests(specs)) == out  # each pass starts with an idle front end


def test_all_zero_front_end_is_the_run_without_one():
    a = simulate(tiny_config())
    b = simulate(tiny_config(frontend={"api_overhead_s": 0, "tokenize_s_per_token": 0, "detokenize_s_per_token": 0}))
    assert list(a.requests.columns) == list(b.requests.columns) and "engine_arrival_s" not in b.requests
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    sa, sb = dict(a.summary), dict(b.summary)
    sa["sim"], sb["sim"] = {**sa["sim"], "wall_s": 0}, {**sb["sim"], "wall_s": 0}
    assert sa == sb


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api=st.floats(0, 0.05), tok=st.floats(0, 1e-4), detok=st.floats(0, 2e-3), rate=st.floats(1, 60),
       sched=st.sampled_from(["vllm_v1", "sarathi", "vllm"]), seed=st.integers(0, 50))
def test_client_times_never_below_the_engines(api, tok, detok, rate, sched, seed):
    fe = {"api_overhead_s": api, "tokenize_s_per_token": tok, "detokenize_s_per_token": detok}
    res = simulate(tiny_config(frontend=fe, workload={"rate": rate}, scheduler={"name": sched}, seed=seed))
    req = res.requests
    if not (api or tok or detok):
        assert "engine_arrival_s" not in req
        return
    done = req[req.status == "finished"]
    eps = 1e-9
    engine_ttft = done.first_token_s - done.engine_arrival_s
    assert (done.ttft_s >= engine_ttft - eps).all()  # TTFT never below the engine-side first-token time
    assert (done.ttft_s >= engine_ttft + api + tok * done.prompt_tokens + detok - eps).all()
    assert (req.engine_arrival_s >= req.arrival_s + api + tok * req.prompt_tokens - eps).all()
    ea = req.sort_values("request_id").engine_arrival_s.to_numpy()
    assert (np.diff(ea) >= -eps).all()  # FIFO: the engine receives requests in the order they were sent
    assert np.allclose(done.e2e_s - done.ttft_s, done.finish_s - done.first_token_s, rtol=0, atol=1e-9)


def test_closed_loop_client_sends_next_when_it_sees_the_last_token():
    cfg = tiny_config(workload={"closed_loop": {"clients": 1, "think_time_s": 0.0}, "num_requests": 6}, frontend=FE)
    req = simulate(cfg).requests.sort_values("request_id")
    sent, seen_last = req.arrival_s.to_numpy(), (req.finish_s + 3e-4).to_numpy()
    assert sent[1:] == pytest.approx(seen_last[:-1], abs=1e-12)
    assert (req.engine_arrival_s - req.arrival_s).to_numpy() == pytest.approx(0.004 + 2e-5 * req.prompt_tokens.to_numpy(), abs=1e-12)


def test_streamed_rows_carry_the_front_end_columns(tmp_path):
    cfg = tiny_config(frontend=FE)
    plain = simulate(cfg)
    streamed = simulate({**cfg, "output": {**cfg["output"], "stream": True, "step_records": False}}, out=tmp_path)
    a, b = plain.requests, streamed.requests
    assert list(a.columns) == list(b.columns) and "engine_arrival_s" in b
    assert np.allclose(a.sort_values("request_id").ttft_s, b.sort_values("request_id").ttft_s, rtol=0, atol=0, equal_nan=True)
    assert plain.summary["ttft_s"] == streamed.summary["ttft_s"]


def test_front_end_times_must_be_non_negative():
    with pytest.raises(ConfigError, match="frontend.api_overhead_s"):
        load_config(tiny_config(frontend={"api_overhead_s": -0.1}))


# ---------------------------------------------------------------- arrival processes
def test_constant_arrivals_are_evenly_spaced():
    cfg = tiny_config(workload={"arrival": "constant", "rate": 4.0, "num_requests": 9})
    arrivals = simulate(cfg).requests.sort_values("request_id").arrival_s.to_numpy()
    assert arrivals == pytest.approx(np.arange(9) * 0.25, abs=1e-12)
    w = load_config(tiny_config(workload={"arrival": "constant", "rate": 2.0})).workload
    it = arrival_times(w, np.random.default_rng(0))
    assert [next(it) for _ in range(3)] == pytest.approx([0.5, 1.0, 1.5])


def test_constant_arrivals_need_no_randomness():
    """The seed changes the lengths but not the times."""
    def times(seed):
        cfg = tiny_config(workload={"arrival": "constant", "rate": 3.0}, seed=seed)
        return simulate(cfg).requests.sort_values("request_id").arrival_s.to_numpy()
    assert np.array_equal(times(0), times(7))


def test_trace_arrivals_constant_keeps_the_mean_rate(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,20,5\n0.5,30,5\n3,40,5\n4,50,5\n")
    cfg = tiny_config(workload={"trace": {"path": str(path), "arrivals": "constant"}})
    req = simulate(cfg).requests.sort_values("request_id")
    assert req.arrival_s.to_numpy() == pytest.approx([0, 0.8, 1.6, 2.4, 3.2], abs=1e-12)  # span 4 s / 5 requests
    assert req.prompt_tokens.tolist() == [10, 20, 30, 40, 50]


def test_front_end_runs_the_same_over_several_processes():
    cfg = tiny_config(frontend=FE, cluster={"replicas": 2}, workload={"rate": 20, "num_requests": 200})
    one, two = simulate(cfg), simulate({**cfg, "engine": {"workers": 2}})
    a = one.requests.sort_values("request_id").reset_index(drop=True)
    b = two.requests.sort_values("request_id").reset_index(drop=True)
    assert "engine_arrival_s" in b and a.equals(b)
    assert one.summary["frontend"] == two.summary["frontend"] and one.summary["ttft_s"] == two.summary["ttft_s"]
