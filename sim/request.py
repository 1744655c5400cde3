"""A request's mutable serving state.

Policies read it; only the engine's named functions change it (docs/architecture.md section 2). Token
accounting follows the vLLM v1 rule: a request's ``num_tokens`` is its prompt plus the tokens it
has generated; each step computes some of the not-yet-computed ones; when ``num_computed``
catches up with ``num_tokens`` the step samples one new output token.
"""
from __future__ import annotations

from enum import Enum

from sim.types import RequestSpec


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"
    REJECTED = "rejected"
    LOST = "lost"  # taken by a fault (a crashed replica under ``faults.on_crash: lose``)


_WAITING = Status.WAITING  # read once: an enum member's attribute lookup costs ~80 ns


class Request:
    __slots__ = (
        "spec", "id", "prompt_tokens", "output_tokens", "num_computed", "num_generated", "status", "replica", "first_scheduled_s",
        "first_token_s", "last_token_s", "finish_s", "preemptions", "reject_reason", "cached_tokens",
        "max_itl_s", "order",
    )

    def __init__(self, spec: RequestSpec):
        self.spec = spec
        self.id = spec.id
        self.prompt_tokens = spec.prompt_tokens  # copies of the spec's fields for the hot paths
        self.output_tokens = spec.output_tokens  # ground truth: policies must not read it
        self.num_computed = 0
        self.num_generated = 0
        self.status = _WAITING
        self.replica = -1
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.finish_s: float | None = None
        self.preemptions = 0
        self.reject_reason: str | None = None
        self.cached_tokens = 0  # prompt tokens served from the prefix cache (first admission)
        self.max_itl_s = 0.0
        self.order = spec.id  # admission order (the engine numbers arrivals as it admits them)

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV the request needs before it can sample its next token."""
        return self.prompt_tokens + self.num_generated

    @property
    def remaining(self) -> int:
        """Tokens still to compute before the next sample (1 for a running decode)."""
        return self.num_tokens - self.num_computed

    @property
    def max_total_tokens(self) -> int:
        """Prompt plus the client's output limit (what reservation-based policies reserve)."""
        mo = self.spec.max_output_tokens
        return self.spec.prompt_tokens + (mo if mo is not None else self.spec.output_tokens)

    def __repr__(self) -> str:
        return f"Request(id={self.id}, computed={self.num_computed}/{self.num_tokens}, gen={self.num_generated}, {self.status.value})"


def decodes_next(r: Request) -> bool:
    """Whether ``r``'s next token is a decode token: it has generated at least one of its
    tokens and not all, and every token but its last is computed, so one new token computes that
    one and samples the next. The one statement of "a request decodes its next token" that the
    fast paths (``Scheduler.decode_batch``, ``fastforward.steady_decode``, ``flow.enters``) use:
    a request that recomputes its prompt after a preemption or a crash has generated tokens but
    does not decode, even when its policy gives it one token a step."""
    g = r.num_generated
    return 0 < g < r.output_tokens and r.num_computed == r.prompt_tokens + g - 1
