"""Typed workload section of the config (``workload:`` in YAML). Pure data: no I/O here.

Every option is described in docs/workloads.md, with a YAML example per feature.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


# Upper bounds that keep absurd inputs from exhausting memory or running forever. They are far
# beyond any real deployment (no model has a context of 10 M tokens; 1 M requests/s is a large
# provider's whole fleet) and are documented in docs/workloads.md.
MAX_TOKENS = 10_000_000
"""Largest token count of one length (prompt, output, system prompt)."""
MAX_RATE = 1_000_000.0
"""Largest arrival rate (requests, sessions or bursts per second)."""
MAX_REQUESTS = 100_000_000
"""Largest ``num_requests`` of a synthetic workload or a trace cap."""
MAX_SIGMA = 5.0
"""Largest log-space sigma of a lognormal length (a 5-sigma draw is then exp(25) x the median)."""
MAX_TURNS = 1000
"""Most turns in one session."""


class _Strict(BaseModel):
    """Frozen, unknown keys rejected, and every float finite (NaN and inf are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LengthDist(_Strict):
    """A token-length distribution.

    ``fixed``: always ``value``. ``uniform``: integers in [``min``, ``max``]. ``lognormal``:
    median ``median`` and log-space sigma ``sigma``, clipped to [``min``, ``max``].
    ``trace``: lengths resampled (with replacement) from a trace file's column (the prompt
    column for ``prompt``, the output column for ``output``).
    """

    kind: Literal["fixed", "uniform", "lognormal", "trace"] = "lognormal"
    value: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    median: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    sigma: float | None = Field(default=None, ge=0, le=MAX_SIGMA)
    path: str | None = None

    @model_validator(mode="after")
    def _check(self):
        need = {"fixed": ("value",), "uniform": ("max",), "lognormal": ("median", "sigma"), "trace": ("path",)}
        missing = [k for k in need[self.kind] if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {', '.join(missing)}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


# Conversation-like defaults: lognormals matching the published mean and median of the Azure
# LLM inference 2023 conversation trace (input mean 1,155 / median 1,020; output mean 211 /
# median 129). For a lognormal, mean/median = exp(sigma^2 / 2), so sigma = sqrt(2 ln(mean/median)).
CONV_PROMPT = LengthDist(kind="lognormal", median=1020, sigma=0.4986, min=1, max=8192)
CONV_OUTPUT = LengthDist(kind="lognormal", median=129, sigma=0.9919, min=1, max=2048)

Arrival = Literal["poisson", "constant", "gamma", "diurnal", "burst"]


class DiurnalConfig(_Strict):
    """Sinusoidal rate: rate(t) = rate * (1 + amplitude * sin(2 pi (t + phase_s) / period_s)).
    The mean over a period is ``rate``; arrivals are drawn by thinning a Poisson process."""

    period_s: float = Field(default=86400.0, gt=0)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    phase_s: float = 0.0


class BurstConfig(_Strict):
    """Two-state Markov-modulated Poisson process: Poisson at the workload's ``rate`` in the
    base state, at ``rate`` here in the burst state; each state lasts an exponential time with
    the given mean. Starts in the base state."""

    rate: float = Field(gt=0, le=MAX_RATE, description="requests per second during a burst")
    mean_base_s: float = Field(default=60.0, gt=0)
    mean_burst_s: float = Field(default=10.0, gt=0)


class SessionConfig(_Strict):
    """Multi-turn sessions: each arrival of the process starts a session of ``turns`` turns.
    A later turn arrives an exponential think time (mean ``think_time_s``) after the previous
    turn's arrival (open loop) and its prompt holds the whole history plus a new user message."""

    turns: LengthDist = LengthDist(kind="uniform", min=1, max=5)
    think_time_s: float = Field(default=10.0, ge=0)

    @model_validator(mode="after")
    def _check(self):
        t = self.turns
        most = t.value if t.kind == "fixed" else t.max
        if most is None or most > MAX_TURNS:
            raise ValueError(f"turns must be bounded by at most {MAX_TURNS} per session (set turns.max, "
                             f"or turns.value for a fixed count)")
        return self


class SystemPromptConfig(_Strict):
    """``count`` distinct system prompts of ``tokens`` tokens; each request starts with one,
    picked uniformly or by a Zipf law of exponent ``zipf_s`` (prompt 0 most popular)."""

    count: int = Field(default=8, ge=1, le=1_000_000)
    tokens: int = Field(default=512, ge=1, le=MAX_TOKENS)
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: float = Field(default=1.0, gt=0)


class TenantConfig(_Strict):
    """One tenant of a multi-tenant mix: its own arrival process, lengths and service class.
    ``prompt`` / ``output`` default to the workload's."""

    name: str
    rate: float = Field(gt=0, le=MAX_RATE)
    arrival: Arrival = "poisson"
    cv: float = Field(default=1.0, gt=0, le=1000)
    diurnal: DiurnalConfig | None = None
    burst: BurstConfig | None = None
    prompt: LengthDist | None = None
    output: LengthDist | None = None
    slo_class: str | None = None
    priority: int = 0

    @model_validator(mode="after")
    def _check(self):
        _check_arrival(self)
        return self


class TraceConfig(_Strict):
    """Replay of a trace file. ``format: auto`` detects it from the header or the keys.

    Applied in this order while streaming: format filters (BurstGPT model / log type, failed
    rows) -> time window -> sampling -> ``num_requests`` cap -> time scaling (``rate_scale``
    or ``rate``). See docs/workloads.md.
    """

    path: str
    format: str = Field(default="auto", description=(
        "auto (detect) or a name of sim.workload.traces.FORMATS; checked by the top-level config"))
    rate_scale: float = Field(default=1.0, gt=0, le=MAX_RATE, description="replay this many times faster")
    rate: float | None = Field(default=None, gt=0, le=MAX_RATE, description="rescale to this mean request rate")
    window_start_s: float | None = Field(default=None, ge=0)
    window_end_s: float | None = Field(default=None, gt=0)
    skip_bad: bool = False
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS, description="keep the first N requests")
    sample_fraction: float | None = Field(default=None, gt=0, le=1)
    model_filter: list[str] | None = Field(default=None, description="BurstGPT: keep these Model values")
    log_type_filter: list[str] | None = Field(default=None, description="BurstGPT: keep these Log Type values")
    reorder_window_s: float = Field(default=1.0, ge=0, description="tolerated timestamp disorder")
    acceptance_column: str | None = Field(default=None, description=(
        "the column holding each request's measured draft acceptance rate in [0, 1]; set from "
        "speculative.acceptance (trace: column 'acceptance', or the column's name)"))
    arrivals: Literal["recorded", "poisson", "constant"] = Field(default="recorded", description=(
        "recorded: the trace's times; poisson: times re-drawn from the seed as a Poisson process at the "
        "trace's mean rate (after rate / rate_scale), each request keeping its lengths, order and prefix; "
        "constant: evenly spaced at that rate"))

    @model_validator(mode="after")
    def _check(self):
        if self.rate is not None and self.rate_scale != 1.0:
            raise ValueError("set rate or rate_scale, not both")
        if self.window_start_s is not None and self.window_end_s is not None and self.window_end_s <= self.window_start_s:
            raise ValueError(f"window_end_s ({self.window_end_s}) must be after window_start_s ({self.window_start_s})")
        return self


class ClosedLoopConfig(_Strict):
    """Closed-loop clients: each of ``clients`` sends a request, waits for its last token (or
    its rejection), thinks, and sends the next. The offered load then adapts to the service
    rate, as with a fixed pool of users or a benchmark with bounded concurrency.

    Think times are exponential with mean ``think_time_s`` (``think: fixed`` makes them
    constant); every client also thinks once before its first request so they do not all
    start at t = 0, and ``ramp_up_s`` staggers the first requests evenly (for zero think
    time). Lengths come from the workload's ``prompt`` and ``output``.
    """

    clients: int = Field(ge=1, le=1_000_000, description="concurrent users")
    think_time_s: float = Field(default=1.0, ge=0, description="mean pause between a response and the next request")
    think: Literal["exponential", "fixed"] = "exponential"
    ramp_up_s: float = Field(default=0.0, ge=0, description=(
        "client i (0-based) sends its first request i * ramp_up_s / clients after the start, as a "
        "benchmark's ramp-up does, so that with no think time the clients do not run in lock-step"))


class WorkloadConfig(_Strict):
    """Synthetic arrivals and lengths, or a trace replay when ``trace`` is set.

    ``rate`` is the arrival process's rate: requests per second, or sessions started per
    second when ``sessions`` is set (and for ShareGPT conversations). ``num_requests`` and
    ``duration_s`` bound a synthetic stream; a trace uses ``trace.num_requests``.
    """

    arrival: Arrival = "poisson"
    rate: float = Field(default=12.0, gt=0, le=MAX_RATE, description="mean requests per second")
    cv: float = Field(default=1.0, gt=0, le=1000, description="inter-arrival coefficient of variation (gamma)")
    num_requests: int | None = Field(default=3000, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0, description="stop synthetic arrivals after this time")
    prompt: LengthDist = CONV_PROMPT
    output: LengthDist = CONV_OUTPUT
    diurnal: DiurnalConfig | None = None
    burst: BurstConfig | None = None
    tenants: list[TenantConfig] | None = None
    sessions: SessionConfig | None = None
    system_prompts: SystemPromptConfig | None = None
    trace: TraceConfig | None = None
    closed_loop: ClosedLoopConfig | None = None
    clip_to_context: bool = False

    @model_validator(mode="after")
    def _check(self):
        _check_arrival(self)
        if self.closed_loop is not None:
            clash = [k for k in ("trace", "sessions", "tenants", "diurnal", "burst", "system_prompts") if getattr(self, k)]
            if clash:
                raise ValueError(f"closed_loop cannot be combined with {', '.join(clash)}")
        if self.trace is None and self.num_requests is None and self.duration_s is None:
            raise ValueError("a synthetic workload needs num_requests or duration_s")
        if self.trace is None and self.num_requests is None and self.duration_s * self.rate > MAX_REQUESTS:
            raise ValueError(f"duration_s x rate = {self.duration_s * self.rate:.3g} expected requests, more than "
                             f"{MAX_REQUESTS:,}; set num_requests or a shorter duration_s")
        if self.tenants is not None:
            if not self.tenants:
                raise ValueError("tenants is empty")
            names = [t.name for t in self.tenants]
            if len(set(names)) != len(names):
                raise ValueError(f"tenant names repeat: {names}")
        return self


def _check_arrival(c) -> None:
    if c.arrival == "burst" and c.burst is None:
        raise ValueError("arrival: burst needs a burst section (rate, mean_base_s, mean_burst_s)")
