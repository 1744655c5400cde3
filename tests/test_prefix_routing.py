"""Cache-aware routers (``prefix_aware``, ``prefix_approx``): exact choices on a tiny two-replica
case, their effect in whole simulations, and exactness with the decode fast-forward on and off."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from test_fast_forward import assert_identical
from sim import simulate
from sim.cluster import ROUTERS, ReplicaLoad
from sim.config import Cluster
from sim.kv import PrefixKVManager
from sim.types import RequestSpec


def spec(i, prompt, hashes, hbt=8):
    return RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=4, block_hashes=hashes,
                       hash_block_tokens=hbt)


def load(kv, waiting=0, running=0):
    return ReplicaLoad(waiting, running, kv.num_used / kv.num_blocks, kv)


def state(**knobs):
    return {"cluster": Cluster(prefix_routing=knobs)}


@pytest.mark.parametrize("prefix_weight,pick", [(1.0, 0), (1.4, 0), (1.6, 1), (3.0, 1)])
def test_prefix_aware_weighs_the_cached_prefix_against_load(prefix_weight, pick):
    """Replica 1 holds request a (17 tokens, 5 of its 10 blocks of 4 tokens; 4 full blocks
    cached). Request b's 3 full prompt blocks are all cached there. Scores (queue: 1 for the idle
    replica, 0 for the busy one; KV: 1 - use):
    replica 0: prefix 0 + queue 1 + KV 1.0 = 2.0; replica 1: w * 3/3 + 0 + 0.5 = w + 0.5."""
    a, b = spec(1, 17, (1, 2, 3)), spec(2, 14, (1, 2))
    idle, busy = PrefixKVManager(10, 4, 0.0), PrefixKVManager(10, 4, 0.0)
    assert busy.allocate(a.id, a.prompt_tokens, spec=a) and busy.num_used == 5
    assert busy.cached_blocks(busy.chain(b)) == 3 and idle.cached_blocks(idle.chain(b)) == 0
    loads = [load(idle), load(busy, running=1)]
    assert ROUTERS["prefix_aware"](b, loads, state(prefix_weight=prefix_weight)) == pick


def test_prefix_aware_without_hashes_or_weights_balances_load():
    kv0, kv1 = PrefixKVManager(10, 4, 0.0), PrefixKVManager(10, 4, 0.0)
    a = spec(1, 17, (1, 2, 3))
    kv1.allocate(a.id, a.prompt_tokens, spec=a)
    no_hashes = spec(2, 14, None)
    assert ROUTERS["prefix_aware"](no_hashes, [load(kv1, running=1), load(kv0)], state(prefix_weight=9.0)) == 1
    # only the KV weight: the replica with the lower KV use, whatever it caches
    assert ROUTERS["prefix_aware"](spec(3, 14, (1, 2)), [load(kv1, running=1), load(kv0)],
                                   state(prefix_weight=0.0, queue_weight=0.0)) == 1
    # ties go to the lowest index
    assert ROUTERS["prefix_aware"](no_hashes, [load(kv0), load(PrefixKVManager(10, 4, 0.0))], state()) == 0


def test_prefix_approx_remembers_what_it_routed_not_what_is_cached():
    """The approximate router never reads the caches: a request goes back to where the same
    prefix was routed before, though nothing was allocated there."""
    kv0, kv1 = PrefixKVManager(10, 4, 0.0), PrefixKVManager(10, 4, 0.0)
    st_ = state(prefix_weight=2.0)
    a, b, other = spec(1, 17, (1, 2, 3)), spec(2, 14, (1, 2)), spec(3, 14, (7, 8))
    assert ROUTERS["prefix_approx"](a, [load(kv0), load(kv1)], st_) == 0  # tie: lowest index
    busy0 = [load(kv0, running=1), load(kv1)]
    # replica 0: 2 * 3/3 + 0 + 1 = 3 > replica 1: 0 + 1 + 1 = 2
    assert ROUTERS["prefix_approx"](b, busy0, st_) == 0
    assert ROUTERS["prefix_approx"](other, busy0, st_) == 1
    assert ROUTERS["prefix_aware"](b, busy0, st_) == 1  # the precise router sees that nothing is cached


def test_prefix_approx_forgets_the_least_recently_routed_blocks():
    kv0, kv1 = PrefixKVManager(10, 4, 0.0), PrefixKVManager(10, 4, 0.0)
    st_ = state(prefix_weight=2.0, history_blocks=2)
    a, b = spec(1, 17, (1, 2, 3)), spec(2, 14, (1, 2))
    assert ROUTERS["prefix_approx"](a, [load(kv0), load(kv1)], st_) == 0
    assert list(st_["index"][0]) == kv0.chain(a)[2:]  # a's first two blocks forgotten: b's prefix is gone
    assert ROUTERS["prefix_approx"](b, [load(kv0, running=1), load(kv1)], st_) == 1


def sessions_config(router, replicas, seed=0, n=60, blocks=300, ff=True):
    wl = {"rate": 8.0, "num_requests": n, "sessions": {"turns": {"kind": "uniform", "min": 1, "max": 4},
                                                       "think_time_s": 1.0},
          "system_prompts": {"count": 3, "tokens": 100},
          "prompt": {"kind": "uniform", "min": 8, "max": 200}, "output": {"kind": "uniform", "min": 1, "max": 40}}
    return tiny_config(seed=seed, cluster={"replicas": replicas, "router": router}, workload=wl,
                       kv={"prefix_caching": True, "num_gpu_blocks": blocks, "block_size": 16},
                       engine={"fast_forward": ff})


def test_prefix_aware_routing_raises_the_hit_rate():
    """Sessions whose turns replay their history: the cache-aware routers find it, the load-only
    router scatters the turns."""
    rates = {r: simulate(sessions_config(r, 4, n=200, blocks=2000)).summary["prefix_cache"]["hit_rate"]
             for r in ("prefix_aware", "prefix_approx", "least_loaded")}
    assert rates["prefix_aware"] > rates["least_loaded"] + 0.05
    assert rates["prefix_approx"] > rates["least_loaded"] + 0.05


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(router=st.sampled_from(["prefix_aware", "prefix_approx"]), replicas=st.integers(1, 3),
       seed=st.integers(0, 1000), blocks=st.integers(40, 600))
def test_fast_forward_is_exact_with_cache_aware_routers(router, replicas, seed, blocks):
    on = simulate(sessions_config(router, replicas, seed, blocks=blocks, ff=True))
    off = simulate(sessions_config(router, replicas, seed, blocks=blocks, ff=False))
    assert_identical(on, off)
