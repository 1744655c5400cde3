"""Paged KV-cache memory: a pool of fixed-size blocks and the blocks each request holds.

The scheduler calls it; it never calls back and reads no globals. Allocation is all-or-nothing
and answers with a bool (never a sentinel id). Without prefix caching a block's identity never
matters (no two requests share one, and nothing reads which block holds what), so this manager
counts blocks: how many each request holds (``held``) and how many are in use. Prefix caching,
where blocks are shared and found by hash, keeps block ids (``sim.kv.prefix``).

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


class KVManager:
    """The blocks each request holds, counted, over one replica's pool.

    ``watermark`` (a fraction of the pool, vLLM's default 0.01) is kept free when admitting new
    requests so running ones can still grow.

    ``static_refusal`` is a capability the schedulers' ``steady`` reads: True when an allocation
    this manager refuses has no side effects and stays refused while free blocks only shrink
    (so a waiting request refused once need not be asked again during a run of decode steps).
    """

    static_refusal = True
    """(A manager whose refusals stay put only while certain blocks stay cached also says True,
    and names those blocks with ``evicts_watched``: the decode fast-forward stops before a step
    whose growth would evict one.)"""
    covered_is_noop = True
    """True when ``allocate`` for tokens a request's blocks already cover changes nothing (the
    schedulers then skip the call on their hot path; prefix caching registers full blocks then,
    so it answers per moment: read once per ``schedule_running``)."""
    tiered = False
    """True for a manager with lower tiers (``sim.kv.tiers``), whose admissions may load blocks
    (``record_loads``)."""
    bulk_growth = True
    """True when growing a request by a block is a plain count, so the decode fast-forward's
    block grower may grow many requests at once (``add_blocks``) instead of block by block in
    allocation order (``grow_one``)."""

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, *, swap_blocks: int = 0):
        if num_blocks <= 0:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_blocks)
        self.held: dict[int, int] = {}  # request id -> the GPU blocks it holds
        self._used = 0
        self.swap_blocks = swap_blocks
        self.swapped: dict[int, int] = {}  # request id -> its blocks held in host memory

    @property
    def num_used(self) -> int:
        return self._used

    @property
    def num_free(self) -> int:
        return self.num_blocks - self._used

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def extra_blocks(self, req_id: int, total_tokens: int) -> int:
        """Blocks ``req_id`` still needs so its blocks cover ``total_tokens``."""
        n = self.blocks_for(total_tokens) - self.held.get(req_id, 0)
        return n if n > 0 else 0

    def can_allocate(self, n_blocks: int, *, admit: bool = False) -> bool:
        reserve = self.watermark_blocks if admit else 0
        return self.num_blocks - self._used - n_blocks >= reserve

    def evicts_watched(self, n_blocks: int) -> bool:
        """Whether taking ``n_blocks`` now would evict a block that a refused admission's answer
        depends on (``static_refusal``); never here: no block is cached."""
        return False

    def prefix_hit(self, spec, num_tokens: int) -> int:
        """Leading tokens of ``spec``'s prompt whose KV is cached (always 0 without prefix caching)."""
        return 0

    def cached_blocks(self, chain: list[int]) -> int:
        """Leading blocks of ``chain`` (``sim.kv.prefix.kv_block_hashes``) cached here, read
        without side effects (for routers); always 0 without prefix caching."""
        return 0

    def allocate(self, req_id: int, total_tokens: int, *, admit: bool = False, spec=None,
                 cached_tokens: int = 0) -> bool:
        """Grow ``req_id``'s blocks to cover ``total_tokens``; False (and no change) if it can't.
        ``spec`` and ``cached_tokens`` (a ``prefix_hit`` answer) matter only with prefix caching."""
        n = self.extra_blocks(req_id, total_tokens)
        if n == 0:
            self.held.setdefault(req_id, 0)
            return True
        if not self.can_allocate(n, admit=admit):
            return False
        self._take(req_id, n)
        return True

    def _take(self, req_id: int, n: int) -> None:
        """Give ``req_id`` ``n`` more blocks (the caller checked they are free)."""
        self.held[req_id] = self.held.get(req_id, 0) + n
        self._used += n

    def grow_one(self, req_id: int, total_tokens: int) -> bool:
        """``allocate(req_id, total_tokens)`` when that needs exactly one more block (a decode
        step crossing a block boundary: the fast-forward's block-by-block path)."""
        if not self.can_allocate(1):
            return False
        self._take(req_id, 1)
        return True

    def add_blocks(self, grown: list[tuple[int, int]]) -> None:
        """(request id, blocks) pairs: give each request that many more blocks at once (``bulk_growth``;
        the caller checked ``can_allocate`` for their sum)."""
        held, total = self.held, 0
        for rid, n in grown:
            held[rid] += n
            total += n
        self._used += total

    def free(self, req_id: int) -> int:
        """Return ``req_id``'s blocks to the pool; the number freed."""
        n = self.held.pop(req_id, 0)
        self._used -= n
        return n

    # ---- preemption by swap ------------------------------------------------------------
    @property
    def swap_used(self) -> int:
        return sum(self.swapped.values())

    def is_swapped(self, req_id: int) -> bool:
        return req_id in self.swapped

    def can_swap_out(self, req_id: int) -> bool:
        """True when swapping is configured and the host space holds all of ``req_id``'s blocks."""
        n = self.held.get(req_id, 0)
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
        self._take(req_id, need)
        return True
