"""Prefix caching (``kv.prefix_caching: true``): a hash chain over full prompt blocks.

Source: vLLM v1 automatic prefix caching (``vllm/v1/core/kv_cache_manager.py`` and
``block_pool.py``, 0.6-0.8): a full block's hash chains its parent's hash with its own tokens;
cached blocks are ref-counted; a freed block keeps its hash and goes to the free list, which
doubles as the eviction queue; a cache hit never covers the last prompt token. Eviction policies as
one-line key functions follow SGLang's radix cache (``lru``, ``lfu``, ``fifo``).

Hashes come from the trace (``RequestSpec.block_hashes``, one id per ``hash_block_tokens`` tokens,
512 for Mooncake), never from token contents: a KV block's hash chains (parent hash, the trace ids
of the hash blocks it overlaps, its token offset), so one 512-token hash block covers 512 /
``block_size`` KV blocks. A request without ``block_hashes`` is never cached.

Departures: free blocks without a hash are handed out before any cached block is evicted (vLLM
keeps them in one queue); the eviction key's clock is a counter of KV-manager calls, not time; a
block is registered in the cache when it is allocated for a step that fills it (as vLLM v1 does),
so a request admitted in the same step can hit it; blocks brought back by a swap-in are not
re-registered.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from sim.kv.blocks import KVManager


@dataclass(slots=True)
class BlockMeta:
    """What the eviction keys may read about a cached block (ticks count the KV manager's
    state-changing calls: allocations that take blocks, and frees)."""

    last_access: int = 0
    hits: int = 0
    cached_at: int = 0


EVICTION = {
    "lru": lambda m: m.last_access,
    "lfu": lambda m: (m.hits, m.last_access),
    "fifo": lambda m: m.cached_at,
}
"""Eviction policy -> key of a free cached block; the smallest key is evicted first."""


def kv_block_hashes(block_hashes: tuple[int, ...], hash_block_tokens: int, block_size: int,
                    prompt_tokens: int) -> list[int]:
    """Chained hashes of the FULL prompt KV blocks covered by the trace's hash ids."""
    out: list[int] = []
    parent = 0
    covered = min(prompt_tokens, len(block_hashes) * hash_block_tokens)
    for start in range(0, covered - block_size + 1, block_size):
        first, last = start // hash_block_tokens, (start + block_size - 1) // hash_block_tokens
        ids = block_hashes[first] if first == last else block_hashes[first:last + 1]
        parent = hash((parent, ids, start % hash_block_tokens))
        out.append(parent)
    return out


def usable_hit_tokens(hit_blocks: int, block_size: int, num_tokens: int) -> int:
    """Tokens a prefix hit may skip: whole hit blocks, never the last token of the sequence.

    The last prompt token is always recomputed on a full hit, because computing it is what
    produces the logits the first output token is sampled from (vLLM v1 caps a hit at
    ``num_tokens - 1``, which drops the last block when the prompt fills it exactly)."""
    return min(hit_blocks, (num_tokens - 1) // block_size) * block_size


class CachedBlockPool:
    """Blocks ``0 .. num_blocks-1``, ref-counted, each of which may carry a prefix hash.

    Free blocks without a hash form a FIFO list (handed out lowest-first at the start, so tests
    can assert exact ids); free blocks with a hash stay findable by their hash and wait in an
    eviction heap ordered by the policy's key.
    """

    def __init__(self, num_blocks: int, eviction: str = "lru"):
        if num_blocks <= 0:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self._free = deque(range(num_blocks))  # free blocks without a hash, oldest first
        self.key = EVICTION[eviction]
        self.ref = [0] * num_blocks
        self.meta = [BlockMeta() for _ in range(num_blocks)]
        self.hash_of: dict[int, int] = {}  # block -> hash
        self.block_of: dict[int, int] = {}  # hash -> block
        self._heap: list[tuple] = []  # (key, push order, block, version)
        self._version = [0] * num_blocks
        self._evictable = 0
        self._pushes = 0
        self.evictions = 0
        self.tick = 0

    @property
    def num_free(self) -> int:
        return len(self._free) + self._evictable

    @property
    def num_used(self) -> int:
        """Blocks referenced by a request (free cached blocks count as free)."""
        return self.num_blocks - self.num_free

    @property
    def num_referenced(self) -> int:
        """Blocks with a non-zero reference count, counted one by one (for checks)."""
        return sum(1 for r in self.ref if r)

    def take(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} blocks with {self.num_free} free")
        out = []
        for _ in range(n):
            b = self._free.popleft() if self._free else self._evict()
            self.ref[b] = 1
            out.append(b)
        return out

    def _evict(self) -> int:
        while True:
            _, _, b, version = heapq.heappop(self._heap)
            if version == self._version[b] and self.ref[b] == 0:
                break
        self._evictable -= 1
        self._version[b] += 1
        self.evictions += 1
        del self.block_of[self.hash_of.pop(b)]
        return b

    def claim(self, b: int) -> None:
        """Reference a cached block found by its hash (a hit)."""
        if self.ref[b] == 0:
            self._evictable -= 1
            self._version[b] += 1
        self.ref[b] += 1
        m = self.meta[b]
        m.hits += 1
        m.last_access = self.tick

    def give(self, blocks: list[int]) -> None:
        """Drop one reference from each block; unreferenced blocks become free (tail first, so
        a sequence's last blocks are evicted before its shared prefix)."""
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b]:
                continue
            if b in self.hash_of:
                self.meta[b].last_access = self.tick
                self._pushes += 1
                heapq.heappush(self._heap, (self.key(self.meta[b]), self._pushes, b, self._version[b]))
                self._evictable += 1
            else:
                self._free.append(b)

    def register(self, b: int, h: int) -> None:
        """Give a newly filled block its hash, unless another block already caches that hash."""
        if h in self.block_of or b in self.hash_of:
            return
        self.block_of[h] = b
        self.hash_of[b] = h
        self.meta[b] = BlockMeta(last_access=self.tick, hits=0, cached_at=self.tick)


