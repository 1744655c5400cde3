"""Host load: recorded beside every profile and validation, and warned about when it makes timings
doubtful. Standard library only (``servesim calibrate-engine`` records it without torch)."""
from __future__ import annotations

import os


def host_load() -> dict:
    """The host's load averages (1, 5, 15 min) and CPU count, for meta.json."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        load = None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return {"loadavg": load, "cpus": cpus}


LOAD_PER_CPU_LIMIT = 1.0
"""Above this 1-minute load average per usable CPU, timings are flagged: even process time is
inflated by the caches and memory bandwidth other jobs share (measured here: kernels longer than
about 3 ms ran 1.4-5.2x slower by wall clock at load 8-22 on 2 cores, short ones did not)."""


def load_warning(load: dict, what: str, clock: str) -> str | None:
    """A one-line warning when ``load`` (``host_load()``) makes timings of ``what`` doubtful."""
    la = load.get("loadavg")
    if not la:
        return None
    per = la[0] / max(1, load.get("cpus") or 1)
    if per <= LOAD_PER_CPU_LIMIT:
        return None
    how = ("timed in process time, which descheduling does not inflate but shared caches and memory "
           "bandwidth still do" if clock == "process_time" else f"timed by {clock}")
    return (f"{what} taken at load average {la[0]:.1f} on {load.get('cpus')} CPU(s) "
            f"({per:.1f} per CPU, above {LOAD_PER_CPU_LIMIT:g}); {how}: its figures may be inflated and "
            "differ between runs, take it again on a quiet machine")
