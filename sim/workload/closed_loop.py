"""Closed-loop clients: the draws each client makes (think times, lengths).

The engine owns the feedback (a client waits for its request to finish); this module only
supplies each client's own seeded stream, so results do not depend on the order in which
clients happen to be served.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

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
