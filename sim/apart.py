"""Replicas that share nothing, run apart without simpy's event loop (``Engine.runs_ahead``:
fast-forward on, a fixed pool, no faults, no closed-loop clients, no disaggregation; the router's
turns are known). Only an arrival can reach such a replica, so each replica's loop
(``Engine._serve``) runs on its own clock and takes its own requests
(docs/design-decisions.md, "Replicas that share nothing run apart").
"""
from __future__ import annotations

from collections import deque
from itertools import islice

APART_CHUNK = 4096
"""Arrivals ``run_apart`` reads at a time (then every replica's loop goes as far as they let it):
a bound on the requests held ahead of the replicas' clocks."""
_INF = float("inf")


class Clock:
    """``run_apart``'s stand-in for simpy's environment: the clock ``Engine._serve`` reads."""

    __slots__ = ("now",)

    def __init__(self):
        self.now = 0  # (simpy's clock starts at the integer 0)


def run_apart(eng) -> float:
    """Run the replicas when they share nothing (``runs_ahead``): each replica's loop runs
    on its own clock and takes its own requests, with no event loop. The arrivals are read
    in chunks, numbered, routed (the router's ``turns``) and filed under their replica
    (``feeds``); then each replica's loop goes on as far as the requests read let it: a
    wait for time ``t`` (``_serve``'s protocol) needs every arrival up to ``t`` read, and
    those of its replica reach its scheduler first (at a tie, the arrival comes first, as
    under simpy, where arrivals are URGENT); asleep, it wakes at its next request's time.
    The same results as simpy's loop (tests/test_apart.py); returns the end of the run (the
    last arrival or the last step, whichever is later)."""
    own = [rep for rep in eng.replicas if rep.idx in eng.own]
    eng.feeds = feeds = {rep.idx: deque() for rep in own}
    eng.env = env = Clock()  # ``env.now``: the time the loop being resumed was given
    turns = eng.route.turns(eng.route_state, len(eng.entry_pool)) if len(eng.entry_pool) > 1 else None
    ctx, it = eng.model.max_context, iter(eng.workload)
    loops = {rep.idx: eng._serve(rep) for rep in own}
    until = {i: next(loop) for i, loop in loops.items()}  # what each loop waits for (None: asleep)
    arrived = end = 0  # the last arrival read; the latest clock of a loop that ended (0: as simpy's clock starts)
    deliver = eng.deliver
    while loops:
        # read the next chunk of arrivals, filed under their replicas
        read = 0
        for spec in islice(it, APART_CHUNK):
            read += 1
            arrived = spec.arrival_s
            turn = None if turns is None or spec.prompt_tokens + spec.output_tokens > ctx else next(turns)
            routed = eng._arrival(spec, turn)
            if routed is not None:
                feeds[routed[1].idx].append(routed[0])
        if read < APART_CHUNK:
            eng.arrivals_done = True  # (a loop that idles from now on ends)
        eng.horizon = last = _INF if eng.arrivals_done else arrived
        # each loop goes on as far as it can: until it needs arrivals not read yet
        for i in list(loops):
            loop, rep, mine = loops[i], eng.replicas[i], feeds[i]
            t = until[i]
            try:
                while True:
                    if t is None:  # asleep: wakes at its next request, or ends when none will come
                        if mine:
                            woke = mine[0].spec.arrival_s
                            if woke >= last:
                                break
                        elif not eng.arrivals_done:
                            break
                        else:  # woken when the last request has arrived, to end
                            woke = arrived
                        deliver(rep, woke)
                        env.now = woke
                        t = loop.send(woke)
                    else:
                        if t >= last:
                            break
                        deliver(rep, t)
                        env.now = t
                        t = next(loop)
            except StopIteration:
                del loops[i]
                end = max(end, env.now)
                continue
            until[i] = t
    return max(end, arrived)
