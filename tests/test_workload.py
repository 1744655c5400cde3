"""Synthetic workloads: arrival processes, tenants, sessions, system prompts; invariants by
property tests (sorted arrivals, ids 0..n-1, lengths >= 1, same seed -> same requests)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.workload import build_workload
from sim.workload.config import (BurstConfig, DiurnalConfig, LengthDist, SessionConfig, SystemPromptConfig,
                                 TenantConfig, WorkloadConfig)
from sim.workload.prefix import HashChain
from sim.workload.synthetic import arrival_times, interarrivals

FIX = LengthDist(kind="fixed", value=100)


def reqs(seed=0, **kw):
    return list(build_workload(WorkloadConfig(**kw), max_context=10**6, rng=np.random.default_rng(seed)))


def test_gamma_cv_measured():
    g = interarrivals("gamma", 5.0, 3.0, 20_000, np.random.default_rng(0))
    assert g.mean() == pytest.approx(0.2, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(3.0, rel=0.08)
    r = reqs(arrival="gamma", cv=2.0, rate=10.0, num_requests=20_000, prompt=FIX, output=FIX)
    gaps = np.diff([x.arrival_s for x in r])
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.08)


def test_poisson_first_at_zero_and_rate():
    r = reqs(rate=4.0, num_requests=20_000)
    assert r[0].arrival_s == 0.0
    assert len(r) / r[-1].arrival_s == pytest.approx(4.0, rel=0.03)


def test_diurnal_mean_rate_and_shape():
    cfg = WorkloadConfig(arrival="diurnal", rate=2.0, diurnal=DiurnalConfig(period_s=1000, amplitude=0.8))
    t = np.fromiter(arrival_times(cfg, np.random.default_rng(0)), float, 40_000)
    assert len(t) / t[-1] == pytest.approx(2.0, rel=0.03)
    phase = (t % 1000) / 1000
    peak, trough = np.mean((phase > 0.2) & (phase < 0.3)), np.mean((phase > 0.7) & (phase < 0.8))
    assert peak / trough == pytest.approx((1 + 0.8 * 0.97) / (1 - 0.8 * 0.97), rel=0.25)


def test_burst_mmpp_mean_rate():
    cfg = WorkloadConfig(arrival="burst", rate=1.0, burst=BurstConfig(rate=20.0, mean_base_s=30, mean_burst_s=10))
    t = np.fromiter(arrival_times(cfg, np.random.default_rng(1)), float, 200_000)
    assert len(t) / t[-1] == pytest.approx((1 * 30 + 20 * 10) / 40, rel=0.08)  # about 2.5 sigma
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() > 1.5  # bursty
    with pytest.raises(ValidationError, match="burst section"):
        WorkloadConfig(arrival="burst")


def test_tenants_mix():
    tenants = [TenantConfig(name="chat", rate=3.0, slo_class="interactive", priority=0, prompt=FIX),
               TenantConfig(name="batch", rate=1.0, arrival="gamma", cv=2.0, slo_class="batch", priority=5,
                            prompt=LengthDist(kind="fixed", value=7))]
    r = reqs(tenants=tenants, num_requests=8000)
    chat = [x for x in r if x.tenant == "chat"]
    assert len(chat) / len(r) == pytest.approx(0.75, abs=0.03)
    assert all(x.slo_class == "interactive" and x.priority == 0 and x.prompt_tokens == 100 for x in chat)
    assert all(x.slo_class == "batch" and x.priority == 5 and x.prompt_tokens == 7 for x in r if x.tenant == "batch")
    with pytest.raises(ValidationError, match="repeat"):
        WorkloadConfig(tenants=tenants + tenants[:1])


def test_sessions_history_and_prefix_hashes():
    r = reqs(sessions=SessionConfig(turns=LengthDist(kind="fixed", value=3), think_time_s=2.0),
             prompt=LengthDist(kind="fixed", value=100), output=LengthDist(kind="fixed", value=30), num_requests=300)
    by = {}
    for x in r:
        by.setdefault(x.session_id, []).append(x)
    full = [turns for turns in by.values() if len(turns) == 3]
    assert full
    for a, b, c in full:
        assert (a.prompt_tokens, b.prompt_tokens, c.prompt_tokens) == (100, 230, 360)
        assert a.arrival_s < b.arrival_s < c.arrival_s
        assert b.hash_block_tokens == 64 and len(c.block_hashes) == -(-360 // 64)
        assert b.block_hashes[:1] == a.block_hashes[:1] and c.block_hashes[:3] == b.block_hashes[:3]
        assert c.block_hashes[3] != b.block_hashes[3]  # b's 4th block is partial (230 = 3*64 + 38)
    firsts = {t[0].block_hashes[0] for t in by.values()}
    assert len(firsts) == len(by)  # no sharing across sessions


def test_system_prompts_share_blocks():
    r = reqs(system_prompts=SystemPromptConfig(count=3, tokens=128), prompt=LengthDist(kind="fixed", value=10),
             num_requests=300)
    assert all(x.prompt_tokens == 138 and len(x.block_hashes) == 3 for x in r)
    assert len({x.block_hashes[:2] for x in r}) == 3  # two full shared blocks, three prompts
    assert len({x.block_hashes[2] for x in r}) == 300  # the partial own block is never shared


def test_hash_chain_partial_block_differs():
    c, d = HashChain(own=1, shared=0, shared_tokens=128), HashChain(own=3, shared=0, shared_tokens=128)
    assert c.hashes(128) == d.hashes(128)
    assert c.hashes(100)[-1] != c.hashes(128)[1]
    assert c.hashes(200)[:2] == d.hashes(300)[:2] and c.hashes(256)[2] != d.hashes(256)[2]


def test_duration_cap():
    r = reqs(rate=10.0, num_requests=None, duration_s=50.0)
    assert r[-1].arrival_s <= 50.0 and len(r) == pytest.approx(500, rel=0.2)
    with pytest.raises(ValidationError, match="num_requests or duration_s"):
        WorkloadConfig(num_requests=None)


@pytest.mark.parametrize("kw", [{}, {"sessions": SessionConfig(think_time_s=1.0)},
                                {"tenants": [TenantConfig(name="a", rate=2.0), TenantConfig(name="b", rate=1.0)]}])
def test_synthetic_requests_carry_the_engines_output_limit(kw):
    """Each synthetic request's max_output_tokens is the context minus its prompt, at least 1 (the
    limit the engine gives a request without one), within the output distribution's bound (9
    here: what a client that knows its workload sends as max_tokens); with clip_to_context the
    engine sets it."""
    lengths = dict(prompt=LengthDist(kind="uniform", min=1, max=900), output=LengthDist(kind="uniform", min=1, max=9))
    wl = WorkloadConfig(rate=5.0, num_requests=200, **lengths, **kw)
    r = list(build_workload(wl, max_context=600, rng=np.random.default_rng(4)))
    assert [x.max_output_tokens for x in r] == [max(1, min(9, 600 - x.prompt_tokens)) for x in r]
    assert any(x.max_output_tokens == 9 for x in r)
    assert any(x.max_output_tokens == 1 for x in r)  # prompts past the context: the floor
    clip = WorkloadConfig(rate=5.0, num_requests=200, clip_to_context=True, **lengths, **kw)
    assert all(x.max_output_tokens is None for x in build_workload(clip, max_context=600, rng=np.random.default_rng(4)))


def test_trace_length_pool(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,7,3\n1,9,5\n")
    r = reqs(prompt=LengthDist(kind="trace", path=str(p)), output=LengthDist(kind="trace", path=str(p)), num_requests=50)
    assert {x.prompt_tokens for x in r} <= {7, 9} and {x.output_tokens for x in r} <= {3, 5}


ARRIVALS = st.sampled_from(["poisson", "gamma", "diurnal", "burst"])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), arrival=ARRIVALS, n=st.integers(1, 60), sessions=st.booleans(), tenants=st.booleans())
def test_synthetic_invariants(seed, arrival, n, sessions, tenants):
    kw = dict(arrival=arrival, rate=3.0, cv=2.5, num_requests=n, diurnal=DiurnalConfig(period_s=50, amplitude=0.9),
              burst=BurstConfig(rate=30.0, mean_base_s=5, mean_burst_s=1),
              sessions=SessionConfig(think_time_s=1.0) if sessions else None,
              system_prompts=SystemPromptConfig(count=2, tokens=70, popularity="zipf"),
              prompt=LengthDist(kind="lognormal", median=50, sigma=1.5), output=LengthDist(kind="uniform", min=1, max=9))
    if tenants:
        kw["tenants"] = [TenantConfig(name="a", rate=2.0, arrival=arrival, burst=kw["burst"]),
                         TenantConfig(name="b", rate=0.5)]
    a, b = reqs(seed, **kw), reqs(seed, **kw)
    assert a == b
    assert [x.id for x in a] == list(range(n))
    t = [x.arrival_s for x in a]
    assert t == sorted(t) and t[0] == 0.0
    assert all(x.prompt_tokens >= 71 and x.output_tokens >= 1 for x in a)
