"""``session_affinity``: every request of a session goes to the replica its session was first
sent to (so its prefix stays in that replica's KV cache); a new session, or a request without
one, goes to the least loaded replica.

Source: the prefix- / session-aware routing of SGLang's router and of vLLM's production stack
(session stickiness). Departure: the mapping never expires.
"""
from sim.cluster import register
from sim.cluster.least_loaded import route as least_loaded


@register("session_affinity")
def route(spec, loads, state) -> int:
    if spec.session_id is None:
        return least_loaded(spec, loads, state)
    sessions = state.setdefault("sessions", {})
    if spec.session_id not in sessions:
        sessions[spec.session_id] = least_loaded(spec, loads, state)
    return sessions[spec.session_id]
