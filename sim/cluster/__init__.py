"""Routers: which replica an arriving request goes to. One file each, registered by one line.

A router is a function ``route(spec, loads, state) -> replica index`` where ``loads`` is a list of
``ReplicaLoad`` (read-only counts) and ``state`` a dict the router may keep between calls (the
engine puts a seeded numpy Generator in ``state["rng"]``).
"""
from __future__ import annotations

from dataclasses import dataclass

ROUTERS: dict = {}


def register(name: str):
    def deco(fn):
        ROUTERS[name] = fn
        return fn

    return deco


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    waiting: int
    running: int
    kv_used_frac: float


from sim.cluster import least_loaded, power_of_two, round_robin, session_affinity  # noqa: E402,F401  (registration)
