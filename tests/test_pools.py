"""Pools (``cluster.pools``): the shorthand gives the same runs; the KV transfer's exact time on
a hand-made case; conservation on random heterogeneous fleets; fast paths on == off; bad input
named by pool and key; per-pool autoscaling on a hand-made load curve."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_run_invariants, one_error, tiny_config, uniform_workload
from sim import simulate
from sim.catalog import get_hardware, get_model
from sim.cluster.autoscale import Target, decide, desired_replicas, pool_signal
from sim.config import build_config, load_config
from sim.cost.roofline import RooflineCostModel
from sim.engine import Engine
from sim.errors import CapacityError, ConfigError
from sim.metrics.records import requests_frame, steps_frame
from sim.scheduler import REGISTRY
from sim.types import BatchShape


def pool(name, hardware="h100-sxm", role="both", replicas=1, tp=1, **kw):
    return {"name": name, "hardware": hardware, "role": role, "replicas": replicas, "parallelism": {"tp": tp}, **kw}


def trace(tmp_path, rows, name="t.csv"):
    """A generic trace of (arrival_s, prompt, output) rows: exact arrival times."""
    path = tmp_path / name
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return {"trace": {"path": str(path)}}


def identical_runs(a, b):
    """The request rows, step rows and the whole summary (but the wall time) of two runs are equal."""
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    sa, sb = dict(a.summary), dict(b.summary)
    sa["sim"] = {k: v for k, v in sa["sim"].items() if k != "wall_s"}
    sb["sim"] = {k: v for k, v in sb["sim"].items() if k != "wall_s"}
    assert sa == sb


def same_run(a, b):
    """The request rows and step rows of two runs are equal, and so is every summary figure
    (but the ``pools`` block the pooled one adds, and the price's wording)."""
    assert a.requests.equals(b.requests)
    assert a.steps.equals(b.steps)
    sa, sb = dict(a.summary), dict(b.summary)
    for s in (sa, sb):
        s.pop("pools", None)
        s["sim"] = {k: v for k, v in s["sim"].items() if k != "wall_s"}
        s["cost"] = {k: v for k, v in s["cost"].items() if k not in ("price_source", "usd_per_gpu_hour", "usd",
                                                                      "usd_per_million_output_tokens")}
        s["requests"] = {k: v for k, v in s["requests"].items() if k not in ("lost", "lost_reasons")}
    assert sa == sb


# ------------------------------------------------------------------------------ the shorthand

@pytest.mark.parametrize("shorthand,pools", [
    ({"replicas": 3, "prefill_replicas": 1}, [pool("p", role="prefill"), pool("d", role="decode", replicas=2)]),
    ({"replicas": 2, "router": "round_robin"}, [pool("a", replicas=2)]),
])
def test_pools_written_as_the_shorthand_give_the_same_run(shorthand, pools):
    wl = uniform_workload(8.0, 60, 600, 80)
    short = simulate(tiny_config(cluster=shorthand, workload=wl))
    router = {"router": shorthand["router"]} if "router" in shorthand else {}
    pooled = simulate(tiny_config(cluster={"pools": pools, **router}, workload=wl))
    same_run(short, pooled)
    p = pooled.summary["pools"]
    assert sum(x["replicas"] for x in p.values()) == shorthand["replicas"]
    assert pooled.summary["cost"]["gpu_hours"] == pytest.approx(short.summary["cost"]["gpu_hours"], rel=1e-12)
    assert pooled.summary["cost"]["usd"] == pytest.approx(short.summary["cost"]["usd"], rel=1e-12)


def test_replicas_with_pools_is_their_total():
    cfg = build_config({"cluster": {"pools": [pool("a", replicas=2), pool("b", replicas=3)]}})
    assert cfg.cluster.replicas == 5
    with pytest.raises(ConfigError, match=r"cluster.replicas \(4\) differs from the pools' total \(5\)"):
        build_config({"cluster": {"replicas": 4, "pools": [pool("a", replicas=2), pool("b", replicas=3)]}})


# ------------------------------------------------------------------------- exact KV transfer

@pytest.mark.parametrize("pre,dec,link", [
    # a100 tp1 sends at its PCIe Gen4 x16 per direction (32 GB/s); h100 tp2 receives at 2 x 64 GB/s
    (pool("p", "a100-80gb", "prefill"), pool("d", "h100-sxm", "decode", tp=2), 32e9),
    # the decode end's own link, 10 GB/s, is the slower one
    (pool("p", "h100-sxm", "prefill", tp=2), pool("d", "a100-80gb", "decode", kv_link_gbps=10.0), 10e9),
])
def test_kv_transfer_runs_at_the_slower_ends_link(tmp_path, pre, dec, link):
    prompt, output = 1000, 4
    res = simulate(tiny_config(cluster={"pools": [pre, dec]}, workload=trace(tmp_path, [(0, prompt, output)])))
    r = res.requests.iloc[0]
    m = get_model("llama-3.1-8b")
    cp = RooflineCostModel(m, get_hardware(pre["hardware"]), tp=pre["parallelism"]["tp"])
    cd = RooflineCostModel(m, get_hardware(dec["hardware"]), tp=dec["parallelism"]["tp"])
    prefill = cp.step_time(BatchShape((prompt,), (0,), tp=pre["parallelism"]["tp"])).total
    transfer = prompt * m.kv_bytes_per_token() / link
    decodes = sum(cd.step_time(BatchShape((1,), (prompt + i,), tp=dec["parallelism"]["tp"])).total
                  for i in range(output - 1))
    assert r.ttft_s == pytest.approx(prefill, rel=1e-12)
    first_decode = res.steps[res.steps.replica == 1].start_s.iloc[0]
    assert first_decode == pytest.approx(prefill + transfer, rel=1e-12)  # the transfer, then the decode starts
    assert r.e2e_s == pytest.approx(prefill + transfer + decodes, rel=1e-9)
    assert r.replica == 1
    assert res.summary["pools"]["p"]["requests_handed_off"] == 1 and res.summary["pools"]["d"]["requests_served"] == 1


def test_a_pools_own_scheduler_limits_drive_its_replicas(tmp_path):
    """``cluster.pools[i].scheduler``: a decode pool of one sequence a step decodes two requests
    one after the other (the second waits for the first to finish), a prefill pool whose token
    budget holds one prompt prefills them one a step; the other pool keeps the top-level limits."""
    rows = [(0, 600, 5), (0, 600, 5)]
    def run(pre, dec):
        return simulate(tiny_config(cluster={"pools": [pool("p", role="prefill", **pre), pool("d", role="decode", **dec)]},
                                    workload=trace(tmp_path, rows)))
    free = run({}, {})
    capped = run({"scheduler": {"max_num_batched_tokens": 600}}, {"scheduler": {"max_num_seqs": 1}})
    batch = lambda res, rep: list(res.steps[res.steps.replica == rep].batch_size)
    assert batch(free, 0) == [2] and max(batch(free, 1)) == 2  # both prompts in one step, decoded together
    assert batch(capped, 0) == [1, 1] and batch(capped, 1) == [1] * 8  # 4 decode steps each, one at a time
    d = capped.steps[capped.steps.replica == 1]
    first, second = capped.requests.sort_values("e2e_s").itertuples()
    assert d.start_s.iloc[4] == pytest.approx(first.e2e_s, rel=1e-12)  # the second decodes once the first ends
    eng = Engine(load_config(tiny_config(cluster={"pools": [pool("p", role="prefill"),
                                                            pool("d", role="decode", scheduler={"max_num_seqs": 3})]})))
    assert [r.scheduler.knobs.max_num_seqs for r in eng.replicas] == [256, 3]


def test_kv_transfer_gbps_overrides_both_ends(tmp_path):
    prompt = 1000
    pools = [pool("p", "a100-80gb", "prefill"), pool("d", "h100-sxm", "decode", kv_link_gbps=1.0)]
    res = simulate(tiny_config(cluster={"pools": pools, "kv_transfer_gbps": 100.0},
                               workload=trace(tmp_path, [(0, prompt, 3)])))
    m = get_model("llama-3.1-8b")
    gap = res.steps[res.steps.replica == 1].start_s.iloc[0] - res.requests.iloc[0].ttft_s
    assert gap == pytest.approx(prompt * m.kv_bytes_per_token() / 100e9, rel=1e-9)


# ---------------------------------------------------------------- conservation, random fleets

GPUS = ["h100-sxm", "a100-80gb", "h200-sxm"]
a_pool = st.fixed_dictionaries({"hardware": st.sampled_from(GPUS), "tp": st.sampled_from([1, 2]),
                                "replicas": st.integers(1, 2)})
def fleet_strategy(a_pool):
    """Random fleets: up to two prefill pools, one or two decode pools and up to one pool of both
    roles (each drawn by ``a_pool``), with a scheduler, router, KV pool and workload."""
    return st.fixed_dictionaries({
        "prefill": st.lists(a_pool, min_size=0, max_size=2),
        "decode": st.lists(a_pool, min_size=1, max_size=2),
        "both": st.lists(a_pool, min_size=0, max_size=1),
        "scheduler": st.sampled_from(sorted(REGISTRY)),
        "router": st.sampled_from(["round_robin", "least_loaded", "power_of_two"]),
        "preemption": st.sampled_from(["recompute", "swap"]),
        "blocks": st.integers(60, 400),
        "rate": st.floats(1.0, 100.0),
        "n": st.integers(1, 40),
        "pmax": st.integers(1, 500),
        "omax": st.integers(1, 60),
        "seed": st.integers(0, 1000),
    })


fleets = fleet_strategy(a_pool)


def fleet_pools(p, make=lambda name, q, role: pool(name, q["hardware"], role, q["replicas"], q["tp"])) -> list[dict]:
    """The ``cluster.pools`` of a drawn fleet (``make(name, drawn pool, role)`` writes one); without
    a prefill pool the decode pools serve as both."""
    out = [make(f"{role}{i}", q, role) for role in ("prefill", "decode", "both")
           for i, q in enumerate(p[role] if (role != "decode" or p["prefill"]) else [])]
    return out or [make(f"both{i}", q, "both") for i, q in enumerate(p["decode"])]


def run_fleet(p, pools: list[dict], make_config):
    """Run drawn fleet ``p`` with ``pools`` (``make_config``: the base config builder) and check
    what every fleet keeps: arrived = completed + rejected, the run's invariants, each request
    prefilled on at most one entry replica and decoded on at most one decode replica, its KV moved
    at most once and only from the replica that prefilled it, a finished request on a replica that
    ran it (a decode replica exactly when its KV moved), and nothing left in flight. Returns
    (engine, output, request rows, the (request, replica) hand-offs, each replica's role)."""
    cfg = load_config(make_config(
        seed=p["seed"], cluster={"pools": pools, "router": p["router"]}, scheduler={"name": p["scheduler"]},
        kv={"num_gpu_blocks": p["blocks"], "preemption": p["preemption"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"])))
    eng = Engine(cfg, record_plans=True)
    moved = []
    if eng.disagg is not None:
        hand_off = eng.disagg.hand_off
        eng.disagg.hand_off = lambda rep, r: (moved.append((r.id, rep.idx)), hand_off(rep, r))[1]
    out = eng.run()
    assert_run_invariants(eng, out)
    req = requests_frame(out)
    assert len(req) == p["n"] == (req.status == "finished").sum() + (req.status == "rejected").sum()
    role = [rep.role for rep in eng.replicas]
    touched: dict[int, set] = {}
    for idx, _, ids, _ in eng.plans:
        for rid in ids:
            touched.setdefault(rid, set()).add(idx)
    ids = [rid for rid, _ in moved]
    assert len(ids) == len(set(ids))  # KV moved at most once
    moved_from = dict(moved)
    for r in req.itertuples():
        where = touched.get(r.request_id, set())
        entry = {i for i in where if role[i] != "decode"}
        decode = {i for i in where if role[i] == "decode"}
        assert len(entry) <= 1 and len(decode) <= 1  # prefilled on one replica, decoded on one
        if decode:
            assert r.request_id in moved_from and moved_from[r.request_id] in entry
        if r.status == "finished":
            assert r.replica in where
            assert (role[r.replica] == "decode") == (r.request_id in moved_from)
    assert eng.disagg is None or eng.disagg.in_flight == 0 and not eng.disagg.heading
    return eng, out, req, moved, role


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets)
def test_conservation_on_random_heterogeneous_fleets(p):
    """Every request is prefilled on one entry replica, decoded on one replica, its KV moved at
    most once (exactly once when a prefill replica gave it a first token and it goes on); arrived
    = completed + rejected; every block back; the pools block counts what happened."""
    pools = fleet_pools(p)
    eng, out, req, moved, role = run_fleet(p, pools, tiny_config)
    for r in req.itertuples():
        if r.status == "finished" and r.request_id not in dict(moved):
            assert role[r.replica] == "both" or r.generated_tokens == 1
    from sim.metrics.summary import pools_block
    from sim.metrics.columns import FrameColumns

    block = pools_block(out, FrameColumns(req), max(out.simulated_s - req.arrival_s.min(), 1e-12))
    handed = sum(b.get("requests_handed_off", 0) for b in block.values())
    assert handed == len(moved)
    assert sum(b["requests_served"] for b in block.values()) == (req.status == "finished").sum() + handed
    for b in block.values():
        assert b["busy_share"] is None or 0 <= b["busy_share"] <= 1 + 1e-6  # (steps rounded to whole ns)


# ------------------------------------------------------------------------- fast paths

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_paths_on_equal_off_on_a_heterogeneous_fleet(seed):
    pools = [pool("h100", "h100-sxm", replicas=2), pool("a100", "a100-80gb"), pool("h200", "h200-sxm", tp=2)]
    runs = []
    for ff in (True, False):
        cfg = tiny_config(seed=seed, cluster={"pools": pools, "router": "round_robin"}, engine={"fast_forward": ff},
                          workload=uniform_workload(30.0, 150, 800, 120))
        assert Engine(load_config(cfg)).fast_forward is ff  # (the fast paths do run with pools)
        runs.append(simulate(cfg))
    on, off = runs
    identical_runs(on, off)
    kv = on.steps.groupby("replica").kv_usage.max()
    assert set(on.steps.replica) == {0, 1, 2, 3} and (kv <= 1).all()


# ------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("pools,extra,message", [
    ([pool("a"), pool("b", "h100-sxx")], {}, "cluster.pools[1].hardware: unknown hardware 'h100-sxx'"),
    ([pool("p", role="prefill"), pool("d", role="decode", kv_link_gbps=0)], {},
     "cluster.pools[1].kv_link_gbps: Input should be greater than 0"),
    ([pool("p", role="prefill"), pool("d", role="decode")], {"kv_transfer_gbps": -1},
     "cluster.kv_transfer_gbps: Input should be greater than 0"),
    ([pool("a"), pool("d", role="decode")], {}, "cluster.pools[1].role: a decode pool (d) needs a prefill pool"),
    ([pool("p", role="prefill")], {}, "cluster.pools[0].role: a prefill pool (p) needs a decode pool"),
    ([pool("a"), pool("a")], {}, "cluster.pools[1].name: 'a' is already pool 0's name"),
    ([pool("a"), pool("b", tp=3)], {}, "cluster.pools[1].parallelism (b): tp=3 does not divide"),
    ([pool("a"), pool("b", "a100-80gb", dtype="fp8")], {}, "cluster.pools[1].dtype (b): fp8"),
    ([pool("p", role="prefill"), pool("d", role="decode", scheduler={"max_num_seqs": 0})], {},
     "cluster.pools[1].scheduler.max_num_seqs: Input should be greater than or equal to 1"),
    ([pool("p", role="prefill", scheduler={"max_num_batched_tokens": -5}), pool("d", role="decode")], {},
     "cluster.pools[0].scheduler.max_num_batched_tokens: Input should be greater than or equal to 1"),
    ([pool("p", role="prefill"), pool("d", role="decode", scheduler={"max_batch": 4})], {},
     "cluster.pools[1].scheduler.max_batch"),
])
def test_bad_pools_are_one_line_naming_the_pool_and_key(tmp_path, capsys, tripwire, pools, extra, message):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"pools": pools, **extra}}))
    err = one_error(capsys, ["run", str(path), "--quiet"])
    assert message in err


