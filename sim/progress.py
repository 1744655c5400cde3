"""Progress of long work: a tqdm bar on a terminal (total and ETA), a one-line log every
``LOG_EVERY_S`` seconds otherwise (a CI log, a file, a pipe), as GuideLLM and pip do.

``Progress(total, desc, unit, mode)``: ``mode`` is "bar", "log" or None (nothing; ``--quiet``);
``auto_mode(enabled)`` picks it: None when disabled, a bar when stderr is a terminal, else the
log. ``update(n)`` counts work done; a total that was an estimate grows when the work outnumbers
it; ``close()`` ends the bar or writes the last log line.
"""
from __future__ import annotations

import os
import sys
import time

LOG_EVERY_S = 30.0
"""Seconds between two progress lines off a terminal."""


def auto_mode(enabled: bool | None) -> str | None:
    """None (no progress) when ``enabled`` is False; a bar on a terminal; else the periodic log.
    ``enabled=True`` forces the bar."""
    if enabled is False:
        return None
    if enabled is True or sys.stderr.isatty():
        return "bar"
    return "log"


def bar_columns() -> int | None:
    """The bar's width: the terminal's, or 80 where the terminal reports 0 columns (a
    pseudo-terminal without a size, where tqdm would draw an empty bar)."""
    try:
        return None if os.get_terminal_size(sys.stderr.fileno()).columns > 0 else 80
    except (OSError, ValueError, AttributeError):
        return 80


class Progress:
    def __init__(self, total: int | None, desc: str, unit: str, mode: str | None, *, clock=time.monotonic,
                 out=None):
        self.total, self.desc, self.unit, self.mode = total, desc, unit, mode
        self.n, self.clock, self.out = 0, clock, out
        self.t0 = self.last = clock()
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, leave=False, mininterval=0.5, ncols=bar_columns())

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.total is not None and self.n > self.total:
            self.total = self.n
            if self.bar is not None:
                self.bar.total = self.n
        if self.bar is not None:
            self.bar.update(n)
        elif self.mode == "log" and self.clock() - self.last >= LOG_EVERY_S:
            self.last = self.clock()
            self._say(self.line())

    def line(self) -> str:
        """``servesim: probes: 12 of about 40 runs, 3.2 min elapsed, about 7.0 min left``."""
        elapsed = self.clock() - self.t0
        of = f" of about {self.total:,}" if self.total else ""
        left = ""
        if self.total and self.n:
            left = f", about {_minutes(elapsed / self.n * (self.total - self.n))} left"
        return f"servesim: {self.desc}: {self.n:,}{of} {self.unit}s, {_minutes(elapsed)} elapsed{left}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "log" and self.clock() - self.t0 >= LOG_EVERY_S:
            self._say(self.line().replace(" of about", " of"))  # the last line: what was done, in how long

    def _say(self, text: str) -> None:
        print(text, file=self.out or sys.stderr, flush=True)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
