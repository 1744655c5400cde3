"""The pieces that let a run scale: streamed request rows give the same summary (ITL within the
sketch's stated error), the ITL sketch's error bound, the request log's columns, and the
capabilities routers and KV managers declare instead of the engine testing their names."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.cluster import ROUTERS
from sim.errors import ConfigError
from sim.kv import KVManager, PrefixKVManager
from sim.metrics.steplog import ItlSketch
from sim.metrics.summary import weighted_dist


def test_streamed_run_gives_the_same_summary_and_rows(tmp_path):
    cfg = tiny_config(cluster={"replicas": 3}, workload=uniform_workload(30.0, 400, 300, 80),
                      output={"plots": False, "progress": False, "step_records": False})
    whole = simulate(cfg)
    streamed = simulate({**cfg, "output": {**cfg["output"], "stream": True, "stream_chunk_rows": 37}}, out=tmp_path)
    a, b = whole.summary, streamed.summary
    for key in ("requests", "ttft_s", "tpot_s", "e2e_s", "queue_s", "throughput", "goodput", "cost", "prefix_cache"):
        assert a[key] == b[key], key
    for q in ("p50", "p90", "p99"):
        assert b["itl_s"][q] == pytest.approx(a["itl_s"][q], rel=5e-4)
    assert b["itl_s"]["max"] == a["itl_s"]["max"]
    assert "sketch" in b["sim"]["stream"] and "stream" not in a["sim"]
    whole.requests.to_parquet(tmp_path / "whole.parquet", index=False)  # the same round trip through Parquet
    rows = pd.read_parquet(tmp_path / "requests.parquet").sort_values("request_id", ignore_index=True)
    ref = pd.read_parquet(tmp_path / "whole.parquet").sort_values("request_id", ignore_index=True)
    norm = lambda f: f.astype(object).where(f.notna(), None)  # noqa: E731  (all-null string columns read back typed)
    pd.testing.assert_frame_equal(norm(rows), norm(ref), check_exact=True)


def test_stream_without_an_output_folder_is_refused():
    with pytest.raises(ConfigError, match="output.stream"):
        simulate(tiny_config(output={"stream": True, "plots": False, "progress": False}))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 50.0), st.integers(1, 40)), min_size=1, max_size=300))
def test_itl_sketch_quantiles_within_its_error(pairs):
    sk = ItlSketch(buffer=17)  # small buffer: several folds
    for v, c in pairs:
        sk.add(v, c)
    exact = weighted_dist([v for v, _ in pairs], [c for _, c in pairs])
    got = sk.dist()
    assert got["max"] == exact["max"]
    assert got["mean"] == pytest.approx(exact["mean"], rel=1e-9)
    # each order statistic is within alpha/2 of the true one; interpolation keeps the bound
    for q in ("p50", "p90", "p99"):
        assert abs(got[q] - exact[q]) <= 0.0005 * exact[q] + 1e-12


def test_router_capabilities():
    assert ROUTERS["round_robin"].reads_load is False
    assert all(ROUTERS[n].reads_load for n in ("least_loaded", "power_of_two", "session_affinity"))
    assert all(ROUTERS[n].turns is None for n in ROUTERS if n != "round_robin")
    # round robin's turns are the replicas its route will pick, and reading them changes nothing
    state = {}
    ahead = ROUTERS["round_robin"].turns(state, 3)
    predicted = [next(ahead) for _ in range(7)]
    assert predicted == [ROUTERS["round_robin"](None, [0, 1, 2], state) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_kv_capabilities():
    # a prefix cache's refusals stay put while no hit block of the waiting head is evicted: it
    # names those blocks (``evicts_watched``), and the decode fast-forward stops before evicting one
    assert KVManager(8, 4).static_refusal and PrefixKVManager(8, 4).static_refusal
    assert not KVManager(8, 4).evicts_watched(8)
    kv = KVManager(3, 4, 0.0)
    assert kv.allocate(1, 4) and kv.grow_one(1, 5) and kv.held[1] == 2
    assert kv.grow_one(1, 9) and not kv.grow_one(1, 13)  # pool empty: refused, nothing changed
    assert kv.held[1] == 3 and kv.num_free == 0
    kv.free(1)
    assert kv.num_free == 3 and kv.allocate(2, 12) and kv.held == {2: 3}


def test_request_rows_are_in_arrival_order_with_every_request():
    res = simulate(tiny_config(cluster={"replicas": 2}, workload=uniform_workload(50.0, 120, 200, 50)))
    req = res.requests
    assert len(req) == 120 and np.all(np.diff(req["arrival_s"].to_numpy()) >= 0)
    assert sorted(req["request_id"]) == list(range(120))


@pytest.mark.parametrize("pmax, workers", [(400, 2), (9000, 2), (9000, 3)])
def test_workers_give_identical_results(pmax, workers):
    """The same rows and summary with the replicas shared over processes; ``pmax`` 9000: some
    prompts exceed the tiny model's context and are rejected before routing (shard 0 keeps them;
    the other shards skip their arrival times, as they skip other shards' arrivals)."""
    cfg = tiny_config(cluster={"replicas": 3}, workload=uniform_workload(40.0, 300, pmax, 60), kv={"num_gpu_blocks": 300})
    one = simulate(cfg)
    assert (one.summary["requests"]["rejected"] > 0) == (pmax > 400)
    two = simulate({**cfg, "engine": {"workers": workers}})
    pd.testing.assert_frame_equal(one.requests, two.requests, check_exact=True)
    pd.testing.assert_frame_equal(one.steps, two.steps, check_exact=True)
    a, b = dict(one.summary), dict(two.summary)
    a["sim"] = {k: v for k, v in a["sim"].items() if k != "wall_s"}
    b["sim"] = {k: v for k, v in b["sim"].items() if k not in ("wall_s", "workers")}
    assert a == b and "identical" in two.summary["sim"]["workers"]