def test_a_pool_whose_model_does_not_fit_its_gpu_is_named(tmp_path, capsys, tripwire):
    """Llama-3.1-70B in bf16 (141 GB of weights) on one 48 GB L40S: named before simulating."""
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": "llama-3.1-70b", "cluster": {
        "pools": [pool("big", "h200-sxm", tp=4), pool("small", "l40s")]}}))
    err = one_error(capsys, ["run", str(path), "--quiet"])
    assert "cluster.pools[1].hardware (small): " in err and "does not fit" in err


# ------------------------------------------------------------------------- autoscaling

def test_desired_replicas_on_a_hand_made_signal_curve():
    """The decision alone: a prefill-token curve sampled every interval, target 4,000 tokens per
    replica within [1, 4]: ceil(signal / 4,000) clamped; scale-down drains the busy replica with
    the fewest requests when none is idle."""
    t = Target(1, 4, 4000.0)
    curve = [0, 3000, 4001, 12000, 30000, 9000, 100]
    assert [desired_replicas(x, t) for x in curve] == [1, 1, 2, 3, 4, 3, 1]
    assert decide(12000, 1, [], t) .add == 2
    d = decide(100, 3, [], t, busy={0: 5, 1: 2, 2: 7})
    assert d.drain == (1, 0) and not d.remove and not d.add
    d = decide(30000, 3, [], t, busy={0: 5, 1: 2}, draining=[2])
    assert d.undrain == (2,) and d.add == 1


