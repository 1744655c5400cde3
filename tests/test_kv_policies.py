"""KV memory policies: paged blocks, swap to host, prefix caching (exact block ids)."""
from __future__ import annotations

import pytest

from sim.kv import KVManager, PrefixKVManager, swap_space_blocks
from sim.kv.prefix import EVICTION, kv_block_hashes, usable_hit_tokens
from sim.types import RequestSpec


def spec(i, prompt, hashes, hbt=8):
    return RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=4, block_hashes=hashes,
                       hash_block_tokens=hbt)


def test_paged_allocation_counts_blocks_all_or_nothing():
    kv = KVManager(8, 4, 0.0)
    assert kv.allocate(1, 6) and kv.held[1] == 2
    assert kv.allocate(2, 4) and kv.held[2] == 1
    assert kv.allocate(1, 9) and kv.held[1] == 3 and kv.num_used == 4
    assert not kv.allocate(2, 40) and kv.held[2] == 1 and kv.num_used == 4  # all-or-nothing
    assert kv.free(1) == 3 and kv.num_used == 1 and kv.held == {2: 1}


def test_watermark_is_kept_only_at_admission():
    kv = KVManager(100, 4, 0.05)
    assert not kv.allocate(1, 4 * 96, admit=True)
    assert kv.allocate(1, 4 * 95, admit=True)
    assert kv.allocate(1, 4 * 100)  # running requests may use the watermark


def test_swap_out_and_in_keeps_block_count_and_respects_host_space():
    kv = KVManager(8, 4, 0.0, swap_blocks=3)
    kv.allocate(1, 10)  # 3 blocks
    kv.allocate(2, 4)
    assert kv.can_swap_out(1)
    assert kv.swap_out(1) == 3 and kv.is_swapped(1) and kv.num_used == 1 and kv.swap_used == 3
    assert not kv.can_swap_out(2)  # host space full: the caller falls back to recompute
    assert kv.swap_in(1, 13) and kv.held[1] == 4 and kv.num_used == 5 and kv.swap_used == 0


def test_swap_space_in_blocks_from_gib():
    assert swap_space_blocks(4.0, 2 * 2**20) == 2048
    assert KVManager(4, 4).can_swap_out(1) is False  # no swap configured


def test_trace_hash_block_covers_many_kv_blocks():
    h = kv_block_hashes((7, 9), 512, 16, 1000)
    assert len(h) == 62  # full 16-token blocks of a 1000-token prompt
    same = kv_block_hashes((7, 5), 512, 16, 1000)
    assert h[:32] == same[:32] and h[32] != same[32]  # the first 512 tokens are one hash block
    assert kv_block_hashes((3, 9), 512, 16, 1000)[0] != h[0]


def test_last_prompt_token_is_recomputed_on_a_full_hit():
    assert usable_hit_tokens(4, 4, 16) == 12  # prompt fills 4 blocks exactly: last block recomputed
    assert usable_hit_tokens(4, 4, 17) == 16
    assert usable_hit_tokens(2, 4, 17) == 8


def test_prefix_hit_shares_ref_counted_blocks_and_frees_to_cache():
    kv = PrefixKVManager(10, 4, 0.0)
    a, b = spec(1, 17, (1, 2, 3)), spec(2, 14, (1, 2))
    assert kv.prefix_hit(a, 17) == 0
    assert kv.allocate(1, 17, spec=a) and kv.tables[1] == [0, 1, 2, 3, 4]
    hit = kv.prefix_hit(b, 14)
    assert hit == 12  # hash block 1 (2 KV blocks) and the first KV block of hash block 2
    assert kv.allocate(2, 14, spec=b, cached_tokens=hit) and kv.tables[2] == [0, 1, 2, 5]
    assert kv.pool.ref[:6] == [2, 2, 2, 1, 1, 1] and kv.held == {1: 5, 2: 4}  # (counts beside the ids)
    kv.free(1)
    kv.free(2)
    assert kv.num_used == 0 and kv.num_referenced == 0
    assert kv.prefix_hit(a, 17) == 16  # all four full blocks of a still cached


@pytest.mark.parametrize("policy,order", [("lru", [1, 0, 2, 3]), ("lfu", [1, 2, 3, 0]), ("fifo", [1, 0, 2, 3])])
def test_eviction_policies_pick_by_key(policy, order):
    kv = PrefixKVManager(4, 4, 0.0, eviction=policy)

    def use(i, prompt, hashes):
        s = spec(i, prompt, hashes)
        assert kv.allocate(i, prompt, spec=s, cached_tokens=kv.prefix_hit(s, prompt))
        kv.free(i)

    use(1, 9, (10,))  # blocks 0,1 cached under hash block 10, block 2 partial
    use(2, 9, (20,))  # takes 3, 2 and evicts 1 (a sequence's tail goes first); 3,2 cached under 20
    use(3, 5, (10,))  # hits block 0 twice: more hits, but earlier
    use(4, 5, (10,))
    use(5, 9, (20,))  # hits blocks 3 and 2 once, most recently
    assert kv.allocate(6, 16) and kv.tables[6] == order  # unhashed block 1 first, then by key


