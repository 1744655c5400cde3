"""Many simulations: sweeps, SLO capacity search, fleet planning, A/B statistics, reports.

Every run goes through one store (``store.py``) keyed by a hash of its fully resolved config,
and one driver (``runner.py``) that feeds a local process pool, a Ray cluster or the current
process. Searches (capacity, plan) are generators that yield the configs they need and receive
the results, so the same cache, parallelism and resume logic serve all of them. See
docs/planning.md.
"""
from sim.sweep.store import RunStore, config_key, flatten_summary

__all__ = ["RunStore", "config_key", "flatten_summary"]
