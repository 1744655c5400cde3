"""Closed-loop clients: one outstanding request per client, and Little's law holds."""
import pytest

from conftest import tiny_config
from sim import simulate


def run(clients, think_s, n=300, **kw):
    cfg = tiny_config(workload={"closed_loop": {"clients": clients, "think_time_s": think_s, **kw}, "num_requests": n})
    return simulate(cfg)


def test_each_client_waits_for_its_response_before_the_next_request():
    res = run(5, 0.2)
    req = res.requests
    assert len(req) == 300 and (req.status == "finished").all()
    assert req.session_id.nunique() == 5
    for _, g in req.sort_values("arrival_s").groupby("session_id"):
        arrivals, finishes = g.arrival_s.to_numpy(), g.finish_s.to_numpy()
        assert (arrivals[1:] >= finishes[:-1] - 1e-12).all()


def test_fixed_think_time_is_exact():
    req = run(1, 0.25, n=10, think="fixed").requests.sort_values("arrival_s")
    gaps = req.arrival_s.to_numpy()[1:] - req.finish_s.to_numpy()[:-1]
    assert gaps == pytest.approx([0.25] * 9)
    assert req.arrival_s.iloc[0] == pytest.approx(0.25)


def test_littles_law_clients_equal_throughput_times_cycle_time():
    res = run(8, 0.5, n=400)
    req = res.requests
    x = len(req) / (req.finish_s.max() - 0.0)
    cycle = req.e2e_s.mean() + 0.5
    assert x * cycle == pytest.approx(8, rel=0.1)


def test_more_clients_more_throughput_until_saturation():
    tput = [run(c, 0.5).summary["throughput"]["requests_per_s"] for c in (1, 4, 16)]
    assert tput[0] < tput[1] < tput[2]


def test_closed_loop_rejects_trace_combination():
    from sim.config import build_config
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="closed_loop cannot be combined with trace"):
        build_config({"workload": {"closed_loop": {"clients": 2}, "trace": {"path": "x.csv"}}})