class _Q:
    def __init__(self, prompt, computed):
        self.prompt_tokens, self.num_computed = prompt, computed


class _Rep:
    def __init__(self, waiting, running, used, blocks=100, up=True):
        from types import SimpleNamespace

        self.scheduler = SimpleNamespace(waiting=waiting, running=running)
        self.kv = SimpleNamespace(num_used=used, num_blocks=blocks)
        self.up = up


def test_pool_signals_on_hand_made_replicas():
    a = _Rep([_Q(1000, 0), _Q(500, 200)], [_Q(300, 300)], used=50)
    b = _Rep([], [_Q(800, 512), _Q(100, 101)], used=25, up=False)  # draining: its load counts, its KV does not
    pending = [_Q(400, 0)]
    assert pool_signal("outstanding", [a, b], pending) == 6
    assert pool_signal("prefill_tokens", [a, b], pending) == 1000 + 300 + 0 + 288 + 0 + 400
    assert pool_signal("running", [a, b], pending) == 3
    assert pool_signal("kv_usage", [a, b], pending) == 0.5


def test_pool_autoscaler_scales_up_and_drains_at_exact_times(tmp_path):
    """One pool of one H100, outstanding requests, target 1 per replica, decisions every 1 s,
    cold start 0.5 s, within [1, 3]. Three long requests arrive at t = 0: the decision at 1 s
    sees 3 outstanding and provisions 2 replicas (serving at 1.5 s; the three requests stay on
    replica 0). Two short requests at 2 s and 2.1 s go to the new replicas (least loaded). The
    long ones keep 3 outstanding until they finish: the pool stays at 3; the first decision
    after they finish finds 0 outstanding and releases the two idle replicas (highest first);
    a last request at 40 s is served by replica 0."""
    rows = [(0, 100, 1500)] * 3 + [(2.0, 100, 20), (2.1, 100, 20), (40.0, 100, 5)]
    pools = [pool("a", autoscale={"signal": "outstanding", "target": 1, "interval_s": 1.0, "cold_start_s": 0.5,
                                  "min_replicas": 1, "max_replicas": 3})]
    cfg = load_config(tiny_config(cluster={"pools": pools, "router": "least_loaded"},
                                  workload=trace(tmp_path, rows)))
    eng = Engine(cfg)
    out = eng.run()
    assert_run_invariants(eng, out)
    req = requests_frame(out)
    fleet = eng.dynamics.pool_fleets["a"]
    assert fleet.provisioned == {0: 0.0, 1: 1.0, 2: 1.0}
    assert list(req.replica) == [0, 0, 0, 1, 2, 0]
    assert (req.first_scheduled_s[3:5] == [2.0, 2.1]).all()
    short_end = req.finish_s[3:5].max()
    long_end = req.finish_s[:3].max()
    assert short_end < long_end
    # the long requests keep 3 outstanding until they finish: no scale-down before that decision
    release = math.ceil(long_end)
    assert fleet.released == {1: float(release), 2: float(release)}
    series = [(t, p) for t, p, _ in fleet.series]
    assert series[:3] == [(0.0, 1), (1.0, 3), (1.5, 3)]
    s = simulate(cfg).summary["pools"]["a"]
    assert s["autoscale"]["replicas_started"] == 3
    gpu_h = (out.simulated_s + 2 * (release - 1.0)) / 3600
    assert s["gpu_hours"] == pytest.approx(gpu_h, rel=1e-12)