class PrefixKVManager(KVManager):
    """``KVManager`` with prefix caching over a ``CachedBlockPool``: each request's block table
    (``tables``, block ids in order) beside the count every manager keeps (``held``)."""

    static_refusal = False  # an admission attempt looks the prefix up, which touches the cache
    covered_is_noop = False  # allocate registers newly full blocks in the cache even without growing
    bulk_growth = False  # growing may evict cached blocks and registers full ones

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, *, swap_blocks: int = 0,
                 eviction: str = "lru"):
        super().__init__(num_blocks, block_size, watermark, swap_blocks=swap_blocks)
        self.pool = CachedBlockPool(num_blocks, eviction)
        self.tables: dict[int, list[int]] = {}  # request id -> its blocks, in token order
        self._chains: dict[int, list[int]] = {}  # request id -> its full prompt blocks' hashes
        self._registered: dict[int, int] = {}  # request id -> leading blocks already offered to the cache
        self._last_chain: tuple = (None, [])
        self._last_hits: tuple = (None, 0, [])

    # free cached blocks count as free: the pool, not a count of blocks held, says what is in use
    @property
    def num_used(self) -> int:
        return self.pool.num_used

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    def can_allocate(self, n_blocks: int, *, admit: bool = False) -> bool:
        reserve = self.watermark_blocks if admit else 0
        return self.pool.num_free - n_blocks >= reserve

    def _take(self, req_id: int, n: int) -> None:
        self.tables.setdefault(req_id, []).extend(self.pool.take(n))
        self.held[req_id] = len(self.tables[req_id])

    def grow_one(self, req_id: int, total_tokens: int) -> bool:
        return self.allocate(req_id, total_tokens)  # may evict and registers full blocks

    def chain(self, spec) -> list[int]:
        """``spec``'s KV-block hash chain; the last one asked for is kept (the queue's head is
        asked every step while it waits)."""
        if spec.block_hashes is None:
            return []
        if self._last_chain[0] is not spec:
            self._last_chain = (spec, kv_block_hashes(spec.block_hashes, spec.hash_block_tokens, self.block_size,
                                                      spec.prompt_tokens))
        return self._last_chain[1]

    def _hit_blocks(self, chain: list[int]) -> list[int]:
        """Blocks caching ``chain``'s leading hashes. The answer for the last chain is kept until
        an eviction (registrations only extend it), since the queue's head asks every step."""
        block_of = self.pool.block_of
        memo_chain, memo_evictions, out = self._last_hits
        if memo_chain is not chain or memo_evictions != self.pool.evictions:
            out = []
        for h in chain[len(out):]:
            b = block_of.get(h)
            if b is None:
                break
            out.append(b)
        self._last_hits = (chain, self.pool.evictions, out)
        return out

    def prefix_hit(self, spec, num_tokens: int) -> int:
        hits = self._hit_blocks(self.chain(spec))
        return usable_hit_tokens(len(hits), self.block_size, num_tokens)

    def allocate(self, req_id: int, total_tokens: int, *, admit: bool = False, spec=None,
                 cached_tokens: int = 0) -> bool:
        pool = self.pool
        if req_id in self.tables and self.extra_blocks(req_id, total_tokens) == 0:
            # nothing to take: no tick, so the clock counts state changes, not calls (a policy
            # that re-asks every step and one that asks only when growing age blocks alike)
            self._register_full(req_id, total_tokens)
            return True
        pool.tick += 1
        if req_id not in self.tables and spec is not None:
            chain = self.chain(spec)
            hits = list(self._hit_blocks(chain)[: cached_tokens // self.block_size])
            if len(hits) * self.block_size < cached_tokens:
                return False  # the promised hit was evicted since prefix_hit answered
            fresh = max(0, self.blocks_for(total_tokens) - len(hits))
            if not self.can_allocate(fresh, admit=admit):
                return False
            if not self.can_allocate(fresh + sum(1 for b in hits if pool.ref[b] == 0), admit=admit):
                return False
            for b in hits:
                pool.claim(b)
            self.tables[req_id] = table = hits + pool.take(fresh)
            self.held[req_id] = len(table)
            self._chains[req_id] = chain
            self._registered[req_id] = len(hits)
        elif not super().allocate(req_id, total_tokens, admit=admit):
            return False
        self.tables.setdefault(req_id, [])  # an allocation of no blocks still opens the table
        self._register_full(req_id, total_tokens)
        return True

    def _register_full(self, req_id: int, total_tokens: int) -> None:
        chain = self._chains.get(req_id)
        if not chain:
            return
        table = self.tables[req_id]
        upto = min(len(chain), total_tokens // self.block_size)
        for j in range(self._registered[req_id], upto):
            self.pool.register(table[j], chain[j])
        self._registered[req_id] = max(upto, self._registered[req_id])

    def free(self, req_id: int) -> int:
        self.pool.tick += 1
        self._chains.pop(req_id, None)
        self._registered.pop(req_id, None)
        self.held.pop(req_id, None)
        blocks = self.tables.pop(req_id, ())
        self.pool.give(blocks)
        return len(blocks)

    @property
    def num_referenced(self) -> int:
        return self.pool.num_referenced
