"""``least_loaded``: join the shortest queue: the replica with the fewest outstanding requests
(waiting + running), ties to the lowest index.

Source: join-the-shortest-queue (Winston, "Optimality of the shortest line discipline", J. Appl.
Prob. 1977), the "least request" policy of production LLM gateways. Departure: the router sees
exact counts instantly (no polling delay).
"""
from sim.cluster import register


@register("least_loaded")
def route(spec, loads, state) -> int:
    return min(range(len(loads)), key=lambda i: (loads[i].waiting + loads[i].running, i))