def test_decode_pool_scales_on_kv_usage_and_a_retiring_replica_takes_no_transfer(tmp_path):
    """A prefill pool and a decode pool of one replica scaled on KV usage (target 0.3 of the
    pool per replica, decisions every 0.5 s, no cold start) with a KV pool of 2,000 blocks: the
    load fills the first replica's KV, a second decode replica is added at a decision, receives
    transfers only once it serves, and every request finishes."""
    rows = [(0.01 * i, 800, 400) for i in range(40)]
    pools = [pool("p", role="prefill"),
             pool("d", role="decode", autoscale={"signal": "kv_usage", "target": 0.3, "interval_s": 0.5,
                                                 "cold_start_s": 0.0, "min_replicas": 1, "max_replicas": 2})]
    cfg = load_config(tiny_config(cluster={"pools": pools}, kv={"num_gpu_blocks": 2000},
                                  workload=trace(tmp_path, rows)))
    eng = Engine(cfg)
    out = eng.run()
    assert_run_invariants(eng, out)
    fleet = eng.dynamics.pool_fleets["d"]
    assert 2 in fleet.provisioned  # the decode pool grew (replica 2: after the prefill one and the first decode)
    t_add = fleet.provisioned[2]
    assert t_add > 0 and t_add % 0.5 == pytest.approx(0, abs=1e-9)
    steps = steps_frame(out)
    assert steps[steps.replica == 2].start_s.min() >= t_add
    req = requests_frame(out)
    assert (req.status == "finished").all() and set(req.replica) == {1, 2}
    assert eng.replicas[2].role == "decode" and eng.replicas[2] in eng.disagg.decode_pool


