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
from operator import countOf

from sim.kv.blocks import KVManager


EVICTION = {
    "lru": lambda last_access, hits, cached_at: last_access,
    "lfu": lambda last_access, hits, cached_at: (hits, last_access),
    "fifo": lambda last_access, hits, cached_at: cached_at,
}
"""Eviction policy -> key of a free cached block from what it may read about it (ticks count the
KV manager's state-changing calls: allocations that take blocks, and frees); the smallest key is
evicted first, ties in the order the blocks were freed."""

IN_FREE_ORDER = frozenset({"lru"})
"""Policies whose key is the tick at which a block was freed: keys never decrease in the order
blocks are freed, so that order is the eviction order and a queue replaces the heap."""


def kv_block_hashes(block_hashes: tuple[int, ...], hash_block_tokens: int, block_size: int,
                    prompt_tokens: int) -> list[int]:
    """Keys of the FULL prompt KV blocks covered by the trace's hash ids: two blocks get equal
    keys exactly when they sit at the same place after the same hash ids.

    When ``block_size`` divides ``hash_block_tokens`` (the usual case: 16 into Mooncake's 512)
    a chain over the hash ids is computed once per hash block and a KV block's key is that
    chain's value with the block's place inside the hash block in its low bits; otherwise each
    KV block chains (parent key, the ids of the hash blocks it overlaps, its token offset)."""
    covered = min(prompt_tokens, len(block_hashes) * hash_block_tokens)
    n = covered // block_size
    if n <= 0:
        return []
    if hash_block_tokens % block_size == 0:
        m = hash_block_tokens // block_size
        shift = m.bit_length()
        parent, bases = 0, []
        for i in block_hashes[: -(-n // m)]:
            parent = hash((parent, i))
            bases.append(parent << shift)
        if m == 1:
            return bases
        out: list[int] = []
        for g in bases:
            out.extend(range(g, g + m))  # g + 0 .. g + m - 1
        del out[n:]
        return out
    out: list[int] = []
    parent = 0
    for start in range(0, n * block_size, block_size):
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


class _Run:
    """Free cached blocks that one ``give`` queued (``IN_FREE_ORDER``), in eviction order, with
    the hash each carries (``hashes[i]`` is ``blocks[i]``'s, so an eviction reads the hashes it
    drops in order instead of block by block): the next one to evict is ``blocks[head]``;
    ``stale`` counts the entries past ``head`` whose block was claimed back since (a block's entry
    is live while ``CachedBlockPool._ref`` names this run for it: it is free, and this is the
    last run it was freed into)."""

    __slots__ = ("blocks", "hashes", "head", "stale")

    def __init__(self, blocks: list[int], hashes: list[int]):
        self.blocks, self.hashes, self.head, self.stale = blocks, hashes, 0, 0


class CachedBlockPool:
    """Blocks ``0 .. num_blocks-1``, ref-counted, each of which may carry a prefix hash.

    Free blocks without a hash form a FIFO list (handed out lowest-first at the start, so tests
    can assert exact ids); free blocks with a hash stay findable by their hash and wait to be
    evicted in the policy's key order. For a policy whose key is the free tick
    (``IN_FREE_ORDER``) that order is the order blocks were freed, kept as a queue of runs (the
    blocks one ``give`` freed, ``_Run``): a run with no stale entry is evicted by slicing it, a
    block claimed back leaves a stale entry that is skipped when it is reached (a free cached
    block's reference count is replaced by the run it waits in, ``_ref``; an entry is live when
    that is its run). Other policies use a heap whose entries carry
    the block's version (bumped when it is claimed). Per block, each operation costs a few list
    stores at most (O(log n) per heap push or pop); nothing walks the pool.
    """

    on_evict = None
    """Called with the hashes of the blocks each eviction drops, oldest first (a tiered cache's
    host tier: ``sim.kv.tiers``); None: they are lost."""

    def __init__(self, num_blocks: int, eviction: str = "lru"):
        if num_blocks <= 0:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))  # free blocks without a hash, oldest first, from _free_head on
        self._free_head = 0
        self.key = EVICTION[eviction]
        self.in_free_order = eviction in IN_FREE_ORDER
        # block -> how many requests hold it; under ``IN_FREE_ORDER`` a free cached block holds
        # the ``_Run`` it waits in instead of 0 (one store frees it into its run; ``ref`` is the
        # plain view)
        self._ref: list = [0] * num_blocks
        # block -> the last hash a per-block registration gave it (every registration under a
        # heap policy; not lru's registrations in bulk, whose hashes the tables' chains and the
        # runs hold). It carries it only while ``block_of`` maps that hash back to it (an
        # eviction drops the hash from ``block_of`` and leaves this entry); ``hash_of`` is the
        # exact view, from ``block_of``.
        self._hash_of: list[int | None] = [None] * num_blocks
        self.block_of: dict[int, int] = {}  # hash -> block
        # what the eviction key may read about each block (kept only for a heap's keys)
        self.last_access = [0] * num_blocks
        self.hits = [0] * num_blocks
        self.cached_at = [0] * num_blocks
        self._queue: deque[_Run] = deque()  # IN_FREE_ORDER: runs of free cached blocks, in the order freed
        self._heap: list[tuple] = []  # otherwise: (key, push order, block, version)
        self._version = [0] * num_blocks
        self._evictable = 0
        self._pushes = 0
        self.evictions = 0
        self.tick = 0
        # blocks whose eviction a hit lookup must hear of (block -> its place in the last hit
        # list, see ``PrefixKVManager._hit_blocks``) and the first such place evicted since
        self.watched: dict[int, int] = {}
        self.cut: int | None = None
        self.watched_free = 0  # watched blocks that are free (reference count 0)

    @property
    def num_free(self) -> int:
        return len(self._free) - self._free_head + self._evictable

    def _carried(self) -> dict[int, int]:
        """Block -> the hash it carries, for the blocks that carry one (``block_of`` inverted:
        a scan, for the paths a request's table and chain do not serve)."""
        return {b: h for h, b in self.block_of.items()}

    @property
    def hash_of(self) -> list[int | None]:
        """Block -> the hash it carries, or None (built on each read: for checks and tests)."""
        carried = self._carried()
        return [carried.get(b) for b in range(self.num_blocks)]

    @property
    def num_plain_free(self) -> int:
        """Free blocks without a hash (taken before any cached block is evicted)."""
        return len(self._free) - self._free_head

    def free_blocks(self) -> list[int]:
        """The free blocks without a hash, in the order they will be handed out (for checks)."""
        return self._free[self._free_head:]

    @property
    def num_used(self) -> int:
        """Blocks referenced by a request (free cached blocks count as free)."""
        return self.num_blocks - self.num_free

    @property
    def num_referenced(self) -> int:
        """Blocks with a non-zero reference count, counted one by one (for checks)."""
        return sum(1 for r in self._ref if r.__class__ is int and r)

    @property
    def ref(self) -> list[int]:
        """Block -> how many requests hold it (built on each read: for checks and tests)."""
        return [r if r.__class__ is int else 0 for r in self._ref]

    def _nfree(self, blocks) -> int:
        """How many of ``blocks`` (each carrying a hash) are free."""
        if not blocks:
            return 0
        refs = list(map(self._ref.__getitem__, blocks))
        if not self.in_free_order:
            return countOf(refs, 0)
        last = refs[-1]
        if countOf(refs, last) == len(refs):  # (usually: all held once, or all free in one run)
            return 0 if last.__class__ is int else len(refs)
        return countOf(map(type, refs), _Run)

    def is_free(self, b: int) -> bool:
        r = self._ref[b]
        return r.__class__ is not int or not r

    @property
    def num_evictable(self) -> int:
        """Free blocks that still carry a hash (findable by a hit until evicted)."""
        return self._evictable

    def take(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} blocks with {self.num_free} free")
        free, head = self._free, self._free_head
        k = min(n, len(free) - head)
        out = free[head:head + k]
        head += k
        if head > 4096 and 2 * head > len(free):  # drop the handed-out front now and then
            del free[:head]
            head = 0
        self._free_head = head
        ref = self._ref
        for b in out:
            ref[b] = 1
        if k < n:
            out += self._evict(n - k)  # (referenced there)
        return out

    def take_one(self) -> int:
        """``take(1)[0]`` (a decode's growth: one block per call, the most frequent call), without
        building lists when the block is a plain free one or the head of a clean run."""
        free, head = self._free, self._free_head
        if head < len(free):
            b = free[head]
            head += 1
            if head > 4096 and 2 * head > len(free):  # (as ``take``)
                del free[:head]
                head = 0
            self._free_head = head
            self._ref[b] = 1
            return b
        if not self.in_free_order or not self._evictable:
            return self.take(1)[0]
        run = self._queue[0]  # ``_evict(1)`` on a clean run: its next entry
        i = run.head
        if run.stale or i + 1 >= len(run.blocks):  # (stale entries to skip, or the run's last entry or none)
            return self.take(1)[0]
        b, h = run.blocks[i], run.hashes[i]
        run.head = i + 1
        if self.on_evict is not None:
            self.on_evict([h])
        del self.block_of[h]
        self._ref[b] = 1
        if self.watched:
            p = self.watched.pop(b, None)
            if p is not None:
                self.watched_free -= 1
                if self.cut is None or p < self.cut:
                    self.cut = p
        self._evictable -= 1
        self.evictions += 1
        return b

    def evicts_any(self, n: int, blocks: dict) -> bool:
        """Whether the next ``n`` evictions (the ``n`` free cached blocks ``_evict`` would take
        now) include one of ``blocks`` (a dict keyed by block); changes nothing (a heap's entries
        popped to look are pushed back: its pops follow the entries' keys, which are unique, not
        its layout)."""
        if n <= 0:
            return False
        if self.in_free_order:
            keys, ref, seen = blocks.keys(), self._ref, 0
            for run in self._queue:
                rb, h = run.blocks, run.head
                if not run.stale:
                    seg = rb[h:h + n - seen]
                    if not keys.isdisjoint(seg):
                        return True
                    seen += len(seg)
                else:
                    for i in range(h, len(rb)):
                        b = rb[i]
                        if ref[b] is not run:  # a stale entry, skipped as _evict skips it
                            continue
                        if b in blocks:
                            return True
                        seen += 1
                        if seen == n:
                            break
                if seen >= n:
                    return False
            return False
        heap, version, ref, popped, hit, seen = self._heap, self._version, self._ref, [], False, 0
        while seen < n and heap:
            e = heapq.heappop(heap)
            popped.append(e)
            b = e[2]
            if e[3] == version[b] and ref[b] == 0:
                if b in blocks:
                    hit = True
                    break
                seen += 1
        for e in popped:
            heapq.heappush(heap, e)
        return hit

    def next_evicted(self, n: int, hashes: bool = False) -> list[int]:
        """The blocks the next ``n`` evictions would take (fewer when fewer are free and cached),
        in that order, or with ``hashes`` the hashes they carry; changes nothing (as
        ``evicts_any``)."""
        out: list[int] = []
        if n <= 0:
            return out
        if self.in_free_order:
            ref = self._ref
            for run in self._queue:
                rb, h = run.blocks, run.head
                got = run.hashes if hashes else rb
                if not run.stale:
                    out += got[h:h + n - len(out)]
                else:
                    for i in range(h, len(rb)):
                        if ref[rb[i]] is run:
                            out.append(got[i])
                            if len(out) == n:
                                break
                if len(out) >= n:
                    break
            return out
        heap, version, ref, popped = self._heap, self._version, self._ref, []
        while len(out) < n and heap:
            e = heapq.heappop(heap)
            popped.append(e)
            b = e[2]
            if e[3] == version[b] and ref[b] == 0:
                out.append(b)
        for e in popped:
            heapq.heappush(heap, e)
        return list(map(self._hash_of.__getitem__, out)) if hashes else out

    def _evict(self, n: int) -> list[int]:
        """The ``n`` free cached blocks with the smallest keys, their hashes dropped, each now
        referenced once (``take`` hands them out)."""
        block_of, watched = self.block_of, self.watched
        if self.in_free_order:
            queue, ref, out, hashes, need = self._queue, self._ref, [], [], n
            while need:
                run = queue[0]
                rb, h = run.blocks, run.head
                if not run.stale:
                    seg = rb[h:h + need]
                    out += seg
                    hashes += run.hashes[h:h + len(seg)]
                    h += len(seg)
                    need -= len(seg)
                else:
                    end, rh = len(rb), run.hashes
                    while need and h < end:
                        b = rb[h]
                        if ref[b] is run:
                            out.append(b)
                            hashes.append(rh[h])
                            need -= 1
                        else:
                            run.stale -= 1
                        h += 1
                run.head = h
                if h == len(rb):
                    queue.popleft()
        else:
            out = []
            heap, version = self._heap, self._version
            while len(out) < n:
                _, _, b, v = heapq.heappop(heap)
                if v == version[b] and self._ref[b] == 0:
                    version[b] += 1
                    out.append(b)
            hashes = list(map(self._hash_of.__getitem__, out))  # (each registration under a heap policy records it)
        ref = self._ref
        if self.on_evict is not None:  # a lower tier takes the evicted hashes, oldest first
            self.on_evict(hashes)
        # the hashes leave the cache (``_hash_of`` may keep them: a block carries a hash only
        # while ``block_of`` maps it back)
        for h in hashes:
            del block_of[h]
        for b in out:
            ref[b] = 1
        if watched:
            for b in watched.keys() & out:
                p = watched.pop(b)
                self.watched_free -= 1
                if self.cut is None or p < self.cut:
                    self.cut = p
        self._evictable -= n
        self.evictions += n
        return out

    def claim(self, blocks: list[int]) -> None:
        """Reference cached blocks found by their hashes (a hit)."""
        ref, lru = self._ref, self.in_free_order
        refs = list(map(ref.__getitem__, blocks))
        # free ones: under lru each holds its run (never an int), else 0
        if not lru:
            nfree = countOf(refs, 0)
        elif refs and refs[-1].__class__ is not int and countOf(refs, refs[-1]) == len(refs):
            nfree = len(refs)  # (usually: a preempted request's own blocks, all in one run)
        else:
            nfree = len(refs) - countOf(map(type, refs), int)
        if not nfree:
            for b in blocks:
                ref[b] += 1
        else:
            n = len(blocks)
            if nfree == n:
                freed, runs = blocks, refs
            elif (refs[n - 1].__class__ is not int if lru else refs[n - 1] == 0) and (
                    countOf(map(type, refs[n - nfree:]), int) == 0 if lru else countOf(refs[n - nfree:], 0) == nfree):
                freed, runs = blocks[n - nfree:], refs[n - nfree:]  # (usually: held ones first, a shared prefix)
                for b in blocks[:n - nfree]:
                    ref[b] += 1
            else:
                freed, runs = [], []
                for b, r in zip(blocks, refs):
                    if r.__class__ is int and r:
                        ref[b] = r + 1
                    else:
                        freed.append(b)
                        runs.append(r)
            for b in freed:
                ref[b] = 1
            self._evictable -= nfree
            if lru:  # each leaves a stale entry in its run (it holds a count now, not the run)
                if countOf(runs, runs[0]) == nfree:  # (usually: one run, a preempted request's own blocks)
                    rb = runs[0].blocks
                    cut = len(rb) - nfree
                    if rb[cut:] == freed[::-1]:
                        # the run's last entries, the blocks of a table freed tail first and now
                        # claimed back from its head (a hit is a prefix): cut, no stale entry left
                        del rb[cut:], runs[0].hashes[cut:]
                    else:
                        runs[0].stale += nfree
                else:
                    for run in runs:
                        run.stale += 1
            else:
                version = self._version
                for b in freed:
                    version[b] += 1
            if self.watched:
                self.watched_free -= len(self.watched.keys() & freed)
        if not self.in_free_order:
            hits, last_access, tick = self.hits, self.last_access, self.tick
            for b in blocks:
                hits[b] += 1
                last_access[b] = tick

    def give(self, blocks: list[int], hashed: int | None = None, chain: list[int] | None = None) -> None:
        """Drop one reference from each block; unreferenced blocks become free (tail first, so
        a sequence's last blocks are evicted before its shared prefix). ``hashed``, when given:
        the caller knows that ``blocks[:hashed]`` each carry a hash and the rest carry none and
        have no other holder (a request's table: ``PrefixKVManager.free``); ``chain``, when given
        with it: ``blocks[i]`` carries ``chain[i]`` for each ``i < hashed``."""
        ref, hash_of, free, cached = self._ref, self._hash_of, self._free, []
        if hashed is not None and self.in_free_order:
            # in bulk when the blocks still shared with other requests lead the table (a common
            # prefix): those lose a reference, the rest become free, the hashed ones as one run
            refs = list(map(ref.__getitem__, blocks[:hashed]))
            ones = countOf(refs, 1)  # (each is held: a count of at least 1)
            shared = 0 if ones == hashed else refs.index(1) if ones else hashed
            if shared + ones == hashed:  # the blocks held by this table alone are the last ones
                for b in blocks[:shared]:
                    ref[b] -= 1
                plain = blocks[hashed:]
                for b in plain:
                    ref[b] = 0
                plain.reverse()
                free += plain
                if shared == hashed:
                    return
                cached = blocks[shared:hashed]
                cached.reverse()
                if chain is not None:
                    hashes = chain[shared:hashed]
                    hashes.reverse()
                else:
                    hashes = list(map(self._carried().__getitem__, cached))
                run = _Run(cached, hashes)
                for b in cached:
                    ref[b] = run
                self._queue.append(run)
                self._evictable += len(cached)
                if self.watched:
                    self.watched_free += len(self.watched.keys() & cached)
                return
        hashes: list[int] = []
        run = _Run(cached, hashes) if self.in_free_order else None  # (filled below)
        get = self.block_of.get
        if not self.in_free_order:  # (every registration recorded its hash in ``_hash_of``)
            hash_at = [h if get(h) == b else None for b, h in zip(blocks, map(hash_of.__getitem__, blocks))]
        elif chain is not None:  # a table: its block i can carry only chain[i]
            n = len(chain)
            hash_at = [chain[i] if i < n and get(chain[i]) == b else None for i, b in enumerate(blocks)]
        else:
            hash_at = list(map(self._carried().get, blocks))
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            r = ref[b] - 1
            ref[b] = r
            if r:
                continue
            h = hash_at[i]
            if h is None:  # (carries no hash)
                free.append(b)
            else:
                cached.append(b)
                hashes.append(h)
                if run is not None:
                    ref[b] = run
        if not cached:
            return
        self._evictable += len(cached)
        if self.watched:
            self.watched_free += len(self.watched.keys() & cached)
        if run is not None:
            self._queue.append(run)
            return
        key, heap, version, pushes, tick = self.key, self._heap, self._version, self._pushes, self.tick
        hits, cached_at, last_access = self.hits, self.cached_at, self.last_access
        for b in cached:
            last_access[b] = tick
            pushes += 1
            heapq.heappush(heap, (key(tick, hits[b], cached_at[b]), pushes, b, version[b]))
        self._pushes = pushes

    def register(self, blocks, hashes, fresh: bool = False) -> int:
        """Give each newly filled block its hash (pairs from ``blocks`` and ``hashes``), unless
        another block already caches that hash or the block has one; how many got one.
        ``fresh``: the caller knows that no block of ``blocks`` has a hash (each was taken
        without one and is offered once: ``PrefixKVManager``)."""
        block_of, hash_of = self.block_of, self._hash_of
        carried = {} if fresh else self._carried()
        if (self.in_free_order and block_of.keys().isdisjoint(hashes)
                and (fresh or carried.keys().isdisjoint(blocks))):
            # the usual case in bulk: new hashes on blocks without one (no key to keep under lru;
            # no ``_hash_of`` either: a table's chain, and a run once free, hold the hashes)
            n0 = len(block_of)
            block_of.update(zip(hashes, blocks))
            if len(block_of) - n0 == len(hashes):
                return len(blocks)
            for h in hashes:  # a hash repeated within ``hashes``: undone, the loop below keeps the first
                block_of.pop(h, None)
        tick, keyed = self.tick, not self.in_free_order
        last_access, hits, cached_at = self.last_access, self.hits, self.cached_at
        n = 0
        for b, h in zip(blocks, hashes):
            if h in block_of or b in carried:
                continue
            block_of[h] = b
            hash_of[b] = h
            n += 1
            if keyed:
                last_access[b] = cached_at[b] = tick
                hits[b] = 0
        return n


