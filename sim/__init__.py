"""servesim's simulator: pure Python, CPU only, never imports torch.

The public API is ``from sim import simulate``. Imports are lazy so that light modules
(``sim.catalog``, ``sim.cost.ops``) can be used by ``kernels/`` on a machine that has only
torch, numpy and pyyaml.
"""
from __future__ import annotations

__all__ = ["simulate", "Results"]


def __getattr__(name: str):
    if name in ("simulate", "Results"):
        from sim import api

        return getattr(api, name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