def test_eviction_keys_are_one_line_functions():
    old_hot, new_cold = dict(last_access=1, hits=5, cached_at=0), dict(last_access=9, hits=0, cached_at=2)
    assert EVICTION["lru"](**old_hot) < EVICTION["lru"](**new_cold)
    assert EVICTION["lfu"](**new_cold) < EVICTION["lfu"](**old_hot)
    assert EVICTION["fifo"](**old_hot) < EVICTION["fifo"](**new_cold)


def test_no_hashes_means_no_caching():
    kv = PrefixKVManager(4, 4, 0.0)
    s = spec(1, 9, None)
    kv.allocate(1, 9, spec=s)
    kv.free(1)
    assert kv.prefix_hit(s, 9) == 0 and not kv.pool.block_of


@pytest.mark.parametrize("block_tokens,shared", [(16, 96), (64, 64), (4, 100)])
def test_system_prompts_share_at_the_kv_block_size(block_tokens, shared):
    """A 100-token system prompt shares its first 96 tokens with 16-token KV blocks, as vLLM
    hashes full blocks (64 with the 64-token hash blocks of before; all 100 with 4-token blocks)."""
    import numpy as np

    from sim.workload import WorkloadConfig, build_workload

    wl = WorkloadConfig(rate=1.0, num_requests=2, system_prompts={"count": 1, "tokens": 100},
                        prompt={"kind": "fixed", "value": 40})
    a, b = build_workload(wl, max_context=10**6, rng=np.random.default_rng(0), block_tokens=block_tokens)
    kv = PrefixKVManager(100, block_tokens, 0.0)
    assert kv.allocate(a.id, a.prompt_tokens, spec=a)
    assert kv.prefix_hit(b, b.prompt_tokens) == shared


def test_engine_hashes_synthetic_prefixes_at_its_block_size():
    from sim.config import load_config
    from sim.engine import Engine

    cfg = load_config({"kv": {"block_size": 32, "prefix_caching": True},
                       "workload": {"num_requests": 3, "system_prompts": {"count": 1, "tokens": 100}}})
    specs = list(Engine(cfg).workload)
    assert [s.hash_block_tokens for s in specs] == [32, 32, 32]
    assert len({s.block_hashes[:3] for s in specs}) == 1  # 96 of the 100 system-prompt tokens shared


def test_caching_without_shared_prefixes_says_why_the_hit_rate_is_0():
    import warnings as w

    from sim import simulate
    from sim.errors import ServesimWarning

    base = {"workload": {"rate": 5.0, "num_requests": 20}, "kv": {"prefix_caching": True}, "output": {"plots": False}}
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        s = simulate(base, progress=False).summary
    lines = [str(c.message) for c in caught if c.category is ServesimWarning]
    assert s["prefix_cache"]["hit_rate"] == 0
    assert [x for x in s["warnings"] if "no shared prefixes" in x] == [x for x in lines if "no shared prefixes" in x]
    assert len(lines) == 1 and "workload.system_prompts or workload.sessions" in lines[0]
    with_prompts = {**base, "workload": {**base["workload"], "system_prompts": {"count": 2, "tokens": 64}}}
    s = simulate(with_prompts, progress=False).summary
    assert s["prefix_cache"]["hit_rate"] > 0 and not any("no shared prefixes" in x for x in s["warnings"])
    off = simulate({**base, "kv": {"prefix_caching": False}}, progress=False).summary
    assert not any("no shared prefixes" in x for x in off["warnings"])


def test_a_waiting_request_sees_its_hit_shrink_when_a_block_is_evicted():
    """The queue's head asks every step; its known hit is cut at the first evicted block."""
    kv = PrefixKVManager(8, 4, 0.0)
    a, b = spec(1, 17, (1, 2, 3)), spec(2, 17, (1, 2, 3))
    assert kv.allocate(1, 17, spec=a) and kv.tables[1] == [0, 1, 2, 3, 4]
    kv.free(1)  # 0-3 cached (freed tail first: 3, 2, 1, 0), 4 free without a hash
    assert kv.allocate(3, 16) and kv.tables[3] == [5, 6, 7, 4]  # unhashed blocks first
    assert kv.prefix_hit(b, 17) == 16
    assert not kv.allocate(2, 17, spec=b, cached_tokens=16)  # 1 fresh + 4 free hits > 4 free
    assert kv.allocate(3, 20) and kv.tables[3][-1] == 3  # evicts block 3, the first freed
    assert kv.prefix_hit(b, 17) == 12
    assert not kv.allocate(2, 17, spec=b, cached_tokens=12)  # 2 fresh + 3 free hits > 3 free
    kv.free(3)
    assert kv.prefix_hit(b, 17) == 12 and kv.allocate(2, 17, spec=b, cached_tokens=12)
    assert kv.tables[2] == [0, 1, 2, 3, 4]  # 3 and 4 come back from the free list, without their hashes
