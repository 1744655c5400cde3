"""Typed workload section of the config (``workload:`` in YAML)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthDist(_Strict):
    """A token-length distribution.

    ``fixed``: always ``value``. ``uniform``: integers in [``min``, ``max``]. ``lognormal``:
    median ``median`` and log-space sigma ``sigma``, clipped to [``min``, ``max``].
    ``trace``: lengths resampled (with replacement) from a trace file's column.
    """

    kind: Literal["fixed", "uniform", "lognormal", "trace"] = "lognormal"
    value: int | None = Field(default=None, ge=1)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)
    median: float | None = Field(default=None, gt=0)
    sigma: float | None = Field(default=None, ge=0)
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


class TraceConfig(_Strict):
    """Replay of a timestamped trace. ``format: auto`` detects it from the columns."""

    path: str
    format: Literal["auto", "azure", "generic", "mooncake", "burstgpt", "sharegpt"] = "auto"
    rate_scale: float = Field(default=1.0, gt=0, description="replay this many times faster")
    rate: float | None = Field(default=None, gt=0, description="rescale to this mean request rate")
    window_start_s: float | None = Field(default=None, ge=0)
    window_end_s: float | None = Field(default=None, gt=0)
    skip_bad: bool = False


class WorkloadConfig(_Strict):
    """Synthetic arrivals and lengths, or a trace replay when ``trace`` is set."""

    arrival: Literal["poisson", "gamma"] = "poisson"
    rate: float = Field(default=4.0, gt=0, description="mean requests per second")
    cv: float = Field(default=1.0, gt=0, description="inter-arrival coefficient of variation (gamma)")
    num_requests: int | None = Field(default=2000, ge=1)
    prompt: LengthDist = CONV_PROMPT
    output: LengthDist = CONV_OUTPUT
    trace: TraceConfig | None = None
    clip_to_context: bool = False
