"""A trace without a ``max_output_tokens`` column, under a policy that reserves by the output
limit (orca, trtllm's GUARANTEED_NO_EVICT, the ``max_output`` predictor): each request's limit
is the trace's longest output within the context, not the whole context."""
import numpy as np

from conftest import tiny_config
from sim import simulate
from sim.config import load_config
from sim.scheduler import REGISTRY
from sim.workload import build_workload


def write(tmp_path, rows, extra=""):
    path = tmp_path / "t.csv"
    head = "arrival_s,prompt_tokens,output_tokens" + (",max_output_tokens" if extra else "")
    path.write_text(head + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def test_the_trace_s_longest_output_is_the_limit(tmp_path):
    cfg = load_config(tiny_config(workload={"trace": {"path": write(tmp_path, [(0.0, 100, 5), (0.1, 8000, 50),
                                                                                  (0.2, 30, 20)])}}))
    wl = build_workload(cfg.workload, max_context=8050, rng=np.random.default_rng(0), trace_output_bound=True)
    specs = list(wl)
    assert [s.max_output_tokens for s in specs] == [50, 50, 50]  # (8000 + 50 fits 8050 exactly)
    assert wl.info["output_bound"] == 50
    wl = build_workload(cfg.workload, max_context=8040, rng=np.random.default_rng(0), trace_output_bound=True)
    assert [s.max_output_tokens for s in wl][1] == 40  # within the context
    plain = build_workload(cfg.workload, max_context=8050, rng=np.random.default_rng(0))
    assert [s.max_output_tokens for s in plain] == [None, None, None]


def test_a_trace_s_own_limits_are_kept(tmp_path):
    cfg = load_config(tiny_config(workload={"trace": {"path": write(tmp_path, [(0.0, 100, 5, 7), (0.1, 80, 50, 64)],
                                                                    extra="x")}}))
    wl = build_workload(cfg.workload, max_context=8192, rng=np.random.default_rng(0), trace_output_bound=True)
    assert [s.max_output_tokens for s in wl] == [7, 64]


def test_which_policies_read_the_limit():
    knobs = lambda name, **k: REGISTRY[name].Knobs(**k)  # noqa: E731
    assert REGISTRY["orca"].reads_output_limit(knobs("orca"))
    assert not REGISTRY["orca"].reads_output_limit(knobs("orca", reserve="context"))
    assert REGISTRY["trtllm"].reads_output_limit(knobs("trtllm"))
    assert not REGISTRY["trtllm"].reads_output_limit(knobs("trtllm", capacity_scheduler_policy="MAX_UTILIZATION"))
    assert REGISTRY["sjf"].reads_output_limit(knobs("sjf", predictor="max_output"))
    assert not REGISTRY["sjf"].reads_output_limit(knobs("sjf"))
    assert not REGISTRY["vllm_v1"].reads_output_limit(knobs("vllm_v1"))


def test_orca_on_a_trace_reserves_far_less_than_the_context(tmp_path):
    """Orca serves a trace's requests many at a time once each reserves prompt + the trace's
    longest output, instead of the model's whole context each."""
    rng = np.random.default_rng(3)
    rows = [(round(0.05 * i, 3), int(rng.integers(50, 400)), int(rng.integers(5, 60))) for i in range(200)]
    cfg = tiny_config(model="llama-2-7b", scheduler={"name": "orca"}, kv={"num_gpu_blocks": 600},
                      workload={"trace": {"path": write(tmp_path, rows)}})
    res = simulate(cfg)
    ctx = simulate({**cfg, "scheduler": {"name": "orca", "reserve": "context"}})
    assert res.summary["workload"]["output_bound"] == max(o for _, _, o in rows)
    assert res.summary["ttft_s"]["p99"] < ctx.summary["ttft_s"]["p99"] / 5
