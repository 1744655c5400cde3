"""The values that flow between the simulator's stages (docs/architecture.md section 3).

Every stage takes and returns these plain values, so each stage can be unit-tested without
an event loop. They are deliberately small, immutable where they cross a stage boundary, and
use ``slots`` because millions of them are created in a long run.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields


def fast_init(cls):
    """Class decorator for a frozen slots dataclass: replace its generated ``__init__`` with one
    that stores each field through its slot's own setter. The generated one calls
    ``object.__setattr__`` per field (its way past the frozen ``__setattr__``), about twice the
    cost; these values are built once or twice per request or step. Same signature, defaults and
    stored values, so ``dataclasses.replace``, equality, hashing, pickling and the frozen
    ``__setattr__`` are unchanged. Only plain positional fields with plain defaults (no
    ``default_factory``, ``init=False`` or ``kw_only``) and no ``__post_init__``."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init: {cls.__name__} has a __post_init__")
    names, params = [], []
    ns: dict = {}
    for f in fields(cls):
        if f.default_factory is not MISSING or not f.init or f.kw_only is True:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} needs the generated __init__")
        names.append(f.name)
        ns[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is MISSING:
            params.append(f.name)
        else:
            ns[f"_dflt_{f.name}"] = f.default
            params.append(f"{f.name}=_dflt_{f.name}")
    body = "".join(f"    _set_{n}(self, {n})\n" for n in names)
    exec(f"def __init__(self, {', '.join(params)}):\n{body}", ns)
    init = ns["__init__"]
    init.__module__, init.__qualname__ = cls.__module__, f"{cls.__qualname__}.__init__"
    init.__annotations__ = {f.name: f.type for f in fields(cls)} | {"return": None}
    cls.__init__ = init
    return cls


@fast_init
@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the workload describes it (immutable).

    ``output_tokens`` is ground truth: the number of tokens the request really generates.
    Policies must not read it except through a configured predictor or an explicit oracle.
    ``max_output_tokens`` is the client's limit (what reservation-based policies reserve); when
    ``None`` it means "the model's context minus the prompt".
    ``block_hashes`` are prefix-block hashes in units of the trace's own block size
    (``hash_block_tokens``), mapped onto KV blocks by the KV manager.
    ``arrival_s`` is when the engine receives the request; with a serving front end
    (``frontend``, ``sim/cluster/frontend.py``) that is after the API server handled it, and
    ``sent_s`` is when the client sent it (None: no front end, the client sent it at ``arrival_s``).
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_output_tokens: int | None = None
    block_hashes: tuple[int, ...] | None = None
    hash_block_tokens: int = 512
    session_id: str | None = None
    priority: int = 0
    slo_class: str | None = None
    tenant: str | None = None
    sent_s: float | None = None
    acceptance: float | None = None

    def with_output_limit(self, limit: int) -> "RequestSpec":
        """This spec with ``max_output_tokens = limit`` (``dataclasses.replace``, without its
        per-call field walk: the engine does this for every request without a limit)."""
        return RequestSpec(self.id, self.arrival_s, self.prompt_tokens, self.output_tokens, limit, self.block_hashes,
                           self.hash_block_tokens, self.session_id, self.priority, self.slo_class, self.tenant,
                           self.sent_s, self.acceptance)


def default_output_limit(prompt_tokens: int, max_context: int) -> int:
    """The output limit of a request that names none: the model's context minus its prompt, at
    least 1 (set by the synthetic workload as it draws requests, else by the engine on arrival)."""
    return max(1, max_context - prompt_tokens)


@dataclass(slots=True, init=False)
class StepPlan:
    """One scheduling decision: ``{request_id: num_new_tokens}`` plus memory movements.

    There is no prefill or decode phase: a request's computed-token count catches up with its
    prompt + generated tokens, and policies differ only in how they fill ``num_new_tokens``.
    ``preempted`` lists requests that lost their KV this step (recompute or swap-out),
    ``swapped_in`` / ``swapped_out`` the requests whose blocks move over the host link (a
    swapped-out request is also in ``preempted`` but keeps its computed tokens).
    ``cached_tokens`` maps a newly admitted request to the prompt tokens its prefix-cache hit
    skips (they count as computed before the step). ``aborted`` maps a request the policy
    dropped this step to the reason (a preempted request that can never be admitted again, as
    vLLM v0 ignores a waiting request whose blocks can never fit); it left the policy's queues.
    ``blocks_loaded`` / ``blocks_loaded_disk``: blocks of this step's prefix hits loaded from
    the host / disk tier of a tiered KV cache (``sim.kv.tiers``), priced with the step.
    """

    num_new_tokens: dict[int, int]
    preempted: list[int]
    swapped_in: list[int]
    swapped_out: list[int]
    blocks_swapped_in: int
    blocks_swapped_out: int
    cached_tokens: dict[int, int]
    aborted: dict[int, str]
    blocks_loaded: int
    blocks_loaded_disk: int

    def __init__(self, num_new_tokens: dict[int, int] | None = None, preempted: list[int] | None = None,
                 swapped_in: list[int] | None = None, swapped_out: list[int] | None = None,
                 blocks_swapped_in: int = 0, blocks_swapped_out: int = 0,
                 cached_tokens: dict[int, int] | None = None, aborted: dict[int, str] | None = None,
                 blocks_loaded: int = 0, blocks_loaded_disk: int = 0) -> None:
        # Written out: every plan starts empty (one per step), and the generated __init__ calls a
        # default factory per container field, about 1.6x the cost. None means a new empty one.
        self.num_new_tokens = {} if num_new_tokens is None else num_new_tokens
        self.preempted = [] if preempted is None else preempted
        self.swapped_in = [] if swapped_in is None else swapped_in
        self.swapped_out = [] if swapped_out is None else swapped_out
        self.blocks_swapped_in = blocks_swapped_in
        self.blocks_swapped_out = blocks_swapped_out
        self.cached_tokens = {} if cached_tokens is None else cached_tokens
        self.aborted = {} if aborted is None else aborted
        self.blocks_loaded = blocks_loaded
        self.blocks_loaded_disk = blocks_loaded_disk

    @property
    def empty(self) -> bool:
        return not self.num_new_tokens and not self.blocks_swapped_in and not self.blocks_swapped_out

    @property
    def total_tokens(self) -> int:
        return sum(self.num_new_tokens.values())


@fast_init
@dataclass(frozen=True, slots=True)
class BatchShape:
    """All the cost model may know about a step: per sequence, the new tokens it computes and
    the tokens already in its KV cache before the step; blocks moved over the host link; the
    replica's parallelism. Never requests, schedulers or policy names. ``blocks_loaded`` /
    ``blocks_loaded_disk``: prefix-hit blocks loaded from a tiered cache's host / disk tier."""

    new_tokens: tuple[int, ...]
    context_lens: tuple[int, ...]
    blocks_swapped_in: int = 0
    blocks_swapped_out: int = 0
    tp: int = 1
    pp: int = 1
    blocks_loaded: int = 0
    blocks_loaded_disk: int = 0


COMPONENTS = ("gemm", "attn_prefill", "attn_decode", "comm", "other_gpu", "cpu", "swap")
"""Step-time components, in report order. ``other_gpu`` covers norms, activations, rotary,
embedding, LM head and sampling."""


@fast_init
@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds one step takes, with a breakdown by component (sums to ``total``).

    ``source`` names what priced it (``roofline`` or ``profiled``); ``out_of_range`` counts the
    operator queries of this step that fell outside the calibrated grid.
    """

    total: float
    gemm: float = 0.0
    attn_prefill: float = 0.0
    attn_decode: float = 0.0
    comm: float = 0.0
    other_gpu: float = 0.0
    cpu: float = 0.0
    swap: float = 0.0
    source: str = "roofline"
    out_of_range: int = 0
