"""Decode runs that admit arrivals (``sim.flow``): the policy's plan beside decodes is its
``schedule``'s; whole runs give exactly what the engine gives without flows (and, through the
fast-forward tests, what single steps give), on the paths that end a flow too."""
import copy
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.engine as engine
import sim.flow as flow_mod
from conftest import tiny_config, uniform_workload
from policy_kit import make, req, step
from sim import lifecycle, simulate
from sim.cost.roofline import RooflineCostModel
from sim.request import Status
from sim.scheduler import REGISTRY
from sim.scheduler.base import BudgetScheduler, Scheduler
from test_fast_forward import assert_identical

FLOWING = sorted(n for n, cls in REGISTRY.items() if make(n, 64).admits_beside_decodes())


def test_which_policies_admit_beside_decodes():
    """Asked of each policy's own declarations, not of a list (a new policy that declares them
    is held to ``schedule``'s plan by the tests below): a policy flows when its decisions stay
    put during decode runs (``queue_static``), it plans no step ahead (``overlapped``), a decode
    token is never split, and it plans with ``BudgetScheduler``'s own step, or when it says so
    with an ``admits_beside_decodes`` of its own. The default policy flows (the speed of the
    default run depends on it); async scheduling does not."""
    from sim.scheduler.base import _PLANNED_HERE

    for name, cls in REGISTRY.items():
        s = make(name, 64)
        if "admits_beside_decodes" in {k for c in cls.__mro__ if c not in (BudgetScheduler, Scheduler) for k in vars(c)}:
            continue  # its own answer (none today), held to ``schedule`` by the tests below
        declared = (issubclass(cls, BudgetScheduler) and cls.queue_static and cls.chunk_keeps_single_tokens
                    and not s.overlapped()
                    and all(getattr(cls, m) is getattr(BudgetScheduler, m) for m in _PLANNED_HERE))
        assert s.admits_beside_decodes() == declared, name
    assert "vllm_v1" in FLOWING
    assert not make("vllm_v1", 64, async_scheduling=True).admits_beside_decodes()


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(FLOWING), blocks=st.integers(8, 200),
       first=st.lists(st.tuples(st.integers(1, 40), st.integers(2, 30)), min_size=0, max_size=6),
       later=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 30)), min_size=1, max_size=4),
       steps=st.integers(0, 12))
def test_plan_beside_decodes_is_schedules_plan(name, blocks, first, later, steps):
    """With every running request decoding, ``with_decodes(plan_beside_decodes(now))`` is the
    plan ``schedule(now)`` makes, and both leave the queues and the KV pool alike."""
    s = make(name, blocks)
    for i, (p, o) in enumerate(first):
        s.add(req(i, p, o))
    for j in range(steps):
        if not s.has_work():
            break
        step(s, float(j))
    if s.waiting or any(r.num_computed != r.prompt_tokens + r.num_generated - 1 or not r.num_generated
                        for r in s.running):
        return  # not every running request decodes
    # each running request's next token's blocks in place, as the flow grows them before planning
    for r in s.running:
        if not s.kv.allocate(r.id, r.num_computed + 1):
            return
    for i, (p, o) in enumerate(later):
        s.add(req(100 + i, p, o, arrival=float(steps)))
    a, b = copy.deepcopy(s), copy.deepcopy(s)
    now = float(steps)
    want = a.schedule(now)
    got = b.with_decodes(b.plan_beside_decodes(now))
    assert list(got.num_new_tokens.items()) == list(want.num_new_tokens.items())
    assert (got.preempted, got.cached_tokens, got.swapped_in, got.aborted) == (
        want.preempted, want.cached_tokens, want.swapped_in, want.aborted)
    assert [r.id for r in b.running] == [r.id for r in a.running]
    assert [r.id for r in b.waiting] == [r.id for r in a.waiting]
    assert b.kv.held == a.kv.held and b.kv.num_used == a.kv.num_used


@contextmanager
def flows_off():
    real = engine.enters
    engine.enters = lambda *a: False
    try:
        yield
    finally:
        engine.enters = real


@contextmanager
def patched(obj, name, value):
    real = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, real)


def with_and_without(cfg):
    on = simulate(cfg)
    with flows_off():
        off = simulate(cfg)
    return on, off


