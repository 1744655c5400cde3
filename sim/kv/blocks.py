"""Paged KV-cache memory: a pool of fixed-size blocks and each request's block table.

The scheduler calls it; it never calls back and reads no globals. Allocation is all-or-nothing
and answers with a bool (never a sentinel id). Block ids are handed out lowest-first from a
free list, so tests can assert exact ids.

Preemption by swap (``kv.preemption: swap``) lives here too: a victim's blocks move to a
bounded host swap space (``swap_blocks``, counted in GPU-block units) and come back, as new
GPU blocks, when it is readmitted; its computed tokens are kept. The scheduler falls back to
recompute when ``can_swap_out`` says the host space is full. Prefix caching is the subclass
``sim.kv.prefix.PrefixKVManager``; without it ``prefix_hit`` is always 0.
"""
from __future__ import annotations

DEFAULT_BLOCK_SIZE = 16
"""Tokens per KV block unless ``kv.block_size`` says otherwise: vLLM's default ``--block-size``
on CUDA (16). The one source of this default: the config, the cost models and the real replay
of calibration/ read it from here."""


class BlockPool:
    """Fixed-size blocks ``0 .. num_blocks-1``; freed blocks go to the back of the free list.

    The free list is a FIFO queue kept as a Python list and a head index, so taking a prompt's
    blocks is one slice, not one pop per block."""

    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self._free: list[int] = list(range(num_blocks))
        self._head = 0  # _free[_head:] are the free blocks, oldest first

    @property
    def num_free(self) -> int:
        return len(self._free) - self._head

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free) + self._head

    def take(self, n: int) -> list[int]:
        h = self._head
        if n > len(self._free) - h:
            raise RuntimeError(f"asked for {n} blocks with {len(self._free) - h} free")
        out = self._free[h:h + n]
        self._head = h + n
        return out

    def take_one(self) -> int | None:
        """The next free block, or None when none is free."""
        h = self._head
        if h == len(self._free):
            return None
        self._head = h + 1
        return self._free[h]

    def free_blocks(self) -> list[int]:
        """The free blocks, in the order they will be handed out."""
        return self._free[self._head:]

    def give(self, blocks: list[int]) -> None:
        free = self._free
        if self._head > 4096 and 2 * self._head > len(free):  # drop the taken prefix now and then
            del free[:self._head]
            self._head = 0
        free.extend(blocks)


class KVManager:
    """Block tables per request over one replica's pool.

    ``watermark`` (a fraction of the pool, vLLM's default 0.01) is kept free when admitting new
    requests so running ones can still grow.

    ``static_refusal`` is a capability the schedulers' ``steady`` reads: True when an allocation
    this manager refuses has no side effects and stays refused while free blocks only shrink
    (so a waiting request refused once need not be asked again during a run of decode steps).
    """

    static_refusal = True
    covered_is_noop = True
    bulk_growth = True
    """True when ``grow_one`` is a plain take from the free list, so several can be taken at
    once in the same order (the decode fast-forward's block grower)."""
    """True when ``allocate`` for tokens a request's table already covers changes nothing (the
    schedulers then skip the call on their hot path; prefix caching registers full blocks then)."""

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, *, swap_blocks: int = 0):
        self.pool = self._make_pool(num_blocks)
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_blocks)
        self.tables: dict[int, list[int]] = {}
        self.swap_blocks = swap_blocks
        self.swapped: dict[int, int] = {}  # request id -> its blocks held in host memory

    def _make_pool(self, num_blocks: int) -> BlockPool:
        return BlockPool(num_blocks)

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_used(self) -> int:
        return self.pool.num_used

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def extra_blocks(self, req_id: int, total_tokens: int) -> int:
        """Blocks ``req_id`` still needs so its table covers ``total_tokens`` tokens."""
        n = self.blocks_for(total_tokens) - len(self.tables.get(req_id, ()))
        return n if n > 0 else 0

    def can_allocate(self, n_blocks: int, *, admit: bool = False) -> bool:
        reserve = self.watermark_blocks if admit else 0
        return self.pool.num_free - n_blocks >= reserve

    def prefix_hit(self, spec, num_tokens: int) -> int:
        """Leading tokens of ``spec``'s prompt whose KV is cached (always 0 without prefix caching)."""
        return 0

    def allocate(self, req_id: int, total_tokens: int, *, admit: bool = False, spec=None,
                 cached_tokens: int = 0) -> bool:
        """Grow ``req_id``'s table to cover ``total_tokens``; False (and no change) if it can't.
        ``spec`` and ``cached_tokens`` (a ``prefix_hit`` answer) matter only with prefix caching."""
        n = self.extra_blocks(req_id, total_tokens)
        if n == 0:
            self.tables.setdefault(req_id, [])
            return True
        if not self.can_allocate(n, admit=admit):
            return False
        self.tables.setdefault(req_id, []).extend(self.pool.take(n))
        return True

    def grow_one(self, req_id: int, total_tokens: int) -> bool:
        """``allocate(req_id, total_tokens)`` when that needs exactly one more block (a decode
        step crossing a block boundary; the fast-forward's hot path)."""
        b = self.pool.take_one()
        if b is None:
            return False
        self.tables[req_id].append(b)
        return True

    def free(self, req_id: int) -> int:
        """Return ``req_id``'s blocks to the pool; the number freed."""
        blocks = self.tables.pop(req_id, ())
        self.pool.give(blocks)
        return len(blocks)

    # ---- preemption by swap ------------------------------------------------------------
    @property
    def swap_used(self) -> int:
        return sum(self.swapped.values())

    def is_swapped(self, req_id: int) -> bool:
        return req_id in self.swapped

    def can_swap_out(self, req_id: int) -> bool:
        """True when swapping is configured and the host space holds all of ``req_id``'s blocks."""
        n = len(self.tables.get(req_id, ()))
        return self.swap_blocks > 0 and self.swap_used + n <= self.swap_blocks

    def swap_out(self, req_id: int) -> int:
        """Move ``req_id``'s blocks to host memory (their GPU blocks are freed); the number moved."""
        n = self.free(req_id)
        self.swapped[req_id] = n
        return n

    def swap_in(self, req_id: int, total_tokens: int) -> bool:
        """Bring ``req_id``'s blocks back into new GPU blocks, grown to cover ``total_tokens``;
        all-or-nothing. No watermark: the request was admitted once already."""
        need = max(self.swapped[req_id], self.blocks_for(total_tokens))
        if not self.can_allocate(need):
            return False
        del self.swapped[req_id]
        self.tables[req_id] = self.pool.take(need)
        return True
