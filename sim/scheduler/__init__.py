"""Scheduling policies. Each is one file registered by one line; importing this package
registers them all."""
from sim.scheduler.base import REGISTRY, Knobs, Scheduler, register
from sim.scheduler import (  # noqa: F401  (registration)
    lookahead, orca, priority, sarathi, sjf, srpt, static, trtllm, vllm, vllm_v1,
)

__all__ = ["REGISTRY", "Knobs", "Scheduler", "register"]