def test_pool_autoscaler_drains_a_busy_replica_before_retiring_it(tmp_path):
    """Three replicas, target 2 outstanding each, decisions every 1 s, within [1, 3]. Six
    requests at t = 0 go 0, 1, 2, 0, 1, 2 (least loaded); the two short ones (on replicas 0 and
    1) finish before 1 s, leaving 4 outstanding and no idle replica: the decision at 1 s drains
    replica 1 (the fewest outstanding, highest index first). A request at 3 s skips it; it is
    released at the first decision after its last request finishes, and paid for until then."""
    rows = [(0, 100, 2000), (0, 100, 800), (0, 100, 2000), (0, 100, 20), (0, 100, 20), (0, 100, 2000), (3.0, 100, 5)]
    pools = [pool("a", replicas=3, autoscale={"target": 2, "interval_s": 1.0, "cold_start_s": 0.0,
                                              "min_replicas": 1, "max_replicas": 3})]
    cfg = load_config(tiny_config(cluster={"pools": pools, "router": "least_loaded"}, workload=trace(tmp_path, rows)))
    eng = Engine(cfg)
    out = eng.run()
    assert_run_invariants(eng, out)
    req = requests_frame(out)
    assert list(req.replica) == [0, 1, 2, 0, 1, 2, 0]
    assert req.finish_s[3:5].max() < 1.0 < req.finish_s[1]
    fleet = eng.dynamics.pool_fleets["a"]
    assert fleet.drained == 1 and fleet.released == {1: float(math.ceil(req.finish_s[1]))}
    assert (1.0, 3, 3) in fleet.series  # drained at 1 s: still provisioned and counted as serving until released
    assert fleet.series[-1] == (float(math.ceil(req.finish_s[1])), 2, 2)