class PrefixKVManager(KVManager):
    """``KVManager`` with prefix caching over a ``CachedBlockPool``: each request's block table
    (``tables``, block ids in order) beside the count every manager keeps (``held``)."""

    # A refused admission changes nothing results read: the lookup's memos are caches, and the
    # tick it spends keeps the order of every recorded tick (each state-changing call has a tick
    # of its own either way). While the batch only decodes it stays refused unless decodes evict
    # one of the waiting head's hit blocks: with chunked prefill the head asks for its hit plus a
    # budget-sized chunk, so a shorter hit can need fewer blocks from the free pool. The decode
    # fast-forward asks ``evicts_watched`` and stops before such a step (the head's hits are the
    # blocks its last lookup watches: the scheduler tries the head only, head-of-line).
    static_refusal = True
    bulk_growth = False  # growing may evict cached blocks and registers full ones

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, *, swap_blocks: int = 0,
                 eviction: str = "lru"):
        super().__init__(num_blocks, block_size, watermark, swap_blocks=swap_blocks)
        self.pool = CachedBlockPool(num_blocks, eviction)
        self.tables: dict[int, list[int]] = {}  # request id -> its blocks, in token order
        self._chains: dict[int, list[int]] = {}  # request id -> its full prompt blocks' hashes
        self._registered: dict[int, int] = {}  # request id -> leading blocks already offered to the cache
        # request id -> how many leading blocks of its table carry a hash, all later ones none
        # (-1: unknown, one was refused a hash); absent: none does (``free`` hands it to ``give``)
        self._hashed: dict[int, int] = {}
        self._chain_of: dict[int, list[int]] = {}  # request id -> its chain, while it holds blocks (``give``)
        self._last_chain: tuple = (None, [])
        self._last_hits: tuple = (None, [])

    @property
    def covered_is_noop(self) -> bool:
        """allocate registers newly full prompt blocks in the cache even without growing: a call
        for covered tokens changes nothing only while no request has prompt blocks still to offer
        (read once per ``schedule_running``, during which no request gains blocks to offer:
        admissions come after it)."""
        return not self._chains

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

    def evicts_watched(self, n_blocks: int) -> bool:
        """Whether taking ``n_blocks`` now would evict a block of the last hit lookup's answer
        (``static_refusal``)."""
        pool = self.pool
        return bool(pool.watched) and pool.evicts_any(n_blocks - pool.num_plain_free, pool.watched)

    def _take(self, req_id: int, n: int) -> None:
        self.tables.setdefault(req_id, []).extend(self.pool.take(n))
        self.held[req_id] = len(self.tables[req_id])

    def grow_one(self, req_id: int, total_tokens: int) -> bool:
        """``allocate`` for one more block, without its layers when the request has no prompt
        block left to offer (a decode): a tick, the free check, one block taken (may evict)."""
        table = self.tables.get(req_id)
        if table is None or req_id in self._chains or -(-total_tokens // self.block_size) != len(table) + 1:
            return self.allocate(req_id, total_tokens)  # (registers full blocks)
        pool = self.pool
        pool.tick += 1
        if len(pool._free) == pool._free_head and not pool._evictable:  # (no free block)
            return False
        table.append(pool.take_one())
        self.held[req_id] = len(table)
        return True

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
        """Blocks caching ``chain``'s leading hashes. The answer for the last chain is kept (the
        queue's head asks every step while it waits): registrations can only extend it, and the
        pool reports the first of its blocks evicted since (``watched``, ``cut``), so each
        lookup walks only the hashes past what is still known to hit, up to the first miss."""
        pool = self.pool
        memo_chain, out = self._last_hits
        watched = pool.watched
        if memo_chain is not chain:
            out = []
            watched.clear()
            pool.cut, pool.watched_free = None, 0
        elif pool.cut is not None:
            for b in out[pool.cut:]:
                if watched.pop(b, None) is not None and pool.is_free(b):
                    pool.watched_free -= 1
            del out[pool.cut:]
            pool.cut = None
        # the walk in growing slices looked up in C, cut at the first miss
        get, start, new, step = pool.block_of.get, len(out), [], 16
        i = start
        while i < len(chain):
            found = list(map(get, chain[i:i + step]))
            if None in found:
                new += found[:found.index(None)]
                break
            new += found
            i += step
            step = min(4 * step, 4096)
        if new:
            watched.update(zip(new, range(start, start + len(new))))
            pool.watched_free += pool._nfree(new)
            out += new
        self._last_hits = (chain, out)
        return out

    def _loadable(self, chain: list[int], start: int, end: int) -> bool:
        """Whether ``chain[start:end]`` (past the GPU hit) can be loaded from a lower tier; never
        here (``sim.kv.tiers.TieredKVManager`` has lower tiers)."""
        return False

    def _load(self, hashes: list[int]) -> None:
        """Take ``hashes`` out of the lower tiers for loading (only after ``_loadable``)."""
        raise AssertionError("no lower tier")

    def cached_blocks(self, chain: list[int]) -> int:
        block_of, n = self.pool.block_of, 0
        for h in chain:
            if h not in block_of:
                break
            n += 1
        return n

    def prefix_hit(self, spec, num_tokens: int) -> int:
        hits = self._hit_blocks(self.chain(spec))
        return usable_hit_tokens(len(hits), self.block_size, num_tokens)

    def allocate(self, req_id: int, total_tokens: int, *, admit: bool = False, spec=None,
                 cached_tokens: int = 0) -> bool:
        pool = self.pool
        table = self.tables.get(req_id)
        if table is not None and -(-total_tokens // self.block_size) <= len(table):
            # nothing to take: no tick, so the clock counts state changes, not calls (a policy
            # that re-asks every step and one that asks only when growing age blocks alike)
            if req_id in self._chains:
                self._register_full(req_id, total_tokens)
            return True
        pool.tick += 1
        if table is None and spec is not None:
            chain = self.chain(spec)
            known = self._hit_blocks(chain)
            k = cached_tokens // self.block_size
            hits = known[:k]
            g = len(hits)
            if g < k and not self._loadable(chain, g, k):
                return False  # the promised hit was evicted since prefix_hit answered
            fresh = max(0, self.blocks_for(total_tokens) - len(hits))
            if not self.can_allocate(fresh, admit=admit):
                return False
            # hit blocks that are free leave the free count when claimed
            if not self.can_allocate(fresh + len(hits), admit=admit):
                free_hits = pool.watched_free - pool._nfree(known[k:])
                if not self.can_allocate(fresh + free_hits, admit=admit):
                    return False
            pool.claim(hits)
            if g < k:  # the rest of the hit comes from a lower tier, into fresh blocks
                self._load(chain[g:k])
            self.tables[req_id] = table = hits + pool.take(fresh)
            self.held[req_id] = len(table)
            self._chains[req_id] = self._chain_of[req_id] = chain
            self._registered[req_id] = self._hashed[req_id] = g
        elif not super().allocate(req_id, total_tokens, admit=admit):
            return False
        self.tables.setdefault(req_id, [])  # an allocation of no blocks still opens the table
        self._register_full(req_id, total_tokens)
        return True

    def _register_full(self, req_id: int, total_tokens: int) -> None:
        """Offer ``req_id``'s newly full prompt blocks to the cache (once all are offered, the
        request is forgotten here)."""
        chain = self._chains.get(req_id)
        if chain is None:
            return
        lo = self._registered[req_id]
        upto = min(len(chain), total_tokens // self.block_size)
        if upto > lo:
            got = self.pool.register(self.tables[req_id][lo:upto], chain[lo:upto], True)
            hashed = self._hashed
            hashed[req_id] = upto if got == upto - lo and hashed[req_id] == lo else -1
            self._registered[req_id] = lo = upto
        if lo == len(chain):
            del self._chains[req_id], self._registered[req_id]

    def free(self, req_id: int) -> int:
        self.pool.tick += 1
        self._chains.pop(req_id, None)
        self._registered.pop(req_id, None)
        self.held.pop(req_id, None)
        blocks = self.tables.pop(req_id, ())
        hashed = self._hashed.pop(req_id, 0)
        self.pool.give(blocks, hashed if hashed >= 0 else None, self._chain_of.pop(req_id, None))
        return len(blocks)

    @property
    def num_referenced(self) -> int:
        return self.pool.num_referenced
