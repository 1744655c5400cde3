"""The profile file contract between ``kernels/`` and ``sim/`` (documented in docs/profiles.md).

A profile is a folder ``<root>/<hardware>/<model>/`` with one CSV per operator family and a
``meta.json``. Each CSV row is one grid point: its key columns, then the timing columns (all
times in microseconds). Standard library only, so the simulator can import it without torch.
"""
from __future__ import annotations

import csv
from pathlib import Path

KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("dtype", "tp", "op", "tokens", "groups", "m", "n", "k"),
    "attn_prefill": ("dtype", "tp", "q_heads", "kv_heads", "head_dim", "num_seqs", "chunk_tokens", "context_tokens"),
    "attn_decode": (
        "dtype", "tp", "q_heads", "kv_heads", "head_dim", "block_size",
        "batch", "context_min", "context_mean", "context_max", "kv_tokens_total",
    ),
    "elementwise": ("dtype", "tp", "op", "tokens", "hidden"),
    "sampling": ("dtype", "tp", "op", "batch", "vocab"),
    "collective": ("dtype", "op", "world_size", "bytes"),
}
STATS = ("time_us", "time_us_p10", "time_us_p90", "repeats")
FAMILIES = tuple(KEYS)
# Key columns holding text; every other key column is an integer.
TEXT_KEYS = ("dtype", "op")


def columns(family: str) -> tuple[str, ...]:
    return KEYS[family] + STATS


def key_of(family: str, row: dict) -> tuple[str, ...]:
    """The identity of a grid point, as strings (how it reads back from a CSV)."""
    return tuple(str(row[c]) for c in KEYS[family])


def read_rows(path: str | Path) -> list[dict]:
    """Rows of one profile CSV with key columns typed (int / str) and times as floats."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for c, v in r.items():
            if c in TEXT_KEYS:
                continue
            if v in ("", None):  # converted profiles may lack p10/p90/repeats
                r[c] = None
            else:
                r[c] = float(v) if c.startswith("time_us") else int(v)
    return rows


class RowWriter:
    """Appends rows to one family's CSV, flushing each, and knows which keys are already there."""

    def __init__(self, path: str | Path, family: str):
        self.family = family
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done = {key_of(family, r) for r in read_rows(self.path)} if self.path.exists() else set()
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._f = self.path.open("a", newline="")
        self._w = csv.DictWriter(self._f, fieldnames=columns(family))
        if new:
            self._w.writeheader()
            self._f.flush()

    def key(self, row: dict) -> tuple[str, ...]:
        return key_of(self.family, row)

    def write(self, row: dict) -> None:
        self._w.writerow({c: row.get(c) for c in columns(self.family)})
        self._f.flush()
        self.done.add(key_of(self.family, row))

    def close(self) -> None:
        self._f.close()


def decode_attention(folder: str | Path, default: str = "paged") -> str:
    """The decode-attention variant of a profile folder's ``attn_decode.csv``: ``contiguous`` when
    its rows have ``block_size`` 0 (``kernels.profile --attention contiguous``), ``paged`` when
    they have blocks; ``default`` when it has no rows."""
    rows = read_rows(Path(folder) / "attn_decode.csv")
    if not rows:
        return default
    return "contiguous" if all(r["block_size"] == 0 for r in rows) else "paged"