def test_a_tiered_kv_cache_with_pools_is_refused_by_key():
    """Each pool's KV blocks have their own size: a host tier sized for one is not simulated
    with pools yet, and the refusal names the keys."""
    from sim.config import build_config
    from sim.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        build_config({"kv": {"prefix_caching": True, "cpu_offload_gib": 64},
                      "cluster": {"pools": [{"name": "a", "hardware": "h100-sxm"}]}})
    assert "cluster.pools" in str(e.value) and "kv.cpu_offload_gib" in str(e.value)


# ------------------------------------------------------------------------ speculative decoding

def test_a_decode_pool_verifies_drafts_priced_on_its_own_gpus(tmp_path):
    """``speculative`` with pools: output 9, k 3, acceptance 1 on an H100 TP 1 prefill pool and an
    H100 TP 2 decode pool. The prefill replica's one step gives token 1; on the decode replica the
    transferred request's first step is its admission (one token: drafts go with running decodes),
    then two verifications of 1 + 3 tokens (4 emitted, then the 3 the output has left).
    Each verification costs the decode pool's step plus k EAGLE draft passes priced on the decode
    pool's model (a decoder layer and the LM head of one sequence over its context)."""
    prompt, output, k = 100, 9, 3
    pools = [pool("p", "h100-sxm", "prefill"), pool("d", "h100-sxm", "decode", tp=2)]
    spec = {"method": "eagle", "num_speculative_tokens": k, "acceptance": 1.0}
    res = simulate(tiny_config(cluster={"pools": pools}, speculative=spec, workload=trace(tmp_path, [(0, prompt, output)])))
    r = res.requests.iloc[0]
    pre, dec = res.steps[res.steps.replica == 0], res.steps[res.steps.replica == 1]
    assert r.generated_tokens == output and r.replica == 1
    assert list(pre.num_tokens) == [prompt] and list(dec.num_tokens) == [1, k + 1, k + 1]
    m = get_model("llama-3.1-8b")
    cd = RooflineCostModel(m, get_hardware("h100-sxm"), tp=2)
    head = cd.gemm("lm_head", 1)

    def draft(done):  # k passes over the request's context (its computed tokens and the new one)
        st = cd.decode_step(1, done + 1, done + 1)
        return k * ((st.total - st.cpu - head) / m.num_layers + head)
    want = [cd.step_time(BatchShape((1,), (prompt,), tp=2)).total,
            cd.step_time(BatchShape((k + 1,), (prompt + 1,), tp=2)).total + draft(prompt + 1),
            cd.step_time(BatchShape((k + 1,), (prompt + 1 + k + 1,), tp=2)).total + draft(prompt + 1 + k + 1)]
    assert list(dec.duration_s) == pytest.approx(want, rel=1e-12)
    sp = res.summary["speculative"]
    assert (sp["verifications"], sp["draft_tokens"], sp["accepted_draft_tokens"]) == (2, 2 * k, 2 * k)


