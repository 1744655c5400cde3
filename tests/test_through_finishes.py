"""Decode runs that go on past finishes (``fastforward.decode_run``'s ``through_finishes``): the
lifecycle rule against single steps, the blocks in use with frees, and whole runs against runs
that stop at each finish."""
from itertools import accumulate
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config, uniform_workload
from sim import engine, lifecycle, simulate
from sim import fastforward
from sim.fastforward import DecodeRun
from sim.metrics.steplog import ItlLog
from sim.request import Request, Status
from sim.scheduler import REGISTRY
from sim.types import RequestSpec
from test_fast_forward import assert_identical


def _decoding(i, prompt, generated, output, last, max_itl):
    """A running request mid-decode: its last token at ``last``, the next one's KV not computed."""
    r = Request(RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=output))
    r.status, r.num_generated, r.num_computed = Status.RUNNING, generated, prompt + generated - 1
    r.first_token_s, r.last_token_s, r.max_itl_s = 0.0, last, max_itl
    return r


def _state(r):
    return (r.num_computed, r.num_generated, r.last_token_s, r.max_itl_s, r.status, r.finish_s)


batches = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5), st.integers(1, 12), st.booleans(),
                             st.floats(0.0, 0.2)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(batches, st.lists(st.floats(0.001, 0.05), min_size=12, max_size=12), st.data())
def test_complete_run_past_finishes_is_single_steps(batch, prices, data):
    """``complete_run`` over a run whose requests finish at different steps gives every request,
    the ITL log and the finish order exactly what ``complete_step`` gives step by step."""
    start = 1.0
    specs = [(i, 8, g, g + left, start if at_start else start - 0.01 * (i + 1), m)
             for i, (_, g, left, at_start, m) in enumerate(batch)]
    steps = data.draw(st.integers(1, max(s[3] - s[2] for s in specs)))
    times = list(accumulate(prices[:steps], initial=start))
    run_reqs = [_decoding(*s) for s in specs]
    run_itl = ItlLog()
    done = lifecycle.complete_run(run_reqs, times, steps, run_itl)

    ref_reqs = [_decoding(*s) for s in specs]
    by_id, ref_itl, ref_done = {r.id: r for r in ref_reqs}, ItlLog(), []
    for j in range(steps):
        plan = SimpleNamespace(num_new_tokens={r.id: 1 for r in ref_reqs if r.status is Status.RUNNING})
        _, _, changed = lifecycle.complete_step(plan, by_id, times[j], times[j + 1], ref_itl)
        ref_done += [r for r in changed if r.finish_s is not None]
    assert [_state(r) for r in run_reqs] == [_state(r) for r in ref_reqs]
    assert [r.id for r in done] == [r.id for r in ref_done]
    assert list(run_itl.values) == list(ref_itl.values) and list(run_itl.counts) == list(ref_itl.counts)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 50), st.lists(st.tuples(st.integers(0, 30), st.integers(1, 4)), max_size=10),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), max_size=4),
       st.sampled_from([1, 4, 16]), st.integers(0, 30), st.integers(0, 200))
def test_used_with_frees(start_used, grown, freed, bs, steps, used_end):
    """With blocks given back during the run, ``used``, ``used_at`` and ``peak_used`` still count
    the blocks in use at each step's end against a plain count."""
    freed = sorted(freed)
    at = [first + t * bs for first, blocks in grown for t in range(blocks)]
    expect = [start_used + sum(1 for k in at if k <= j) - sum(b for k, b in freed if k <= j) for j in range(steps)]
    run = DecodeRun([], [0.0] * (steps + 1), None, start_used, grown, bs, "roofline", steps, freed)
    assert run.used == expect
    assert [run.used_at(j) for j in range(steps)] == expect
    assert all(u <= run.most_used() for u in expect)  # the bound that lets StepLog skip a run's peak
    if steps:
        expect[-1] = used_end
        assert run.peak_used(used_end) == max(expect)


@pytest.fixture(autouse=True)
def no_flows(monkeypatch):
    """Decode runs that admit arrivals (``sim.flow``, tested in tests/test_flow.py) would take
    over the runs tested here: off."""
    monkeypatch.setattr(engine, "enters", lambda *a: False)


def _stopping_at_finishes(monkeypatch, cfg):
    """``cfg`` simulated with every decode run stopping at its first finish."""
    real = engine.decode_run
    with monkeypatch.context() as m:
        m.setattr(engine, "decode_run", lambda *args: real(*args[:7], False))
        return simulate(cfg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scheduler=st.sampled_from(sorted(REGISTRY)), preemption=st.sampled_from(["recompute", "swap"]),
       blocks=st.integers(30, 600), block_size=st.sampled_from([4, 16]), replicas=st.integers(1, 3),
       rate=st.floats(1.0, 300.0), n=st.integers(1, 60), pmax=st.integers(1, 500), omax=st.integers(1, 120),
       seed=st.integers(0, 1000))
def test_going_on_past_finishes_changes_nothing(monkeypatch, scheduler, preemption, blocks, block_size, replicas,
                                                rate, n, pmax, omax, seed):
    cfg = tiny_config(seed=seed, cluster={"replicas": replicas}, scheduler={"name": scheduler},
                      kv={"num_gpu_blocks": blocks, "block_size": block_size, "preemption": preemption},
                      workload=uniform_workload(rate, n, pmax, omax),
                      output={"step_records": False, "plots": False, "progress": False})
    assert_identical(simulate(cfg), _stopping_at_finishes(monkeypatch, cfg))


def test_runs_go_on_past_finishes(monkeypatch):
    """The default workload without step rows: most runs go on past a finish (so the equivalence
    above compares two different paths), and the step count stays that of stopping at each."""
    calls = []
    real = fastforward._through

    def spy(*args):
        run = real(*args)
        if run is not None and run.freed:  # went on past a finish
            calls.append(run.steps)
        return run

    monkeypatch.setattr(fastforward, "_through", spy)
    cfg = tiny_config(cluster={"replicas": 2}, workload={"rate": 10.0, "num_requests": 300},
                      output={"step_records": False, "plots": False, "progress": False})
    res = simulate(cfg)
    assert len(calls) > 100
    monkeypatch.undo()
    monkeypatch.setattr(engine, "enters", lambda *a: False)
    assert res.summary["sim"]["steps"] == _stopping_at_finishes(monkeypatch, cfg).summary["sim"]["steps"]
