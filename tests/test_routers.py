"""Routers: exact choices on hand-made loads, and their effect in whole simulations."""
import numpy as np

from conftest import tiny_config
from sim import simulate
from sim.cluster import ROUTERS, ReplicaLoad
from sim.types import RequestSpec

SPEC = RequestSpec(id=0, arrival_s=0.0, prompt_tokens=10, output_tokens=5)


def loads(*counts):
    return [ReplicaLoad(w, r, 0.0) for w, r in counts]


def test_least_loaded_picks_fewest_outstanding_ties_lowest():
    assert ROUTERS["least_loaded"](SPEC, loads((2, 3), (0, 4), (1, 3)), {}) == 1
    assert ROUTERS["least_loaded"](SPEC, loads((1, 1), (0, 2)), {}) == 0


def test_power_of_two_picks_the_less_loaded_of_its_sample():
    state = {"rng": np.random.default_rng(0)}
    ls = loads((0, 0), (9, 9), (9, 9), (9, 9))
    picks = [ROUTERS["power_of_two"](SPEC, ls, state) for _ in range(200)]
    # replica 0 wins whenever it is sampled (probability 1/2 for 4 replicas), never loses to a busier one
    assert 0.35 < picks.count(0) / 200 < 0.65
    assert ROUTERS["power_of_two"](SPEC, loads((5, 5)), state) == 0


def test_session_affinity_keeps_sessions_together():
    state = {}
    a = RequestSpec(id=1, arrival_s=0, prompt_tokens=1, output_tokens=1, session_id="s1")
    first = ROUTERS["session_affinity"](a, loads((3, 3), (0, 0)), state)
    assert first == 1
    assert ROUTERS["session_affinity"](a, loads((0, 0), (9, 9)), state) == 1


def test_least_loaded_beats_round_robin_on_tail_latency():
    wl = {"rate": 40.0, "num_requests": 400, "prompt": {"kind": "lognormal", "median": 800, "sigma": 1.0, "max": 8000},
          "output": {"kind": "lognormal", "median": 100, "sigma": 1.2, "max": 2000}}
    v0 = {"name": "vllm"}  # prefill-first: queueing behind a busy replica shows in the end-to-end tail
    rr = simulate(tiny_config(scheduler=v0, cluster={"replicas": 4, "router": "round_robin"}, workload=wl)).summary
    ll = simulate(tiny_config(scheduler=v0, cluster={"replicas": 4, "router": "least_loaded"}, workload=wl)).summary
    assert ll["e2e_s"]["p99"] < rr["e2e_s"]["p99"]


def test_session_affinity_in_a_simulation():
    wl = {"rate": 4.0, "num_requests": 200, "sessions": {"turns": {"kind": "uniform", "min": 2, "max": 5}}}
    res = simulate(tiny_config(cluster={"replicas": 3, "router": "session_affinity"}, workload=wl))
    per_session = res.requests.dropna(subset=["session_id"]).groupby("session_id")["replica"].nunique()
    assert len(per_session) > 10 and (per_session == 1).all()
