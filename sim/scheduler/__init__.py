"""Scheduling policies. Each is one file registered by one line; importing this package
registers them all."""
from sim.scheduler.base import REGISTRY, Knobs, Scheduler, register
from sim.scheduler import static, vllm  # noqa: F401  (registration)

__all__ = ["REGISTRY", "Knobs", "Scheduler", "register"]
