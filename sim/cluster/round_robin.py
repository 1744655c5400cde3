"""``round_robin``: requests go to replicas 0, 1, 2, ... in turn (identical replicas)."""
from sim.cluster import register


def turns(state, n: int):
    """The replicas the next requests go to, in order (``state`` unchanged)."""
    i = state.get("next", 0)
    while True:
        yield i
        i = (i + 1) % n


@register("round_robin", reads_load=False, turns=turns)
def route(spec, loads, state) -> int:
    i = state.get("next", 0)
    state["next"] = (i + 1) % len(loads)
    return i
