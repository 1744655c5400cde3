"""Errors a user can cause. The CLI prints their message and exits non-zero, never a traceback."""
from __future__ import annotations


class ServesimError(Exception):
    """Base class: bad input or an impossible setup, explained in one message."""


class ConfigError(ServesimError):
    """A config key or value is wrong; the message names its dotted path."""


class ConfigTypeError(ConfigError, TypeError):
    """A Python caller passed a value of the wrong type (``simulate(5)``, a string of overrides)."""


class TraceError(ServesimError):
    """A trace file is malformed; the message names the file and the 1-based physical line."""


class CapacityError(ServesimError):
    """The model does not fit in GPU memory; the message names the numbers."""


class ServesimWarning(UserWarning):
    """Something the user should know about a run that still ran (lengths clipped, a knob that
    has no effect with this policy). ``simulate`` issues each once per run and also lists them
    in ``summary.json`` under ``warnings``; the CLI prints them as one line each."""
