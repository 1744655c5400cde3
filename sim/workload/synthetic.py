"""Synthetic arrivals and token lengths drawn from one seeded numpy Generator."""
from __future__ import annotations

import numpy as np

from sim.workload.config import LengthDist


def interarrivals(kind: str, rate: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps (s) with mean 1/rate.

    Poisson: exponential gaps (cv = 1). Gamma: shape k = 1/cv^2, scale = 1/(rate k), so the
    mean stays 1/rate and the coefficient of variation is ``cv`` (cv > 1 is burstier).
    """
    if kind == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator, pool: np.ndarray | None = None) -> np.ndarray:
    """``n`` integer token lengths (>= 1) from ``dist``; ``pool`` holds a trace's lengths."""
    if dist.kind == "fixed":
        out = np.full(n, dist.value, dtype=np.int64)
    elif dist.kind == "uniform":
        out = rng.integers(dist.min, dist.max, size=n, endpoint=True)
    elif dist.kind == "lognormal":
        out = np.rint(rng.lognormal(np.log(dist.median), dist.sigma, size=n)).astype(np.int64)
    else:
        if pool is None or len(pool) == 0:
            raise ValueError("a trace length distribution needs the trace's lengths")
        out = rng.choice(pool, size=n, replace=True).astype(np.int64)
    hi = dist.max if dist.max is not None else np.iinfo(np.int64).max
    return np.clip(out, dist.min, hi)
