"""``power_of_two``: sample two distinct replicas at random, send to the less loaded one
(waiting + running; ties to the first sampled).

Source: Mitzenmacher, "The power of two choices in randomized load balancing", IEEE TPDS 2001:
nearly the balance of join-the-shortest-queue while reading only two replicas' state.
"""
from sim.cluster import register


@register("power_of_two")
def route(spec, loads, state) -> int:
    if len(loads) == 1:
        return 0
    a, b = state["rng"].choice(len(loads), size=2, replace=False)
    la, lb = loads[a].waiting + loads[a].running, loads[b].waiting + loads[b].running
    return int(b) if lb < la else int(a)
