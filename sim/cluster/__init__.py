"""Routers: which replica an arriving request goes to. One file each, registered by one line.

A router is a function ``route(spec, loads, state) -> replica index`` where ``loads`` is a list of
``ReplicaLoad`` (read-only counts, and the replica's KV manager to read what it caches) and
``state`` a dict the router may keep between calls (the
engine puts a seeded numpy Generator in ``state["rng"]``).

Capabilities, declared at registration: ``reads_load=False`` says the router never reads
``loads`` (the engine then skips counting them); a router whose choices do not depend on the
replicas' state may also give ``turns(state, n)``: the replica indices it will pick for the next
requests, in order, without changing ``state``. The engine's decode fast-forward needs it to know
when a replica's next request can arrive (with more than one replica).
"""
from __future__ import annotations

from dataclasses import dataclass

ROUTERS: dict = {}


def register(name: str, *, reads_load: bool = True, turns=None):
    def deco(fn):
        fn.reads_load = reads_load
        fn.turns = turns
        ROUTERS[name] = fn
        return fn

    return deco


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    waiting: int
    running: int
    kv_used_frac: float
    kv: object = None
    """The replica's KV manager, to read (never change) what it caches: ``cached_blocks``."""


from sim.cluster import (  # noqa: E402,F401  (registration)
    least_loaded, power_of_two, prefix_aware, round_robin, session_affinity)
