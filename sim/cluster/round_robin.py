"""``round_robin``: requests go to replicas 0, 1, 2, ... in turn (identical replicas)."""
from sim.cluster import register


@register("round_robin")
def route(spec, loads, state) -> int:
    i = state.get("next", 0)
    state["next"] = (i + 1) % len(loads)
    return i
