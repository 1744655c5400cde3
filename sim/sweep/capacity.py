"""SLO capacity: the highest arrival rate a config sustains within percentile SLOs.

A probe at rate r (one seed) *passes* when every arrived request completed, p99 TTFT <=
``ttft_p99_s``, p99 TPOT <= ``tpot_p99_s`` and the run's load verdict is not "overloaded"
(``sim/metrics/verdict.py``: a queue still growing at the last arrival meets a TTFT limit only
because the run ended; a short run that is overloaded fails too). The search, per seed:

1. Bracket: probe ``start_rate``; while it passes, double (up to ``max_rate``); while it fails,
   halve (down to ``min_rate``, below which the capacity is 0: the SLOs are out of reach even
   when idle, e.g. a TPOT limit faster than one decode step).
2. Bisect geometrically between the highest passing rate ``lo`` and the lowest failing rate
   ``hi`` until ``hi / lo <= 1 + rel_tol``; the capacity is ``lo`` (a rate that was simulated
   and passed).
3. Early stop: each bracketing probe (the doubling or halving steps, which can land far past
   the capacity) first simulates the first ``early_stop_fraction`` of the requests
   (the workload streams are prefix-stable: those are exactly the full run's first requests).
   When that short run already misses an SLO by ``early_stop_factor`` (p99 TTFT or TPOT above
   factor x limit) the system is clearly overloaded (the queue grows without bound) and the full
   run is skipped. Under FCFS the later arrivals only add load, so this rarely changes a verdict;
   set ``early_stop: false`` to always run in full. Bisection probes lie within a factor of two
   of the capacity, where a short run seldom decides, so they run in full directly.

Finite runs: a short burst of requests can be absorbed by an overloaded system within the TTFT
limit (the queue has no time to grow). Each probe therefore simulates at least
``rate x min_window_s`` requests (capped at ``max_requests``), so arrivals span at least 20 s by
default: an arrival rate that exceeds the service rate by a fraction f builds a backlog that
delays the last arrivals by about f x window, so with the default 2 s TTFT limit overloads beyond
~10% show up as TTFT violations. Below that the configured ``num_requests`` is used. The window
is deliberately independent of the SLOs, so that changing an SLO changes only the verdicts, never
the simulations.

Determinism and monotonicity: probes are a pure function of (config, seed, rate), the rates
follow from ``start_rate`` and the verdicts alone, and every probe is cached by its config key.
If predicate B passes wherever A passes (looser SLOs; more replicas, which the simulator gives
lower latency at equal rate), the two searches probe the same rates until the first rate where
they disagree; there A's upper bound and B's lower bound become that rate, so B's answer is
never below A's. Hence: tighter SLOs never raise the capacity, more replicas never lower it
(for the same ``start_rate``, seeds and tolerance). The spread over seeds is reported as mean,
min and max; ``min`` is the rate every seed sustained (what ``plan`` sizes fleets with).
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field



PROBE_REQUESTS = 1000
"""Requests per probe unless the caller says otherwise: the one default of ``capacity`` and
``plan`` (so both give the same answer for the same candidate)."""


@dataclass(frozen=True)
class SearchSettings:
    ttft_p99_s: float = 2.0
    tpot_p99_s: float = 0.1
    seeds: tuple[int, ...] = (0, 1, 2)
    start_rate: float = 1.0
    rel_tol: float = 0.02
    min_rate: float = 1 / 64
    max_rate: float = 4096.0
    early_stop: bool = True
    early_stop_fraction: float = 0.25
    early_stop_factor: float = 2.0
    min_short_requests: int = 50
    min_window_s: float = 20.0
    max_requests: int = 20000
    min_requests: int = 200
    """A full probe simulates at least this many requests: the p99 of fewer than ~100 is just
    the maximum, too noisy to call a rate "within SLOs"."""


@dataclass
class Probe:
    rate: float
    seed: int
    stage: str  # "short" or "full"
    passed: bool
    reason: str
    key: str
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    verdict: str | None = None


@dataclass
class SeedCapacity:
    seed: int
    rps: float  # the highest rate that passed
    capped: bool  # passed at max_rate: the capacity is at least this
    reason: str  # why the lowest failing rate failed
    probes: list = field(default_factory=list)
    fail_rps: float | None = None  # the lowest rate that failed: the capacity lies in [rps, fail_rps)


# ------------------------------------------------------------------------------- config edits


def set_key(cfg: dict, dotted: str, value) -> dict:
    """A copy of ``cfg`` with one dotted key set (sections created as needed)."""
    out = copy.deepcopy(cfg)
    node = out
    *path, last = dotted.split(".")
    for p in path:
        node = node.setdefault(p, {})
    node[last] = value
    return out


def with_slos(cfg: dict, s: "SearchSettings") -> dict:
    """The config with its SLO section set to the search's p99 limits (for goodput). ``capacity``
    and ``plan`` both apply it, so the same candidate is the same runs (shared by the store)."""
    return set_key(set_key(cfg, "slo.ttft_s", s.ttft_p99_s), "slo.tpot_s", s.tpot_p99_s)


def with_rate(cfg: dict, rate: float) -> dict:
    """The config at arrival rate ``rate`` (a trace is rescaled to it)."""
    if (cfg.get("workload") or {}).get("trace"):
        return set_key(set_key(cfg, "workload.trace.rate", rate), "workload.trace.rate_scale", 1.0)
    return set_key(cfg, "workload.rate", rate)


def num_requests(cfg: dict) -> int | None:
    w = cfg.get("workload") or {}
    if w.get("trace"):
        return w["trace"].get("num_requests")
    if "num_requests" in w:
        return w["num_requests"]
    from sim.workload.config import WorkloadConfig

    return WorkloadConfig.model_fields["num_requests"].default


def with_num_requests(cfg: dict, n: int) -> dict:
    if (cfg.get("workload") or {}).get("trace"):
        return set_key(cfg, "workload.trace.num_requests", n)
    return set_key(cfg, "workload.num_requests", n)


def _round(x: float) -> float:
    """Rates to 6 significant digits (stable keys and tidy tables)."""
    return float(f"{x:.6g}")


# ------------------------------------------------------------------------------- verdicts


def judge(summary: dict | None, s: SearchSettings, factor: float = 1.0) -> tuple[bool, str]:
    """Pass or fail one run against the percentile SLOs (limits scaled by ``factor``)."""
    if summary is None:
        return False, "run failed"
    r = summary["requests"]
    if factor == 1.0 and r["completed"] < r["arrived"]:
        return False, f"{r['arrived'] - r['completed']} of {r['arrived']} requests not completed"
    if factor == 1.0 and r["completed"] < s.min_requests:
        return False, f"only {r['completed']} requests: too few to judge a p99 (at least {s.min_requests})"
    ttft, tpot = summary["ttft_s"]["p99"], summary["tpot_s"]["p99"]
    if ttft is None:
        return False, "no request completed"
    if ttft > factor * s.ttft_p99_s:
        return False, f"p99 TTFT {ttft:.3g} s > {factor * s.ttft_p99_s:g} s"
    if tpot is not None and tpot > factor * s.tpot_p99_s:
        return False, f"p99 TPOT {tpot * 1e3:.3g} ms > {factor * s.tpot_p99_s * 1e3:g} ms"
    v = summary.get("verdict") or {}
    if v.get("state") == "overloaded":  # never "within SLOs": its latencies grow with the run's length
        return False, f"overloaded: {v['why']}"
    return True, "within SLOs"


def sized(cfg: dict, rate: float, s: SearchSettings) -> dict:
    """The config at ``rate`` with enough requests to judge a p99: at least ``min_requests``
    and ``rate x min_window_s`` (arrivals must span a window long enough for an overload to
    show in TTFT), at most ``max_requests`` for the window. Capacity probes and plan's fleet
    checks both use it."""
    full = with_rate(cfg, rate)
    n = num_requests(full)
    if n:
        need = max(s.min_requests, min(s.max_requests, math.ceil(rate * s.min_window_s)))
        if need > n:
            full = with_num_requests(full, need)
    return full


def _probe(cfg: dict, seed: int, rate: float, s: SearchSettings, log: list, bracketing: bool):
    """Generator: yields the runs of one probe, returns (passed, reason)."""
    full = sized({**cfg, "seed": seed}, rate, s)
    n = num_requests(full)
    if s.early_stop and bracketing and n:
        n_short = max(s.min_short_requests, int(n * s.early_stop_fraction))
        if n_short < n:
            res = yield with_num_requests(full, n_short)
            if res["status"] != "ok":
                why = (res.get("error") or "run failed").splitlines()[0]
                log.append(_probe_row(rate, seed, "short", False, why, res))
                return False, why
            ok, why = judge(res.get("summary"), s, factor=s.early_stop_factor)
            if ok:  # a short run decides only an overload; passing it says nothing about the SLOs
                why = f"not clearly overloaded within the first {n_short} requests (the full run decides)"
            log.append(_probe_row(rate, seed, "short", ok, why, res))
            if not ok:
                return False, f"misses an SLO by {s.early_stop_factor:g}x within the first {n_short} requests: {why}"
    res = yield full
    if res["status"] != "ok":
        why = (res.get("error") or "run failed").splitlines()[0]
        log.append(_probe_row(rate, seed, "full", False, why, res))
        return False, why
    ok, why = judge(res["summary"], s)
    log.append(_probe_row(rate, seed, "full", ok, why, res))
    return ok, why


def _probe_row(rate, seed, stage, ok, why, res) -> Probe:
    sm = res.get("summary") or {}
    return Probe(rate, seed, stage, ok, why, res["key"], (sm.get("ttft_s") or {}).get("p99"),
                 (sm.get("tpot_s") or {}).get("p99"), (sm.get("verdict") or {}).get("state"))


def search_seed(cfg: dict, seed: int, s: SearchSettings):
    """Generator task: the capacity of ``cfg`` for one seed (see the module docstring)."""
    log: list[Probe] = []
    r = _round(s.start_rate)
    ok, why = yield from _probe(cfg, seed, r, s, log, True)
    fail_reason = why
    if ok:
        lo, hi = r, None
        while hi is None:
            nxt = _round(lo * 2)
            if nxt > s.max_rate:
                return SeedCapacity(seed, lo, True, f"passed at max_rate {lo:g}", log)
            ok, why = yield from _probe(cfg, seed, nxt, s, log, True)
            if ok:
                lo = nxt
            else:
                hi, fail_reason = nxt, why
    else:
        lo, hi = None, r
        while lo is None:
            nxt = _round(hi / 2)
            if nxt < s.min_rate:
                return SeedCapacity(seed, 0.0, False, f"fails even at {hi:g} req/s: {fail_reason}", log, hi)
            ok, why = yield from _probe(cfg, seed, nxt, s, log, True)
            if ok:
                lo = nxt
            else:
                hi, fail_reason = nxt, why
    while hi / lo > 1 + s.rel_tol:
        mid = _round(math.sqrt(lo * hi))
        if mid <= lo or mid >= hi:
            break
        ok, why = yield from _probe(cfg, seed, mid, s, log, False)
        if ok:
            lo = mid
        else:
            hi, fail_reason = mid, why
    return SeedCapacity(seed, lo, False, f"at {hi:g} req/s: {fail_reason}", log, hi)


@dataclass
class Capacity:
    """The capacity of one config over seeds."""

    per_seed: list[SeedCapacity]
    settings: SearchSettings

    @property
    def rates(self) -> list[float]:
        return [c.rps for c in self.per_seed]

    @property
    def mean(self) -> float:
        return sum(self.rates) / len(self.rates)

    @property
    def min(self) -> float:
        return min(self.rates)

    @property
    def max(self) -> float:
        return max(self.rates)

    @property
    def precision(self) -> float:
        """The largest relative width of a seed's bracket: each seed's capacity lies in
        [rps, fail_rps), so the answers are exact to within this fraction (at most ``rel_tol``
        unless bisection stopped on rounding)."""
        w = [c.fail_rps / c.rps - 1 for c in self.per_seed if c.fail_rps and c.rps > 0]
        return max(w) if w else 0.0

    def as_dict(self) -> dict:
        return {
            "rps": {"min": self.min, "mean": self.mean, "max": self.max},
            "precision": self.precision,
            "per_seed": [{"seed": c.seed, "rps": c.rps, "fail_rps": c.fail_rps, "capped": c.capped, "limit": c.reason,
                          "probes": [asdict(p) for p in c.probes]} for c in self.per_seed],
            "settings": asdict(self.settings),
        }


def probe_estimate(s: SearchSettings, searches: int) -> int:
    """About how many runs ``searches`` capacity searches take (for a progress bar's total and
    ETA): a bracket of ~5 doublings with their short runs, then the bisection to ``rel_tol``."""
    bisect = math.ceil(math.log2(math.log(2) / math.log1p(s.rel_tol))) if s.rel_tol < 1 else 0
    return searches * (5 * (2 if s.early_stop else 1) + bisect)


def capacity_tasks(cfg: dict, s: SearchSettings, tag=()) -> dict:
    """One search task per seed, named ``(*tag, seed)``."""
    return {(*tag, seed): search_seed(cfg, seed, s) for seed in s.seeds}


def find_capacity(cfg: dict, s: SearchSettings, driver) -> Capacity:
    """Run the per-seed searches for ``cfg`` on ``driver`` (a ``runner.Driver``)."""
    res = driver.run(capacity_tasks(cfg, s))
    return Capacity([res[(seed,)] for seed in s.seeds], s)
