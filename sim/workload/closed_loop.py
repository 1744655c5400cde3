"""Closed-loop clients: each thinks, sends one request, waits for its response, and repeats.

``client_draws`` gives each client its own seeded stream (think times, lengths), so results do
not depend on the order in which clients happen to be served. ``Clients`` runs them as processes
of the engine's environment (it imports no simpy: it waits on ``eng.env``): a client sends
through ``eng.admit`` and the engine calls ``finished`` when a request leaves, which wakes the
client that sent it. With a serving front end (``eng.frontend``) a request reaches the engine
after the front end handled it, and the client sees the response's last token the front end's
output delay after the engine emitted it. ``wakes`` tells the engine's decode fast-forward when a client can send
next (``Engine.next_arrival_for``).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sim.types import RequestSpec
from sim.workload.config import WorkloadConfig
from sim.workload.synthetic import sample_lengths_clipped

CHUNK = 64


def client_draws(cfg: WorkloadConfig, seed: int, client: int) -> Iterator[tuple[float, int, int, bool, bool]]:
    """Endless (think time s, prompt tokens, output tokens, prompt clipped, output clipped)
    draws for one client (clipped: changed by the length distribution's bounds)."""
    cl = cfg.closed_loop
    rng = np.random.default_rng([seed, 7, client])
    while True:
        if cl.think == "fixed":
            think = np.full(CHUNK, cl.think_time_s)
        else:
            think = rng.exponential(cl.think_time_s, CHUNK) if cl.think_time_s > 0 else np.zeros(CHUNK)
        prompts, p_clip = sample_lengths_clipped(cfg.prompt, CHUNK, rng)
        outputs, o_clip = sample_lengths_clipped(cfg.output, CHUNK, rng)
        yield from zip(think.tolist(), prompts.tolist(), outputs.tolist(), p_clip.tolist(), o_clip.tolist())


class Clients:
    """The closed-loop clients of ``eng`` (``workload.closed_loop``), sharing one request budget
    (``workload.num_requests``; None: until ``workload.duration_s``)."""

    def __init__(self, eng):
        self.eng = eng
        self.wakes: dict[int, float] = {}  # client -> time its pending timeout (ramp-up, think) ends
        self.waiting: dict = {}  # request id -> the event its client waits on

    def run(self):
        """The process: every client until each stops, then the engine's end of arrivals."""
        eng = self.eng
        env, cl = eng.env, eng.cfg.workload.closed_loop
        budget = [eng.cfg.workload.num_requests]
        yield env.all_of([env.process(self._client(c, budget)) for c in range(cl.clients)])
        eng.workload.info["source"] = f"closed loop: {cl.clients} clients, think {cl.think} mean {cl.think_time_s} s"
        eng._arrivals_finished()

    def finished(self, rid: int) -> None:
        """Request ``rid`` left (finished, rejected or lost): its client may send again."""
        ev = self.waiting.pop(rid, None)
        if ev is not None:
            ev.succeed()
            self.wakes[ev.client] = self.eng.env.now  # it sends again at now + think, at the earliest

    def _client(self, c: int, budget: list[int]):
        """Client ``c``: think, send, wait for the response, repeat while the shared request
        budget lasts (``budget[0]`` requests left; None = until ``duration_s``)."""
        eng = self.eng
        env, wl, wakes = eng.env, eng.cfg.workload, self.wakes
        clipped = eng.workload.info.setdefault("clipped", {"prompt": 0, "output": 0})
        fe = eng.frontend  # (None: no front end)
        ramp = wl.closed_loop.ramp_up_s * c / wl.closed_loop.clients
        if ramp > 0:
            wakes[c] = env.now + ramp
            yield env.timeout(ramp)
            del wakes[c]
        for think, prompt, output, p_clip, o_clip in client_draws(wl, eng.cfg.seed, c):
            if think > 0:
                wakes[c] = env.now + think
                yield env.timeout(think)
                del wakes[c]
            if wl.duration_s is not None and env.now > wl.duration_s:
                return
            if budget[0] is not None:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            clipped["prompt"] += p_clip
            clipped["output"] += o_clip
            sent = env.now
            if fe is not None:  # the serving front end handles it before the engine sees it
                wakes[c] = at = fe.receive(sent, prompt)
                if at > env.now:
                    yield env.timeout(at - env.now)
                del wakes[c]
            rid = eng.admitted
            done = self.waiting[rid] = env.event()
            done.client = c
            eng.admit(RequestSpec(id=rid, arrival_s=env.now, prompt_tokens=prompt, output_tokens=output,
                                  session_id=f"client-{c}", sent_s=None if fe is None else sent))
            yield done
            wakes.pop(c, None)
            if fe is not None and fe.out_s > 0:  # the client sees the last token this much later
                wakes[c] = env.now + fe.out_s
                yield env.timeout(fe.out_s)
                del wakes[c]
