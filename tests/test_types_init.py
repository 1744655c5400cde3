"""``sim.types.fast_init``: the hand-built ``__init__`` of the frozen values behaves as the
dataclass-generated one (same values, defaults, signature; frozen, comparable, hashable,
picklable, ``dataclasses.replace``-able)."""
import dataclasses
import inspect
import pickle

import pytest

from sim.types import BatchShape, RequestSpec, StepPlan, StepTime, fast_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Generated:
    a: int
    b: float = 1.5
    c: tuple | None = None


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Fast:
    a: int
    b: float = 1.5
    c: tuple | None = None


def test_same_signature_and_values_as_the_generated_init():
    assert str(inspect.signature(_Fast)) == str(inspect.signature(_Generated))
    assert repr(_Fast(1)).replace("_Fast", "X") == repr(_Generated(1)).replace("_Generated", "X")
    assert dataclasses.astuple(_Fast(2, c=(3,))) == dataclasses.astuple(_Generated(2, c=(3,)))


@pytest.mark.parametrize("value", [
    RequestSpec(7, 0.25, 100, 20, None, (1, 2), 16, "s", 2, "gold", "t"),
    RequestSpec(id=3, arrival_s=1.0, prompt_tokens=5, output_tokens=6),
    StepTime(1.0, 0.5, source="profiled", out_of_range=2),
    BatchShape((3, 1), (0, 9), 1, 2, tp=2),
])
def test_frozen_values_keep_their_contracts(value):
    cls = type(value)
    again = cls(**{f.name: getattr(value, f.name) for f in dataclasses.fields(cls)})
    assert again == value and hash(again) == hash(value)
    assert pickle.loads(pickle.dumps(value)) == value
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, 0)
    assert getattr(dataclasses.replace(value, **{name: 0}), name) == 0


def test_defaults():
    s = RequestSpec(1, 0.0, 2, 3)
    assert (s.max_output_tokens, s.block_hashes, s.hash_block_tokens, s.session_id, s.priority, s.slo_class,
            s.tenant) == (None, None, 512, None, 0, None, None)
    assert StepTime(2.0) == StepTime(2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "roofline", 0)
    with pytest.raises(TypeError):
        RequestSpec(1, 0.0, 2)


def test_default_factory_refused():
    with pytest.raises(TypeError):
        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class _Bad:
            a: list = dataclasses.field(default_factory=list)


def test_post_init_and_kw_only_refused():
    with pytest.raises(TypeError):
        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class _Post:
            a: int

            def __post_init__(self):
                pass

    with pytest.raises(TypeError):
        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
        class _Kw:
            a: int


def test_step_plan_starts_empty_with_its_own_containers():
    a, b = StepPlan(), StepPlan()
    assert a == b and a.empty and a.total_tokens == 0
    assert (a.num_new_tokens, a.preempted, a.swapped_in, a.swapped_out, a.blocks_swapped_in, a.blocks_swapped_out,
            a.cached_tokens, a.aborted) == ({}, [], [], [], 0, 0, {}, {})
    a.num_new_tokens[1] = 2
    a.preempted.append(3)
    assert b.num_new_tokens == {} and b.preempted == [] and a != b
    assert [f.name for f in dataclasses.fields(StepPlan)] == list(inspect.signature(StepPlan).parameters)
    c = StepPlan(num_new_tokens={1: 4}, preempted=[2], blocks_swapped_out=3, aborted={2: "x"})
    assert (c.num_new_tokens, c.preempted, c.blocks_swapped_out, c.aborted, c.swapped_in) == ({1: 4}, [2], 3, {2: "x"}, [])
    assert dataclasses.replace(c, blocks_swapped_in=1) == StepPlan({1: 4}, [2], [], [], 1, 3, {}, {2: "x"})
    assert repr(StepPlan()).startswith("StepPlan(num_new_tokens={}, preempted=[]")
