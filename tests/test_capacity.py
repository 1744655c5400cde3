"""Capacity search: correct bracket, deterministic, monotone in replicas and in SLOs."""
from __future__ import annotations

import json

import pytest

from sim.sweep.capacity import SearchSettings, find_capacity, judge, search_seed
from sim.sweep.runner import Driver
from sim.sweep.store import RunStore

BASE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": {"num_requests": 100}}
S = SearchSettings(ttft_p99_s=1.0, tpot_p99_s=0.1, seeds=(0, 1), rel_tol=0.1, min_requests=100)


def cap(tmp_path, cfg=BASE, s=S):
    return find_capacity(cfg, s, Driver(RunStore(tmp_path), progress=False))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("capstore")


def test_bracket_is_tight_and_verdicts_consistent(store):
    c = cap(store)
    for sc in c.per_seed:
        full = [p for p in sc.probes if p.stage == "full"]
        passed = [p.rate for p in full if p.passed]
        failed = [p.rate for p in sc.probes if not p.passed]
        assert sc.rps == max(passed)
        hi = min(r for r in failed if r > sc.rps)
        assert hi / sc.rps <= 1 + S.rel_tol + 1e-9
        assert not sc.capped
    assert c.min <= c.mean <= c.max and c.min > 1.0


def test_deterministic_and_cached(store):
    d = Driver(RunStore(store), progress=False)
    again = find_capacity(BASE, S, d)
    assert again.rates == cap(store).rates
    assert d.counts.run == 0 and d.counts.reused > 0  # every probe came from the store


def test_more_replicas_never_lower_capacity(store):
    rates = [cap(store, {**BASE, "cluster": {"replicas": n}}).per_seed for n in (1, 2, 3)]
    for seed_idx in range(len(S.seeds)):
        per_n = [r[seed_idx].rps for r in rates]
        assert per_n == sorted(per_n), per_n
    assert rates[1][0].rps > 1.5 * rates[0][0].rps


def test_tighter_slos_never_raise_capacity(store):
    loose = cap(store)
    for tight in (SearchSettings(ttft_p99_s=0.5, tpot_p99_s=0.1, seeds=S.seeds, rel_tol=S.rel_tol),
                  SearchSettings(ttft_p99_s=1.0, tpot_p99_s=0.04, seeds=S.seeds, rel_tol=S.rel_tol),
                  SearchSettings(ttft_p99_s=0.5, tpot_p99_s=0.04, seeds=S.seeds, rel_tol=S.rel_tol)):
        t = cap(store, s=tight)
        assert all(a <= b for a, b in zip(t.rates, loose.rates)), (t.rates, loose.rates)
    tighter = cap(store, s=SearchSettings(ttft_p99_s=0.5, tpot_p99_s=0.04, seeds=S.seeds, rel_tol=S.rel_tol))
    assert tighter.max < loose.max


def test_unreachable_slo_gives_zero():
    s = SearchSettings(ttft_p99_s=1.0, tpot_p99_s=1e-4, seeds=(0,), min_rate=0.5)
    gen = search_seed(BASE, 0, s)
    # drive it by hand with a fake result that always misses TPOT: halves down to min_rate, then 0
    summary = {"requests": {"arrived": 10, "completed": 10}, "ttft_s": {"p99": 0.1}, "tpot_s": {"p99": 0.01}}
    cfg = next(gen)
    n = 0
    try:
        while True:
            cfg = gen.send({"key": f"k{n}", "status": "ok", "summary": summary})
            n += 1
    except StopIteration as stop:
        res = stop.value
    assert res.rps == 0.0 and "TPOT" in res.reason and cfg["workload"]["rate"] == 0.5


def test_judge_requires_every_request_completed():
    s = SearchSettings(min_requests=10)
    sm = {"requests": {"arrived": 10, "completed": 9}, "ttft_s": {"p99": 0.1}, "tpot_s": {"p99": 0.01}}
    assert judge(sm, s) == (False, "1 of 10 requests not completed")
    sm["requests"]["completed"] = 10
    assert judge(sm, s)[0]


def test_cli_capacity(tmp_path, capsys):
    from sim.cli import main

    assert main(["capacity", "--num-requests", "100", "--seeds", "1", "--rel-tol", "0.2", "--slo-ttft-p99", "1",
                 "--out", str(tmp_path), "--workers", "1", "--quiet"]) == 0
    out = json.loads((tmp_path / "capacity.json").read_text())
    assert out["rps"]["min"] > 0 and len(out["per_seed"]) == 1
    text = capsys.readouterr().out
    assert "sustained by every one of 1 seeds" in text and "precision:" in text


def test_too_few_requests_are_not_judged():
    s = SearchSettings(min_requests=200)
    sm = {"requests": {"arrived": 50, "completed": 50}, "ttft_s": {"p99": 0.1}, "tpot_s": {"p99": 0.01}}
    ok, why = judge(sm, s)
    assert not ok and "too few to judge a p99" in why


def test_probes_reach_min_requests_and_short_passes_are_not_within_slos(store):
    s = SearchSettings(ttft_p99_s=1.0, tpot_p99_s=0.1, seeds=(0,), rel_tol=0.1, min_requests=150)
    c = cap(store, s=s)
    full = [p for p in c.per_seed[0].probes if p.stage == "full"]
    for p in c.per_seed[0].probes:
        if p.stage == "short":
            assert p.reason != "within SLOs"
    for p in full:
        n = json.loads((RunStore(store).path(p.key) / "summary.json").read_text())["requests"]["arrived"]
        assert n >= 150


def test_seeds_vary_the_workload_and_precision_is_stated(store):
    c = cap(store)
    rates0 = {p.rate: p.key for p in c.per_seed[0].probes if p.stage == "full"}
    rates1 = {p.rate: p.key for p in c.per_seed[1].probes if p.stage == "full"}
    common = set(rates0) & set(rates1)
    assert common
    for r in common:  # same rate, other seed: other arrivals, other results
        a = json.loads((RunStore(store).path(rates0[r]) / "summary.json").read_text())
        b = json.loads((RunStore(store).path(rates1[r]) / "summary.json").read_text())
        assert a["ttft_s"] != b["ttft_s"]
    d = c.as_dict()
    assert 0 < d["precision"] <= S.rel_tol + 1e-9
    for sc in d["per_seed"]:
        assert sc["rps"] < sc["fail_rps"] <= sc["rps"] * (1 + S.rel_tol) + 1e-9


def test_capacity_and_plan_agree(tmp_path, capsys):
    """The issue's check: the same candidate, SLOs and settings give one number from both
    commands (one search routine; plan reuses every probe capacity ran)."""
    from sim.cli import main

    common = ["--seeds", "2", "--rel-tol", "0.2", "--num-requests", "100", "--slo-ttft-p99", "1", "--workers", "1",
              "--quiet", "--out", str(tmp_path)]
    assert main(["capacity", "--set", "scheduler.name=vllm_v1", *common]) == 0
    capacity = json.loads((tmp_path / "capacity.json").read_text())["rps"]["min"]
    main(["plan", "--model", "llama-3.1-8b", "--gpus", "h100-sxm", "--tp", "1", "--schedulers", "vllm_v1",
          "--rate", str(capacity), *common])
    meta = json.loads((tmp_path / "plan.json").read_text())
    assert meta["capacity"]["h100-sxm tp1 vllm_v1"]["min"] == capacity
    assert meta["runs"]["reused"] > 0
