"""Speculative decoding: a draft proposes ``k`` tokens, the target verifies them in one step.

Sources: Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023), sections 2-3: the target scores the k drafted tokens and the next one in
one forward pass; drafts are accepted left to right until the first rejection, and the step
emits the accepted tokens plus one token of the target's own. vLLM v1's implementation
(``--speculative-config``: ``method``, ``num_speculative_tokens``): draft tokens are scheduled as
part of a request's new tokens, counted in the token budget, with KV slots for all of them;
rejected slots are overwritten by the next step. Drafts:

- ``draft_model``: a smaller model of the same vocabulary (its own card), run k times per step;
- ``eagle`` / ``eagle3``: a draft head of one decoder layer fed the target's hidden states,
  with the target's LM head (Li et al., EAGLE, ICML 2024; EAGLE-3, 2025), run k times per step;
- ``mtp``: multi-token prediction modules shipped with the model (DeepSeek-V3 technical report,
  section 2.2: one transformer block sharing the embedding and output head); the report (section
  5.4.3) measures 85-90% acceptance of the second token, the default acceptance here;
- ``ngram``: drafts looked up in the prompt and output so far (prompt lookup decoding), on the
  CPU: no GPU time.

Acceptance is a model input, as in every peer simulator: a per-position rate list
``[p1, p2, ...]`` (draft i is accepted with probability ``p_i`` given drafts 1..i-1 were;
positions past the list use its last rate) or one rate for every position. Each verification
draws its accepted count from the engine's seeded generator.

Departures: the draft's cost is priced per step as k forward passes of its batch (the first
pass also reads the tokens accepted last step, priced as one token); EAGLE and MTP heads are
priced as one decoder layer of the target plus its LM head (the step's average layer: MoE or
dense, attention over the same contexts); tree drafting is not modelled (a chain of k drafts).
With speculation on, the fast paths are off (each step draws its acceptances).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.types import StepTime

METHODS = ("draft_model", "eagle", "eagle3", "mtp", "ngram")
MTP_ACCEPTANCE = 0.85
"""DeepSeek-V3's measured acceptance of its MTP module's token: 85-90% (technical report,
section 5.4.3); the low end."""


class Speculative(BaseModel):
    """``speculative:`` in the config (off by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    method: Literal["none", "draft_model", "eagle", "eagle3", "mtp", "ngram"] = Field(
        default="none", description="none | draft_model (with draft_model: a card) | eagle | eagle3 | mtp | ngram")
    num_speculative_tokens: int = Field(default=3, ge=1, le=64, description="draft tokens verified per step (k)")
    acceptance: float | list[float] | str | None = Field(default=None, description=(
        "acceptance rate of each draft position, given the earlier ones were accepted: one rate, or "
        "a list of at most num_speculative_tokens rates (positions past it use its last), or each "
        "request's measured rate read from a trace column: trace (column 'acceptance') or the "
        f"column's name; mtp defaults to {MTP_ACCEPTANCE} (DeepSeek-V3's report)"))
    draft_model: str | None = Field(default=None, description="draft_model: the draft's catalog id or card path")

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    @field_validator("acceptance")
    @classmethod
    def _rates(cls, v):
        if isinstance(v, str):
            if not v.strip():
                raise ValueError("give 'trace' or a trace column's name")
            return v
        rates = [v] if isinstance(v, (int, float)) else v
        if rates is not None:
            if not rates:
                raise ValueError("give at least one rate")
            for r in rates:
                if not 0.0 <= r <= 1.0:
                    raise ValueError(f"acceptance rates lie in [0, 1]; got {r}")
        return v

    @model_validator(mode="after")
    def _complete(self):
        if not self.enabled:
            return self
        if isinstance(self.acceptance, list) and len(self.acceptance) > self.num_speculative_tokens:
            raise ValueError(f"speculative.acceptance: {len(self.acceptance)} rates for "
                             f"{self.num_speculative_tokens} draft tokens (num_speculative_tokens)")
        if self.acceptance is None and self.method != "mtp":
            raise ValueError(f"speculative.acceptance: give the acceptance rate(s) measured for your {self.method} "
                             "drafts (e.g. 0.7, or [0.8, 0.6, 0.5]); only mtp has a published default")
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise ValueError("speculative.draft_model: " + ("method draft_model needs the draft's card"
                                                             if self.method == "draft_model"
                                                             else f"only method draft_model takes a draft card, not {self.method}"))
        return self

    @property
    def acceptance_column(self) -> str | None:
        """The trace column of each request's acceptance rate (None: rates from the config)."""
        a = self.acceptance
        if not isinstance(a, str):
            return None
        return "acceptance" if a == "trace" else a

    def rates(self) -> list[float]:
        """The acceptance rate of each of the k positions (a request's own rate, when the trace
        gives one, replaces them: ``Drafter.accept``); with rates from a trace, none here."""
        if self.acceptance_column is not None:
            return []
        a = MTP_ACCEPTANCE if self.acceptance is None else self.acceptance
        rates = [float(a)] if isinstance(a, (int, float)) else [float(x) for x in a]
        k = self.num_speculative_tokens
        return (rates + [rates[-1]] * k)[:k]


def spec_workload(cfg):
    """``cfg.workload``, its trace reading each request's acceptance rate when
    ``speculative.acceptance`` names a trace column."""
    col = cfg.speculative.acceptance_column if cfg.speculative.enabled else None
    wl = cfg.workload
    if col is None or wl.trace is None:
        return wl
    return wl.model_copy(update={"trace": wl.trace.model_copy(update={"acceptance_column": col})})


def draft_problem(spec: Speculative, target, draft) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (None when it can)."""
    if draft.vocab_size != target.vocab_size:
        return (f"speculative.draft_model: {draft.id}'s vocabulary ({draft.vocab_size:,} tokens) is not "
                f"{target.id}'s ({target.vocab_size:,}): a draft must share the target's tokenizer")
    if draft.total_params >= target.total_params:
        return (f"speculative.draft_model: {draft.id} ({draft.total_params / 1e9:.1f} B parameters) is not smaller "
                f"than {target.id} ({target.total_params / 1e9:.1f} B)")
    return None


class Drafter:
    """The run's speculative decoding: acceptance draws and the draft's price per step."""

    def __init__(self, spec: Speculative, rng, target_cost, draft_cost=None):
        self.k = spec.num_speculative_tokens
        self.method = spec.method
        self.p = spec.rates()
        self.column = spec.acceptance_column  # each request's own rate from this trace column (None: ``p``)
        self.rng = rng
        self.target, self.draft = target_cost, draft_cost
        self.verifications = 0  # request-steps that verified drafts
        self.drafted = 0  # draft tokens verified
        self.accepted_total = 0  # of which accepted

    def accept(self, drafts: int, rate: float | None = None) -> int:
        """Accepted drafts of one verification of ``drafts`` tokens (left to right until the first
        rejection); ``rate``: the request's own acceptance rate at every position (from the
        trace), else the configured per-position rates."""
        a = 0
        rand = self.rng.random
        if rate is None:
            p = self.p
            while a < drafts and rand() < p[a]:
                a += 1
        else:
            while a < drafts and rand() < rate:
                a += 1
        self.verifications += 1
        self.drafted += drafts
        self.accepted_total += a
        return a

    def price(self, n: int, kv_tokens: int, longest: int, target=None) -> float:
        """Seconds the drafts of ``n`` sequences take in one step (k draft passes; their contexts
        hold ``kv_tokens`` tokens in all, the longest ``longest``); ``target``: the cost model of the
        replica that verifies them (its pool's; default: the one given at construction)."""
        if not n or self.method == "ngram":
            return 0.0
        if self.draft is not None:
            return self.k * self.draft.decode_step(n, kv_tokens, longest).total
        # EAGLE / MTP: one decoder layer of the target and its LM head, per draft token
        target = self.target if target is None else target
        st = target.decode_step(n, kv_tokens, longest)
        head = target.gemm("lm_head", n)
        layers = target.model.num_layers
        return self.k * ((st.total - st.cpu - head) / layers + head)

    def summary(self) -> dict:
        """``summary.json``'s ``speculative`` block."""
        v = self.verifications
        per_request = {} if self.column is None else {"acceptance_column": self.column}
        return {"method": self.method, "num_speculative_tokens": self.k, "acceptance_rates": self.p, **per_request,
                "verifications": v, "draft_tokens": self.drafted, "accepted_draft_tokens": self.accepted_total,
                "acceptance_rate": self.accepted_total / self.drafted if self.drafted else None,
                "mean_acceptance_length": (self.accepted_total + v) / v if v else None}


def with_draft(st: StepTime, seconds: float) -> StepTime:
    """``st`` with the drafts' GPU time added (booked as GEMM time: a draft pass is mostly its
    weight reads)."""
    if not seconds:
        return st
    return StepTime(st.total + seconds, st.gemm + seconds, st.attn_prefill, st.attn_decode, st.comm, st.other_gpu,
                    st.cpu, st.swap, st.source, st.out_of_range)