def test_drafts_never_accepted_on_a_decode_pool_decode_a_token_a_step(tmp_path):
    """Acceptance 0, k 2, output 6: after the admission step (token 2) each verification of 1 + 2
    tokens emits one token (four of them); the prefill pool's replicas get no draft tokens."""
    pools = [pool("p", role="prefill"), pool("d", role="decode")]
    res = simulate(tiny_config(cluster={"pools": pools}, workload=trace(tmp_path, [(0, 50, 6)]),
                               speculative={"method": "ngram", "num_speculative_tokens": 2, "acceptance": 0.0}))
    dec = res.steps[res.steps.replica == 1]
    assert list(res.steps[res.steps.replica == 0].num_tokens) == [50] and list(dec.num_tokens) == [1, 3, 3, 3, 3]
    assert res.requests.iloc[0].generated_tokens == 6 and res.summary["speculative"]["verifications"] == 4
    eng = Engine(load_config(tiny_config(cluster={"pools": pools}, speculative={"method": "mtp", "acceptance": 0.8})))
    assert [rep.scheduler.spec_tokens for rep in eng.replicas] == [0, 3]


def test_a_draft_model_with_pools_is_one_line_naming_the_key(capsys, tmp_path):
    import json

    cfg = tiny_config(model="llama-3.1-70b", parallelism={"tp": 4},
                      cluster={"pools": [pool("p", role="prefill", tp=4), pool("d", role="decode", tp=4)]},
                      speculative={"method": "draft_model", "draft_model": "llama-3.1-8b", "acceptance": 0.7})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    line = one_error(capsys, ["run", str(path), "--quiet"])
    assert "speculative.draft_model" in line and "cluster.pools" in line