@pytest.mark.parametrize("section,why", [({"cluster": {"replicas": 2, "router": "least_loaded"}}, "round_robin"),
                                         ({"cluster": {"replicas": 3, "prefill_replicas": 1}}, "disaggregated")])
def test_workers_refused_where_replicas_share_state(section, why):
    with pytest.raises(ConfigError, match=why):
        simulate(tiny_config(engine={"workers": 2}, **section))


def test_fast_forward_without_step_rows_is_exact_with_the_default_cost_model():
    """Without per-step rows, runs of a cost model with lookups (the kernel database where it
    is installed; else the roofline) are priced by totals alone: same summary, same
    out-of-range count, same requests as stepping one step at a time."""
    base = {"cluster": {"replicas": 2}, "workload": {"rate": 8, "num_requests": 120},
            "output": {"plots": False, "progress": False, "step_records": False}}
    on = simulate({**base, "engine": {"fast_forward": True}})
    off = simulate({**base, "engine": {"fast_forward": False}})
    pd.testing.assert_frame_equal(on.requests, off.requests, check_exact=True)
    a = {**on.summary, "sim": {k: v for k, v in on.summary["sim"].items() if k != "wall_s"}}
    b = {**off.summary, "sim": {k: v for k, v in off.summary["sim"].items() if k != "wall_s"}}
    assert a == b


@pytest.mark.parametrize("eviction", ["lru", "lfu", "fifo"])
def test_evicts_watched_names_the_next_evictions_and_changes_nothing(eviction):
    """Three blocks: two cached and freed (evicted in that order), one plain free block.
    Taking a block takes the plain one first; a second evicts the first cached block. Asking
    changes nothing: the evictions that follow are the same."""
    from sim.kv.prefix import CachedBlockPool

    pool = CachedBlockPool(3, eviction)
    a, b, c = pool.take(3)
    pool.register([a, b], [101, 102])
    pool.tick += 1
    pool.give([a])
    pool.tick += 1
    pool.give([b])
    pool.give([c])  # no hash: plain free, taken first
    pool.watched = {b: 1}
    assert not pool.evicts_any(0, pool.watched) and not pool.evicts_any(1, pool.watched)
    assert pool.evicts_any(2, pool.watched)  # a, then b
    pool.watched = {a: 0}
    assert pool.evicts_any(1, pool.watched)
    assert pool.take(1) == [c] and pool.take(2) == [a, b]  # the order peeked
