"""The tiered KV cache (``sim.kv.tiers``): exact block moves and transfer prices on tiny cases,
no hash in two tiers and nothing lost but what the last tier drops (random operation
sequences), identical results with fast paths on and off, and bad input refused by key."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.config import build_config
from sim.cost import make_cost_model
from sim.errors import ConfigError
from sim.kv import make_kv_manager
from sim.kv.prefix import kv_block_hashes, usable_hit_tokens
from sim.kv.tiers import HostLink, TieredKVManager
from sim.scheduler import REGISTRY
from sim.types import BatchShape, RequestSpec, StepPlan
from test_fast_forward import assert_identical, both

# Llama-3.1-8B in bf16: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 131,072 bytes a
# token; 16-token blocks: 2 MiB. H100 SXM: PCIe Gen5 x16, 128 GB/s both ways, 64 GB/s one way.
BLOCK = 16 * 131_072
H100_ONE_WAY = 64e9


def spec(i: int, prompt: int, ids: tuple[int, ...]) -> RequestSpec:
    return RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=1, block_hashes=ids,
                       hash_block_tokens=4)


def test_blocks_move_to_host_on_eviction_and_load_back_on_a_hit():
    kv = TieredKVManager(4, 4, 0.0, host_blocks=2)
    a = spec(0, 9, (1, 2, 3))
    ha = kv.chain(a)  # two full blocks
    assert kv.allocate(0, 9, spec=a) and kv.tables[0] == [0, 1, 2]
    kv.free(0)  # blocks 1, 0 stay cached on the GPU (tail first), block 2 is plain free
    b = spec(1, 13, (7, 8, 9, 10))
    hb = kv.chain(b)
    assert kv.allocate(1, 13, spec=b) and kv.tables[1] == [3, 2, 1, 0]  # evicts 1 then 0
    assert list(kv.tiers.host) == [ha[1], ha[0]] and ha[0] not in kv.pool.block_of
    kv.free(1)
    c = spec(2, 9, (1, 2, 3))
    hit = kv.prefix_hit(c, 9)
    assert hit == 8  # both blocks, from host (the last prompt token is recomputed)
    assert kv.allocate(2, 9, spec=c, cached_tokens=hit)
    plan = StepPlan()
    kv.record_loads(plan, first=True)
    assert (plan.blocks_loaded, plan.blocks_loaded_disk) == (2, 0)
    # C's three blocks: the free block 0, then the two oldest cached ones (1, 2) evicted to host
    assert kv.tables[2] == [0, 1, 2]
    assert kv.pool.block_of[ha[0]] == 0 and kv.pool.block_of[ha[1]] == 1
    assert list(kv.tiers.host) == [hb[2], hb[1]]
    t = kv.tiers.tally
    assert (t.offloaded, t.loaded_host, t.dropped, t.hit_tokens_host) == (4, 2, 0, 8)
    # D takes the free block 2 and evicts 3, 1, 0 (B's first, A's two): host (two blocks) keeps
    # the newest two and drops its three oldest
    kv.free(2)
    assert kv.allocate(3, 16, spec=spec(3, 16, (20, 21, 22, 23)))
    assert t.dropped == 3 and list(kv.tiers.host) == [ha[1], ha[0]]


def test_a_disk_tier_takes_what_host_evicts_and_loads_at_its_own_bandwidth():
    kv = TieredKVManager(2, 4, 0.0, host_blocks=1, disk_blocks=4)
    a = spec(0, 9, (1, 2, 3))
    ha = kv.chain(a)
    assert kv.allocate(0, 9, spec=a) is False  # three blocks on a two-block GPU
    a = spec(0, 8, (1, 2))
    ha = kv.chain(a)
    assert kv.allocate(0, 8, spec=a)
    kv.free(0)
    assert kv.allocate(1, 8, spec=spec(1, 8, (5, 6)))  # evicts A's blocks: host keeps the newest
    assert list(kv.tiers.host) == [ha[0]] and list(kv.tiers.disk) == [ha[1]]
    kv.free(1)
    c = spec(2, 9, (1, 2, 3))
    assert kv.prefix_hit(c, 9) == 8
    assert kv.allocate(2, 8, spec=c, cached_tokens=8)
    plan = StepPlan()
    kv.record_loads(plan, first=False)  # a readmission: loads priced, hit tokens not counted
    assert (plan.blocks_loaded, plan.blocks_loaded_disk) == (1, 1) and kv.tiers.tally.hit_tokens_host == 0


def test_a_block_recomputed_on_the_gpu_supersedes_its_lower_tier_copy():
    kv = TieredKVManager(2, 4, 0.0, host_blocks=4)
    assert kv.allocate(0, 8, spec=spec(0, 8, (1, 2)))
    kv.free(0)
    assert kv.allocate(1, 8, spec=spec(1, 8, (5, 6)))  # A's two blocks go to host
    h = kv.chain(spec(9, 8, (1, 2)))
    assert set(kv.tiers.host) == set(h)
    kv.free(1)
    assert kv.allocate(2, 8, spec=spec(2, 8, (1, 2)))  # no hit asked for: computed again
    assert h[0] in kv.pool.block_of and h[0] not in kv.tiers and kv.tiers.tally.superseded == 2


def tiered_cfg(**kv):
    return build_config(tiny_config(kv={"prefix_caching": True, "num_cpu_blocks": 100, **kv}))


def test_transfer_times_by_hand():
    cfg = tiered_cfg(disk_offload_gib=1.0, disk_read_gbps=5.0, disk_latency_s=1e-4)
    cm = make_cost_model(cfg, get_model(cfg.model), get_hardware(cfg.hardware))
    base = cm.step_time(BatchShape((9,), (8,))).total

    def swap(**moved):
        st = cm.step_time(BatchShape((9,), (8,), **moved))
        assert st.total == pytest.approx(base + st.swap, rel=1e-12)
        return st.swap

    assert swap() == 0.0
    assert swap(blocks_loaded=2) == pytest.approx(2 * BLOCK / H100_ONE_WAY + 6e-6, rel=1e-12)  # 71.536 us
    assert swap(blocks_loaded_disk=3) == pytest.approx(3 * BLOCK / 5e9 + 1e-4, rel=1e-12)  # 1.3583 ms
    # swap preemption goes through the same formula: bandwidth only
    assert swap(blocks_swapped_out=4) == pytest.approx(4 * BLOCK / H100_ONE_WAY, rel=1e-12)  # 131.072 us
    gb200 = get_hardware("gb200")  # NVLink-C2C to Grace: 900 GB/s both ways, 450 one way
    assert HostLink(BLOCK, gb200.host_bw).seconds(0, 10) == pytest.approx(10 * BLOCK / 450e9, rel=1e-12)


def test_swap_preemption_shares_the_host_pool():
    kv = TieredKVManager(4, 4, 0.0, host_blocks=3, swap=True)
    assert kv.swap_blocks == 3
    assert kv.allocate(0, 8, spec=spec(0, 8, (1, 2)))
    kv.free(0)
    assert kv.allocate(1, 16, spec=spec(1, 16, (5, 6, 7, 8)))  # A's two blocks to host
    assert len(kv.tiers.host) == 2
    kv.free(1)
    assert kv.allocate(2, 8)
    assert kv.can_swap_out(2) and kv.swap_out(2) == 2  # pinned: host keeps one cached block
    assert len(kv.tiers.host) == 1 and kv.tiers.tally.dropped == 3  # A's two, then one of B's
    assert kv.allocate(3, 8) and not kv.can_swap_out(3)  # 2 pinned + 2 > 3 host blocks


def _tier_run(**kv):
    return simulate(tiny_config(
        kv={"prefix_caching": True, "num_gpu_blocks": 60, **kv},
        workload={"rate": 20.0, "num_requests": 60, "system_prompts": {"count": 6, "tokens": 200},
                  "prompt": {"kind": "uniform", "min": 16, "max": 120}}))


def test_a_run_reports_hits_per_tier_and_prices_the_loads_in_the_swap_term():
    res = _tier_run(num_cpu_blocks=400, offload_latency_s=0.0)
    pc = res.summary["prefix_cache"]
    t = pc["tiers"]
    assert t["host"]["hit_tokens"] > 0 and t["gpu"]["hit_tokens"] > 0
    assert t["gpu"]["hit_tokens"] + t["host"]["hit_tokens"] == pc["saved_prefill_tokens"]
    assert t["gpu"]["hit_rate"] + t["host"]["hit_rate"] == pytest.approx(pc["hit_rate"], rel=1e-12)
    assert res.steps["t_swap_s"].sum() == pytest.approx(t["host"]["loaded_blocks"] * BLOCK / H100_ONE_WAY, rel=1e-9)


def test_more_host_memory_never_serves_fewer_tokens_from_host_here():
    off = _tier_run().summary["prefix_cache"]
    small = _tier_run(num_cpu_blocks=20).summary["prefix_cache"]
    big = _tier_run(num_cpu_blocks=2000).summary["prefix_cache"]
    assert "tiers" not in off
    assert small["tiers"]["host"]["hit_tokens"] < big["tiers"]["host"]["hit_tokens"]
    assert off["hit_rate"] < big["hit_rate"]


TIERED_SCHEDULERS = sorted(n for n, c in REGISTRY.items() if c.uses_prefix_hits)

cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(TIERED_SCHEDULERS),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "blocks": st.integers(30, 300),
    "host": st.integers(1, 400),
    "disk": st.sampled_from([None, 0.01, 1.0]),
    "block_size": st.sampled_from([4, 16]),
    "replicas": st.integers(1, 2),
    "rate": st.floats(1.0, 200.0),
    "n": st.integers(1, 40),
    "prompts": st.integers(1, 4),
    "seed": st.integers(0, 1000),
    "rows": st.booleans(),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_fast_paths_are_exact_with_the_tiers_on(p):
    disk = {} if p["disk"] is None else {"disk_offload_gib": p["disk"], "disk_read_gbps": 7.0}
    cfg = tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]}, scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"], "preemption": p["preemption"],
            "prefix_caching": True, "num_cpu_blocks": p["host"], **disk},
        workload={"rate": p["rate"], "num_requests": p["n"], "system_prompts": {"count": p["prompts"], "tokens": 90},
                  "prompt": {"kind": "uniform", "min": 1, "max": 200}, "output": {"kind": "uniform", "min": 1, "max": 60}},
        output={"step_records": p["rows"], "plots": False, "progress": False})
    assert_identical(*both(cfg))


# ---- no hash in two tiers; nothing lost but what the last tier drops -----------------------
# a request: its prompt, which of four documents it starts with (and whether it leaves it after
# the first hash block), its first chunk, whether it asks for its hit
new = st.tuples(st.just("new"), st.integers(1, 16), st.integers(0, 3), st.booleans(), st.integers(1, 16),
                st.sampled_from([True, True, False]))
grow = st.tuples(st.just("grow"), st.integers(0, 50), st.integers(1, 9))
free = st.tuples(st.just("free"), st.integers(0, 50))
swap = st.tuples(st.just("swap"), st.integers(0, 50))
unswap = st.tuples(st.just("unswap"), st.integers(0, 50))
ops = st.lists(st.one_of(new, new, grow, free, free, swap, unswap), min_size=30, max_size=90)


def check_tiers(kv: TieredKVManager, before: set, dropped_before: int) -> set:
    """The invariants after one operation (``before``: every cached hash before it); returns
    every cached hash now."""
    gpu, host, disk = set(kv.pool.block_of), set(kv.tiers.host), set(kv.tiers.disk)
    assert not (gpu & host or gpu & disk or host & disk)  # no hash in two tiers
    assert len(host) + kv.swap_used <= kv.tiers.host_blocks and len(disk) <= kv.tiers.disk_blocks
    t = kv.tiers.tally
    now = gpu | host | disk
    # a cached hash leaves every tier only by a drop from the last tier
    assert len(before - now) <= t.dropped - dropped_before
    assert len(host) + len(disk) == t.offloaded - t.loaded_host - t.loaded_disk - t.dropped - t.superseded
    for h in host | disk:  # findable: a lookup that reaches it counts it
        assert kv.tiers.run([h], 0) == 1
    return now


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.integers(4, 8), host=st.integers(1, 6), disk=st.sampled_from([0, 6, 16]), bs=st.sampled_from([2, 4]),
       eviction=st.sampled_from(["lru", "lfu", "fifo"]), ops=ops)
def test_no_block_in_two_tiers_and_nothing_lost(blocks, host, disk, bs, eviction, ops):
    kv = TieredKVManager(blocks, bs, 0.0, host_blocks=host, disk_blocks=disk, swap=True, eviction=eviction)
    live: dict[int, int] = {}
    swapped: set[int] = set()
    cached: set = set()
    loads = 0
    for i, (op, *args) in enumerate(ops):
        dropped = kv.tiers.tally.dropped
        if op == "new":
            prompt, doc, leaves, chunk, ask = args
            ids = (doc, -i, -i, -i) if leaves else (doc, 10 + doc, 20 + doc, 30 + doc)
            s = RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=1,
                            block_hashes=ids[: -(-prompt // 4)], hash_block_tokens=4)
            hit = kv.prefix_hit(s, prompt) if ask else 0
            chain = kv_block_hashes(s.block_hashes, 4, bs, prompt)
            lower = sum(1 for h in chain if h in kv.tiers)
            assert hit <= usable_hit_tokens(len(chain), bs, prompt)
            total = min(prompt, hit + chunk)
            if kv.allocate(i, total, spec=s, cached_tokens=hit):
                live[i] = total
                plan = StepPlan()
                kv.record_loads(plan, first=True)
                loads += plan.blocks_loaded + plan.blocks_loaded_disk
                assert plan.blocks_loaded + plan.blocks_loaded_disk <= lower
                assert all(h in kv.pool.block_of for h in chain[: hit // bs])  # the hit is on the GPU now
        elif op == "grow" and live:
            rid = sorted(live)[args[0] % len(live)]
            if kv.allocate(rid, live[rid] + args[1]):
                live[rid] += args[1]
        elif op == "free" and live:
            rid = sorted(live)[args[0] % len(live)]
            kv.free(rid)
            del live[rid]
        elif op == "swap" and live:
            rid = sorted(live)[args[0] % len(live)]
            if kv.can_swap_out(rid):
                kv.swap_out(rid)
                swapped.add(rid)
                del live[rid]
        elif op == "unswap" and swapped:
            rid = sorted(swapped)[args[0] % len(swapped)]
            if kv.swap_in(rid, 1):
                swapped.discard(rid)
                live[rid] = 1
        cached = check_tiers(kv, cached, dropped)
    t = kv.tiers.tally
    assert loads == t.loaded_host + t.loaded_disk
    STATS.append((t.loaded_host, t.loaded_disk, t.dropped, t.superseded))


STATS: list = []


def test_the_random_sequences_load_from_both_tiers_and_drop():
    """The sequences above reach every move (this runs after them, in file order)."""
    assert len(STATS) >= 100
    for i in range(4):
        assert sum(1 for s in STATS if s[i]) >= 5, i


def test_the_tier_off_manager_is_the_plain_prefix_cache():
    cfg = build_config(tiny_config(kv={"prefix_caching": True}))
    kv = make_kv_manager(cfg.kv, 10, BLOCK)
    assert type(kv).__name__ == "PrefixKVManager" and not kv.tiered


@pytest.mark.parametrize("kv,match", [
    ({"prefix_caching": True, "cpu_offload_gib": 8, "num_cpu_blocks": 10}, r"kv\.num_cpu_blocks: .*not both"),
    ({"prefix_caching": True, "cpu_offload_gib": 0}, r"kv\.cpu_offload_gib"),
    ({"prefix_caching": True, "cpu_offload_gib": -1}, r"kv\.cpu_offload_gib"),
    ({"prefix_caching": True, "num_cpu_blocks": 0}, r"kv\.num_cpu_blocks"),
    ({"cpu_offload_gib": 8}, r"kv\.cpu_offload_gib: .*kv\.prefix_caching: true"),
    ({"prefix_caching": True, "disk_offload_gib": 8, "disk_read_gbps": 5}, r"kv\.disk_offload_gib: .*host tier"),
    ({"prefix_caching": True, "num_cpu_blocks": 10, "disk_offload_gib": 8}, r"kv\.disk_read_gbps: set it"),
    ({"prefix_caching": True, "num_cpu_blocks": 10, "disk_read_gbps": 5}, r"kv\.disk_read_gbps: given without"),
    ({"prefix_caching": True, "num_cpu_blocks": 10, "disk_offload_gib": 8, "disk_read_gbps": 0}, r"kv\.disk_read_gbps"),
    ({"prefix_caching": True, "num_cpu_blocks": 10, "preemption": "swap", "swap_space_gib": 4},
     r"kv\.swap_space_gib: with a host tier"),
])
def test_bad_tier_input_names_the_key(kv, match):
    with pytest.raises(ConfigError, match=match):
        build_config(tiny_config(kv=kv))


def test_a_tier_smaller_than_a_block_is_refused_before_simulating():
    with pytest.raises(ConfigError, match=r"kv\.cpu_offload_gib: 0\.001 GiB per GPU holds no KV block"):
        simulate(tiny_config(kv={"prefix_caching": True, "cpu_offload_gib": 0.001}))


def test_bad_tier_input_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", str(tmp_path / "r"), "--num-requests", "5",
                           "--set", "kv.cpu_offload_gib=64"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "kv.cpu_offload_gib" in proc.stderr and "prefix_caching" in proc.stderr


def test_the_experiment_runs_and_draws_on_a_small_workload(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import kv_tiers

    cfg = tiny_config(kv={"prefix_caching": True, "num_gpu_blocks": 60},
                      workload={"num_requests": 60, "system_prompts": {"count": 6, "tokens": 200},
                                "prompt": {"kind": "uniform", "min": 16, "max": 120}})
    df = kv_tiers.run_all(cfg, {"host_gib": [0, 0.8], "rate": 20.0})
    assert list(df["host_gib"]) == [0, 0.8]
    assert df["host_hit_rate"][0] == 0 and df["host_hit_rate"][1] > 0
    assert (df["gpu_hit_rate"] + df["host_hit_rate"]).tolist() == pytest.approx(df["hit_rate"].tolist(), rel=1e-12)
    kv_tiers.plot(df, tmp_path, cfg)
    assert (tmp_path / "figures" / "kv_tiers.png").is_file() and (tmp_path / "figures" / "kv_tiers.svg").is_file()


def test_tier_counts_are_summed_over_worker_processes():
    cfg = tiny_config(kv={"prefix_caching": True, "num_gpu_blocks": 60, "num_cpu_blocks": 200},
                      cluster={"replicas": 2, "router": "round_robin"},
                      workload={"rate": 20.0, "num_requests": 80, "system_prompts": {"count": 6, "tokens": 200},
                                "prompt": {"kind": "uniform", "min": 16, "max": 120}})
    one = simulate({**cfg, "engine": {"workers": 1}}).summary["prefix_cache"]
    two = simulate({**cfg, "engine": {"workers": 2}}).summary["prefix_cache"]
    assert one["tiers"]["host"]["loaded_blocks"] > 0 and one == two


def test_a_card_without_a_host_link_is_refused(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "sim" / "catalog" / "hardware" / "h100-sxm.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(("host_link_gbps_bidir:", "id:", "aliases:", "- "))]
    card = tmp_path / "nolink.yaml"
    card.write_text("\n".join(["id: nolink-h100", "host_link_gbps_bidir: 0", *lines]) + "\n")
    with pytest.raises(ConfigError, match=r"kv\.cpu_offload_gib: hardware nolink-h100 has no host link"):
        build_config(tiny_config(hardware=str(card), kv={"prefix_caching": True, "cpu_offload_gib": 8}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 60), max_size=8)),
    st.tuples(st.just("remove"), st.integers(0, 60)),
    st.tuples(st.just("remove_here"), st.lists(st.integers(0, 60), max_size=8)),
    st.tuples(st.just("pop"), st.integers(0, 10))), max_size=150), slack=st.sampled_from([3, 10**6]))
def test_the_batched_lru_order_is_an_ordered_dicts(ops, slack):
    """A tier's hashes in batches (stale entries skipped, compacted when mostly stale) keep the
    order, membership and evictions of an OrderedDict on random adds, removals (one hash, or
    those of a list that are here: a load) and re-adds."""
    from collections import OrderedDict

    from sim.kv.tiers import LruHashes

    lru, ref = LruHashes(), OrderedDict()
    lru.slack = slack  # compact often, or never
    for op, arg in ops:
        if op == "add":
            new = list(dict.fromkeys(h for h in arg if h not in ref))
            lru.add(new)
            ref.update((h, None) for h in new)
        elif op == "remove" and arg in ref:
            lru.remove(arg)
            del ref[arg]
        elif op == "remove_here":  # (some here, some not, some twice)
            rest = [h for h in arg if ref.pop(h, 0) is not None]
            assert lru.remove_here(arg) == rest
        elif op == "pop":
            k = min(arg, len(ref))
            assert lru.pop_oldest(k) == [ref.popitem(last=False)[0] for _ in range(k)]
        assert list(lru) == list(ref)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eviction=st.sampled_from(["lru", "lfu", "fifo"]), gpu=st.integers(6, 30), host=st.integers(1, 12),
       disk=st.sampled_from([0, 0, 4]), ops=st.lists(st.one_of(
           st.tuples(st.just("new"), st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(1, 12)),
           st.tuples(st.just("grow"), st.integers(0, 30), st.integers(1, 12)),
           st.tuples(st.just("free"), st.integers(0, 30)),
           st.tuples(st.just("check"), st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(1, 6))),
           min_size=5, max_size=60))
def test_a_growth_evicts_watched_does_not_flag_leaves_the_heads_hit_as_it_was(eviction, gpu, host, disk, ops):
    """``static_refusal`` of the tiered manager: when ``evicts_watched(n)`` says no, taking ``n``
    blocks for a decode (a request without hashes growing) leaves the last lookup's answer as it
    was: the same GPU hit and the same lower-tier run after it. Checked on a copy of the manager
    grown block by block, on random pools, tiers and requests with shared prefixes prefilled in
    chunks side by side (so a prefix's blocks can be cached by several requests' tables)."""
    import copy

    kv = TieredKVManager(gpu, 2, 0.0, host_blocks=host, disk_blocks=disk, eviction=eviction)
    live: dict[int, list] = {}  # request id -> [its spec, the tokens it holds]
    grower = 10**6  # a request without hashes: the decoding batch
    assert kv.allocate(grower, 1, spec=RequestSpec(id=grower, arrival_s=0.0, prompt_tokens=1, output_tokens=1))

    def spec(i, ids):
        return RequestSpec(id=i, arrival_s=0.0, prompt_tokens=4 * len(ids), output_tokens=1, block_hashes=tuple(ids),
                           hash_block_tokens=4)

    for i, (op, *args) in enumerate(ops):
        if op == "new":
            s = spec(i, args[0])
            hit = kv.prefix_hit(s, s.prompt_tokens)
            total = min(s.prompt_tokens, hit + args[1])  # a first chunk
            if kv.allocate(i, total, spec=s, cached_tokens=hit):
                live[i] = [s, total]
        elif op == "grow" and live:
            rid = sorted(live)[args[0] % len(live)]
            s, held = live[rid]
            total = min(s.prompt_tokens, held + args[1])  # the next chunk
            if kv.allocate(rid, total):
                live[rid][1] = total
        elif op == "free" and live:
            rid = sorted(live)[args[0] % len(live)]
            kv.free(rid)
            del live[rid]
        elif op == "check":
            s = spec(i, args[0])
            kv.prefix_hit(s, s.prompt_tokens)  # the waiting head's lookup
            n = args[1]
            if not kv.can_allocate(n) or kv.evicts_watched(n):
                continue
            chain = kv._last_hits[0]
            g = len(kv._hit_blocks(chain))
            before = (g, kv.tiers.run(chain, g))
            c = copy.deepcopy(kv)
            grown = c.held[grower]
            for k in range(n):  # a decode run's growth, block by block
                assert c.grow_one(grower, 2 * (grown + k) + 1)
            chain = c._last_hits[0]
            g = len(c._hit_blocks(chain))
            assert (g, c.tiers.run(chain, g)) == before


def test_a_decode_growth_that_extends_the_heads_host_hit_stops_the_run():
    """Two requests computed the same prompt side by side, so its first KV blocks are cached in
    one's table and its last in the other's. Freed, the first ones are evicted to host first:
    the waiting head's hit is then 2 blocks in host, and the GPU still holds the next ones. The
    growth that evicts them to host extends the head's hit to 4 blocks, so ``evicts_watched``
    must flag it (a longer hit can admit a head that the token budget refused)."""
    kv = TieredKVManager(7, 2, 0.0, host_blocks=8)
    a, b = (RequestSpec(id=i, arrival_s=0.0, prompt_tokens=8, output_tokens=1, block_hashes=(5, 6), hash_block_tokens=4)
            for i in (1, 2))
    grower = RequestSpec(id=3, arrival_s=0.0, prompt_tokens=1, output_tokens=1)
    assert kv.allocate(1, 4, spec=a)  # a's first chunk: its blocks 0-1 cache the prompt's first two
    assert kv.allocate(2, 8, spec=b)  # b computes all four: the first two are cached already, so it caches 2-3
    assert kv.allocate(3, 1, spec=grower)
    kv.free(1)
    kv.free(2)  # the queue: a's two (last first), then b's two (last first)
    for t in (3, 5, 7, 9):  # two plain blocks, then two evictions: the prompt's first two go to host
        assert kv.grow_one(3, t)
    head = RequestSpec(id=4, arrival_s=0.0, prompt_tokens=9, output_tokens=1, block_hashes=(5, 6, 7), hash_block_tokens=4)
    assert kv.prefix_hit(head, 9) == 4  # nothing on the GPU, two blocks in host
    assert kv.evicts_watched(1)  # (a block of the head's chain goes to host: flagged, the cheap sufficient test)
    assert kv.evicts_watched(2)
    for t in (11, 13):
        assert kv.grow_one(3, t)
    assert kv.prefix_hit(head, 9) == 8  # the growth moved the head's next two blocks to host


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 120)), max_size=6), st.integers(0, 400), st.booleans())
def test_a_lower_tier_run_is_the_plain_scans(spans, start, with_disk):
    """``LowerTiers.run`` (slices of growing length looked up in C) counts what a scan from
    ``start`` counts: the chain's hashes in host or disk up to the first in neither, on chains
    whose runs are long enough for several slices. ``spans``: (place, hashes) of consecutive
    stretches of the chain (0 host, 1 disk, 2 neither)."""
    from sim.kv.tiers import LowerTiers

    where = [w for w, k in spans for _ in range(k)]
    t = LowerTiers(host_blocks=1000, disk_blocks=1000)
    chain = list(range(100, 100 + len(where)))
    t.host.add([h for h, w in zip(chain, where) if w == 0 or (w == 1 and not with_disk)])
    t.disk.add([h for h, w in zip(chain, where) if w == 1 and with_disk])
    expect = 0
    for w in where[start:]:
        if w > 1:
            break
        expect += 1
    assert t.run(chain, start) == expect


@settings(max_examples=300, deadline=None)
@given(host=st.integers(1, 30), disk=st.sampled_from([0, 0, 12]), ops=st.lists(st.one_of(
    st.tuples(st.just("offload"), st.integers(0, 8), st.integers(1, 12)),  # a stretch of the chain
    st.tuples(st.just("load"), st.integers(0, 12), st.integers(1, 4)),
    st.tuples(st.just("supersede"), st.integers(0, 12), st.just(1)),
    st.tuples(st.just("run"), st.just(0), st.just(0))), max_size=60))
# each way out of the lower tiers for a hash the kept answer counted (random draws seldom line
# them up): a load, a supersede, host's drop without a disk, disk's drop
@example(host=30, disk=0, ops=[("offload", 0, 5), ("run", 0, 0), ("load", 2, 1), ("run", 0, 0)])
@example(host=30, disk=0, ops=[("offload", 0, 5), ("run", 0, 0), ("supersede", 1, 1), ("run", 0, 0)])
@example(host=5, disk=0, ops=[("offload", 0, 5), ("run", 0, 0), ("offload", 8, 1), ("run", 0, 0)])
@example(host=2, disk=12, ops=[("offload", 0, 5), ("run", 0, 0), ("offload", 5, 12), ("run", 0, 0)])
def test_a_kept_lower_tier_run_follows_every_change(host, disk, ops):
    """``LowerTiers.run`` resumes its last answer after a tier change unless a hash it counted
    left the lower tiers (a drop from the last tier, a load, a supersede): on random offloads
    (with host's and disk's drops), loads and supersedes, each answer is a fresh scan's."""
    from sim.kv.tiers import LowerTiers

    t = LowerTiers(host_blocks=host, disk_blocks=disk)
    chain = list(range(0, 48, 2))  # one lookup's chain, asked again and again
    for op, arg, k in ops:
        if op == "offload":
            t.offload([h for h in chain[arg:arg + k] if h not in t])
        elif op == "load":
            t.load([h for h in chain[arg:arg + k] if h in t])
        elif op == "supersede" and chain[arg] in t:
            t.supersede(chain[arg])
        elif op == "run":
            expect = 0
            for h in chain[arg:]:
                if h not in t:
                    break
                expect += 1
            assert t.run(chain, arg) == expect
