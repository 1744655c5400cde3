"""Replicas that share no state run ahead of simpy's clock up to their next possible arrival
(``Engine.runs_ahead``): the results are exactly those of waiting for the clock at every step
and run, for every scheduler and KV policy."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny_config, uniform_workload
from sim import simulate
from sim.engine import Engine
from sim.scheduler import REGISTRY
from test_fast_forward import assert_identical


def waiting_always(monkeypatch, cfg):
    with monkeypatch.context() as m:
        m.setattr(Engine, "_wait", lambda self, *args: True)
        return simulate(cfg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scheduler=st.sampled_from(sorted(REGISTRY)), preemption=st.sampled_from(["recompute", "swap"]),
       prefix=st.booleans(), blocks=st.integers(30, 600), replicas=st.integers(1, 4), rate=st.floats(1.0, 300.0),
       n=st.integers(1, 60), pmax=st.integers(1, 500), omax=st.integers(1, 120), seed=st.integers(0, 1000))
def test_running_ahead_changes_nothing(monkeypatch, scheduler, preemption, prefix, blocks, replicas, rate, n, pmax,
                                       omax, seed):
    cfg = tiny_config(seed=seed, cluster={"replicas": replicas}, scheduler={"name": scheduler},
                      kv={"num_gpu_blocks": blocks, "preemption": preemption, "prefix_caching": prefix},
                      workload=uniform_workload(rate, n, pmax, omax))
    assert_identical(simulate(cfg), waiting_always(monkeypatch, cfg))


@pytest.mark.parametrize("cluster,extra", [
    ({"replicas": 3}, {}),
    ({"replicas": 3, "router": "least_loaded"}, {}),
    ({"replicas": 3}, {"faults": {"events": [{"kind": "straggler", "replica": 1, "at_s": 1.0, "duration_s": 2.0,
                                               "factor": 2.0}]}}),
])
def test_who_runs_ahead(cluster, extra):
    """Only a fixed pool of independent replicas runs ahead: a router that reads the replicas'
    load (no fast-forward at all then) or faults keep every replica on simpy's clock."""
    from sim.config import load_config

    eng = Engine(load_config(tiny_config(cluster=cluster, **extra)))
    assert eng.runs_ahead == (cluster.get("router", "round_robin") == "round_robin" and not extra)


def test_the_clock_ends_at_the_last_step():
    """A replica that ran ahead past the last arrival still moves simpy's clock to its last step's
    end before it stops: the simulated time is the last request's finish."""
    res = simulate(tiny_config(cluster={"replicas": 2}))
    assert res.summary["sim"]["simulated_s"] == pytest.approx(res.requests["finish_s"].max(), abs=0.0)