cases = st.fixed_dictionaries({
    "scheduler": st.sampled_from(sorted(REGISTRY)),
    "blocks": st.integers(30, 800),
    "block_size": st.sampled_from([4, 16]),
    "replicas": st.integers(1, 3),
    "rate": st.floats(1.0, 300.0),
    "n": st.integers(1, 60),
    "pmax": st.integers(1, 1200),
    "omax": st.integers(1, 150),
    "budget": st.sampled_from([64, 512, 8192]),
    "seed": st.integers(0, 1000),
    "flow_steps": st.sampled_from([3, 50, 4096]),
    "aggregates": st.booleans(),
    "rows": st.booleans(),  # step rows: each leg's columns and batch sizes too
})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_flows_are_exact_on_random_configs(p):
    """Flows on and off give the same request rows, step counts and summary: with prompts that
    need chunks (a plan that is not all whole prompts ends the flow), tight pools (a leg whose
    blocks may run out ends it), short flows (``FLOW_STEPS``) and the mixed step priced from its
    shape instead of aggregates (a cost model without ``beside_decodes``)."""
    sched = {"name": p["scheduler"]}
    if p["scheduler"] not in ("static", "vllm"):
        sched["max_num_batched_tokens"] = p["budget"]
    cfg = tiny_config(
        seed=p["seed"], cluster={"replicas": p["replicas"]}, scheduler=sched,
        kv={"num_gpu_blocks": p["blocks"], "block_size": p["block_size"]},
        workload=uniform_workload(p["rate"], p["n"], p["pmax"], p["omax"]),
        output={"step_records": p["rows"], "plots": False, "progress": False})
    no_aggregates = (lambda self, *a: None)
    with patched(flow_mod, "FLOW_STEPS", p["flow_steps"]), \
            patched(RooflineCostModel, "beside_decodes", RooflineCostModel.beside_decodes if p["aggregates"]
                    else no_aggregates):
        try:
            on, off = with_and_without(cfg)
        except Exception as e:  # a config the models refuse (e.g. a budget below the context) is no case here
            if type(e).__name__ in ("ConfigError", "CapacityError", "MemoryShortfall"):
                return
            raise
    assert_identical(on, off)


def test_flows_run_and_admit(monkeypatch):
    """On the million-request benchmark's workload the flows do the work: almost every admission
    is planned beside decodes, and each request is brought up to date once."""
    calls = {"plans": 0, "updates": 0}
    plan, update = BudgetScheduler.plan_beside_decodes, lifecycle.complete_decodes

    def counting_plan(self, now):
        calls["plans"] += 1
        return plan(self, now)

    def counting_update(*a):
        calls["updates"] += 1
        return update(*a)

    monkeypatch.setattr(BudgetScheduler, "plan_beside_decodes", counting_plan)  # (where the capability checks it)
    monkeypatch.setattr(lifecycle, "complete_decodes", counting_update)
    cfg = tiny_config(cluster={"replicas": 4}, output={"step_records": False, "plots": False, "progress": False})
    cfg["workload"] = {"rate": 20.0, "num_requests": 2000}  # conversation-like lengths: batches rarely empty
    on = simulate(cfg)
    assert on.summary["requests"]["completed"] == 2000
    assert calls["plans"] > 1500
    assert calls["updates"] < 2 * 2000
    monkeypatch.undo()
    with flows_off():
        off = simulate(cfg)
    assert_identical(on, off)


def test_flows_keep_step_rows():
    """With per-step rows (the default), flows run and their rows are the loop's, row for row:
    each leg's batch size changes at its finishes, and its last row sees the arrival."""
    cfg = tiny_config(cluster={"replicas": 2}, workload={"rate": 20.0, "num_requests": 200})
    seen = []
    real = flow_mod.Flow.run

    def spy(self, plan):
        seen.append(1)
        return real(self, plan)

    with patched(flow_mod.Flow, "run", spy):
        on = simulate(cfg)
    assert len(seen) > 20
    with flows_off():
        off = simulate(cfg)
    assert_identical(on, off)
    assert len(on.steps) == on.summary["sim"]["steps"] and on.steps["batch_size"].nunique() > 3


def test_a_request_finishing_with_its_prompt_leaves_at_once(tmp_path):
    """One output token: it finishes in the mixed step that admits it (never a member)."""
    rows = [(0.0, 200, 30), (0.05, 40, 1), (0.06, 40, 1), (0.2, 30, 10)]
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    cfg = tiny_config(workload={"trace": {"path": str(path)}},
                      output={"step_records": False, "plots": False, "progress": False})
    on, off = with_and_without(cfg)
    assert_identical(on, off)
    req_rows = on.requests.set_index("request_id")
    assert (req_rows["status"] == "finished").all()
    assert req_rows.loc[1, "finish_s"] == req_rows.loc[1, "first_token_s"]
    assert Status.FINISHED.value == "finished"
