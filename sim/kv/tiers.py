"""Tiered KV cache: host memory (and optionally a disk or remote store) under the GPU prefix cache,
and the one place that prices blocks moved between the GPU and those tiers.

Sources: vLLM's offloading connector (``OffloadingConnector``, ``kv_connector_extra_config``
``num_cpu_blocks`` / ``cpu_bytes_to_use``; docs.vllm.ai "KV Offloading Usage Guide", v0.11+):
full blocks go to a host tier with LRU eviction, a prefix that misses on the GPU is looked up in
the tier from where the GPU hit ends and loaded back by DMA before the request computes; its
``TieringOffloadingSpec`` stages secondary tiers through the host tier. SGLang HiCache
(``--hicache-write-policy write_back``) writes a block to host when the GPU evicts it.

What this module models (docs/design-decisions.md, "Tiered KV cache"):

- **Exclusive tiers.** A cached block's hash sits in exactly one of GPU, host, disk, or nowhere.
  A free cached block the GPU evicts moves to host (the write-back policy); a block host evicts
  moves to disk when there is one, else it is dropped; the last tier drops its oldest. A hit in
  host or disk moves the block back into a fresh GPU block (it leaves the lower tier). A block
  recomputed on the GPU while a lower tier holds its hash supersedes that copy (it leaves too).
  vLLM's connector keeps the host copy after a load (an inclusive cache); here it does not, so a
  block's place is always one tier and eviction order is plain LRU per tier.
- **LRU per tier.** Blocks enter host (and disk) in the order the GPU (host) evicts them, which
  is the GPU's eviction order; the oldest entry leaves first.
- **Hits.** After the GPU hit, the lookup goes on from where it ended through host and disk
  (a hash in either counts) up to the first hash in neither, as the connector looks up from the
  GPU hit's end. Usable hit tokens follow the GPU rule (never the last prompt token).
- **Swap preemption shares the host pool.** With a host tier, ``kv.preemption: swap`` puts its
  victims' blocks in the same host pool: swapped blocks are pinned (never evicted) and the cache
  gets what they leave; a swap-out evicts cached host blocks to make room.
- **Pricing** (``HostLink``): one formula prices every host<->GPU move, swap or load: blocks x
  bytes per block per GPU / one direction's share of the card's host link
  (``host_link_gbps_bidir`` / 2: PCIe, or NVLink-C2C on GH200/GB200), plus, for tier loads, a
  per-step latency (``kv.offload_latency_s``). Disk loads take ``kv.disk_read_gbps``. Loads are
  priced in the step that admits the request (its ``swap`` component, not overlapped with
  compute); stores (GPU -> host on eviction) run on the copy engine beside compute and are not
  priced.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat

from sim.kv.prefix import CachedBlockPool, PrefixKVManager, usable_hit_tokens

GIB = 2**30


@dataclass(frozen=True, slots=True)
class HostLink:
    """Seconds to move KV blocks between a GPU and its lower tiers: the one formula for swap
    preemption and tier loads. Bandwidths are one direction's, per GPU (each GPU moves its own
    shard of a block: ``block_bytes`` is per GPU)."""

    block_bytes: float
    host_bytes_per_s: float
    host_latency_s: float = 0.0
    disk_bytes_per_s: float = 0.0
    disk_latency_s: float = 0.0

    def seconds(self, swapped: int, loaded_host: int = 0, loaded_disk: int = 0) -> float:
        """``swapped`` blocks swapped in or out, ``loaded_host`` / ``loaded_disk`` blocks loaded
        from host / disk for prefix hits, in one step. Swaps pay bandwidth only (as they always
        have); a step that loads from a tier pays that tier's latency once (one batched copy)."""
        s = swapped * self.block_bytes / self.host_bytes_per_s if swapped else 0.0
        if loaded_host:
            s += loaded_host * self.block_bytes / self.host_bytes_per_s + self.host_latency_s
        if loaded_disk:
            s += loaded_disk * self.block_bytes / self.disk_bytes_per_s + self.disk_latency_s
        return s


def host_link(cfg, hw, block_bytes: float) -> HostLink:
    """The ``HostLink`` of a config's ``kv`` section on card ``hw``."""
    kv = cfg.kv
    disk = (kv.disk_read_gbps or 0.0) * 1e9
    return HostLink(block_bytes, hw.host_bw, kv.offload_latency_s, disk, kv.disk_latency_s)


def tier_blocks(gib: float | None, blocks: int | None, block_bytes: float) -> int:
    """A tier's size in blocks (of the GPU's block size, per GPU): ``blocks`` as given, or
    ``gib`` per GPU in whole blocks."""
    if blocks is not None:
        return blocks
    return int(gib * GIB // block_bytes) if gib and block_bytes > 0 else 0


def host_tier_blocks(kv_cfg, block_bytes: float) -> int:
    """The host tier's size in blocks (0: no host tier)."""
    return tier_blocks(kv_cfg.cpu_offload_gib, kv_cfg.num_cpu_blocks, block_bytes)


def tier_refusal(kv_cfg, block_bytes: float) -> str | None:
    """Why a tier of the config holds no block (its GiB below one block), or None."""
    for key, gib in (("kv.cpu_offload_gib", kv_cfg.cpu_offload_gib), ("kv.disk_offload_gib", kv_cfg.disk_offload_gib)):
        if gib is not None and tier_blocks(gib, None, block_bytes) == 0:
            return (f"{key}: {gib:g} GiB per GPU holds no KV block ({block_bytes / 2**20:.3f} MiB per block per GPU "
                    "at this model, parallelism and kv.block_size)")
    return None


@dataclass
class TierTally:
    """Counts over a run, shared by every replica's tiers (a crashed replica's counts stay).
    ``hit_tokens_*``: prompt tokens served from each tier at a request's first admission (as
    the summary's hit rate counts); the block counts cover every move."""

    hit_tokens_host: int = 0
    hit_tokens_disk: int = 0
    offloaded: int = 0  # blocks the GPU evicted into host
    to_disk: int = 0  # blocks host evicted into disk
    loaded_host: int = 0  # blocks loaded back from host
    loaded_disk: int = 0  # blocks loaded back from disk
    dropped: int = 0  # blocks evicted from the last tier (lost)
    superseded: int = 0  # lower-tier blocks dropped because the GPU computed the block again

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def tiered_cache(cfg, block_bytes: float) -> TierTally | None:
    """The run-wide ``TierTally`` of a config with a tiered cache (None without one); refuses a
    tier too small for one block (``ConfigError``, before any simulation)."""
    from sim.errors import ConfigError

    if cfg.kv.host_tier is None:
        return None
    why = tier_refusal(cfg.kv, block_bytes)
    if why:
        raise ConfigError(why)
    return TierTally()


def tier_block(cfg, block_bytes: float, tally: TierTally | None) -> dict | None:
    """The tiers' sizes (blocks and GiB per GPU) and ``tally``'s counts, for the summary."""
    if tally is None:
        return None
    host = host_tier_blocks(cfg.kv, block_bytes)
    disk = tier_blocks(cfg.kv.disk_offload_gib, None, block_bytes)
    return {"host_blocks": host, "host_gib": round(host * block_bytes / GIB, 3), "disk_blocks": disk,
            "disk_gib": round(disk * block_bytes / GIB, 3), **tally.as_dict()}


class LruHashes(dict):
    """Block hashes in the order they came in, oldest first: a dict (membership, and that order
    when iterated) whose value for a hash is the tag of the batch that added it. The batches are
    kept in order (``_batches``: the hashes, the next one to look at, the tag, how many entries
    past that one are stale), so adding is one ``dict.update`` per batch and the oldest leave by
    slicing the first batches. A hash taken out (``remove``) leaves a stale entry in its batch,
    skipped when reached; a hash that comes back joins a later batch. The same order as an
    ``OrderedDict`` with ``popitem(last=False)``. Take hashes out with ``remove`` or
    ``pop_oldest`` only (a plain ``del`` would leave a stale entry uncounted)."""

    def __init__(self):
        super().__init__()
        self._batches: deque[list] = deque()
        self._batch_of: dict[int, list] = {}  # tag -> its batch, while queued
        self._entries = 0  # hashes held by the batches, stale ones included
        self._tag = 0
        self.slack = 4096  # stale entries allowed beyond the live ones before compacting

    def add(self, hashes: list[int]) -> None:
        """Add ``hashes`` (none of them here), oldest first, after every hash here. The list is
        kept as the batch: the caller hands it over and does not change it afterwards."""
        if not hashes:
            return
        self._tag += 1
        self.update(zip(hashes, repeat(self._tag)))
        batch = [hashes, 0, self._tag, 0]
        self._batches.append(batch)
        self._batch_of[self._tag] = batch
        self._entries += len(hashes)
        if self._entries > 2 * len(self) + self.slack:  # mostly stale: one batch of what is here, in order
            keys = list(self)
            self._tag += 1
            self.update(zip(keys, repeat(self._tag)))
            batch = [keys, 0, self._tag, 0]
            self._batches, self._batch_of = deque([batch]), {self._tag: batch}
            self._entries = len(keys)

    def remove(self, h: int) -> None:
        """Take ``h`` out (it is here)."""
        self._batch_of[self.pop(h)][3] += 1

    def remove_here(self, hashes: list[int]) -> list[int]:
        """Take out each of ``hashes`` that is here; the others, in order."""
        pop, batch_of, rest = self.pop, self._batch_of, []
        for h in hashes:
            tag = pop(h, None)
            if tag is None:
                rest.append(h)
            else:
                batch_of[tag][3] += 1
        return rest

    def oldest(self, n: int) -> list[int]:
        """The ``n`` oldest hashes (fewer when fewer are here), oldest first; changes nothing."""
        out, get = [], self.get
        for hs, i, tag, stale in self._batches:
            if not stale:
                out += hs[i:i + n - len(out)]
            else:
                for h in hs[i:]:
                    if get(h) == tag:
                        out.append(h)
                        if len(out) == n:
                            break
            if len(out) >= n:
                break
        return out

    def pop_oldest(self, n: int) -> list[int]:
        """Take out the ``n`` oldest hashes (n <= len(self)); they, oldest first."""
        out, batches, get, need = [], self._batches, self.get, n
        while need:
            batch = batches[0]
            hs, i, tag, stale = batch
            end, start = len(hs), i
            if not stale:
                seg = hs[i:i + need]
                out += seg
                i += len(seg)
                need -= len(seg)
            else:
                while i < end and need:
                    h = hs[i]
                    i += 1
                    if get(h) == tag:
                        out.append(h)
                        need -= 1
                    else:
                        stale -= 1
                batch[3] = stale
            batch[1] = i
            self._entries -= i - start
            if i == end:
                batches.popleft()
                del self._batch_of[tag]
        for h in out:
            del self[h]
        return out


class LowerTiers:
    """The host store (and the disk store) of one replica: block hashes in LRU order, sized in
    blocks. The blocks of swapped-out requests (``swapped``, the manager's own dict) are pinned
    in host: never evicted, and the cache gets what they leave."""

    def __init__(self, host_blocks: int, disk_blocks: int = 0, tally: TierTally | None = None,
                 swapped: dict[int, int] | None = None):
        self.swapped = {} if swapped is None else swapped  # the manager's swapped requests (pinned)
        self.host = LruHashes()
        self.disk = LruHashes()
        self.host_blocks, self.disk_blocks = host_blocks, disk_blocks
        self.tally = TierTally() if tally is None else tally
        self.version = 0  # changes whenever a hash enters or leaves a tier (the lookup memo)
        self._memo: tuple = (None, -1, -1, 0)  # (chain, start, version, answer)
        # the hashes the memo's answer counted, and whether all of them are still in a tier (a
        # hash leaves the lower tiers only by a drop from the last one, a load or a supersede)
        self._counted: set = set()
        self._memo_ok = False

    def __contains__(self, h: int) -> bool:
        return h in self.host or h in self.disk

    def offload(self, hashes: list[int]) -> None:
        """Hashes the GPU evicted, oldest first, into host (making room: ``_shrink``)."""
        self.host.add(hashes)
        self.tally.offloaded += len(hashes)
        self.version += 1
        self._shrink()

    def _shrink(self) -> None:
        """Evict host's oldest blocks into disk (or drop them) until host fits beside the pinned
        blocks, then disk's oldest until disk fits."""
        host, disk, t = self.host, self.disk, self.tally
        over = len(host) - (self.host_blocks - (sum(self.swapped.values()) if self.swapped else 0))
        if over > 0:
            gone = host.pop_oldest(over)
            if self.disk_blocks:
                disk.add(gone)
                t.to_disk += over
            else:
                t.dropped += over
                self._left(gone)
        over = len(disk) - self.disk_blocks
        if over > 0:
            self._left(disk.pop_oldest(over))
            t.dropped += over

    def _left(self, hashes) -> None:
        """``hashes`` left the lower tiers: the memo of ``run`` holds while none was counted by it."""
        if self._memo_ok and not self._counted.isdisjoint(hashes):
            self._memo_ok = False

    def drops_any(self, added: int, hashes: list[int]) -> bool:
        """Whether offloading ``added`` more hashes now would drop one of ``hashes`` (each in host
        or disk) out of the lower tiers; changes nothing. With a disk tier, any drop out of disk
        counts (the hashes moved into it from host are not peeked)."""
        host = self.host
        over = len(host) + added - (self.host_blocks - (sum(self.swapped.values()) if self.swapped else 0))
        if over <= 0:
            return False
        if self.disk_blocks:
            return len(self.disk) + over > self.disk_blocks
        # host's oldest leave (past them, hashes just offloaded: those were on the GPU, so none
        # of ``hashes``, which are in a lower tier)
        return not set(hashes).isdisjoint(host.oldest(min(over, len(host))))

    def pin(self) -> None:
        """A request was swapped out: make room for its pinned blocks."""
        self.version += 1
        self._shrink()

    def run(self, chain: list[int], start: int) -> int:
        """How many of ``chain``'s hashes from ``start`` on sit in host or disk, up to the first
        one in neither. The last answer is kept: while none of the hashes it counted has left the
        lower tiers, a tier's change can only lengthen it, so the walk resumes where it stopped."""
        memo = self._memo
        if memo[0] is chain and memo[1] == start and self._memo_ok:
            if memo[2] == self.version:
                return memo[3]
            i = start + memo[3]
        else:
            i = start
            self._counted = set()
            self._memo_ok = True
        # in growing slices looked up in C (a tag is never None), cut at the first hash in neither tier
        hget, dget, disk = self.host.get, self.disk.get, self.disk
        i0, end, step = i, len(chain), 16
        while i < end:
            seg = chain[i:i + step]
            found = list(map(hget, seg))
            if None in found:
                j = found.index(None)
                if disk:
                    while j < len(seg) and (found[j] is not None or dget(seg[j]) is not None):
                        j += 1
                if j < len(seg):
                    i += j
                    break
            i += len(seg)
            step = min(4 * step, 4096)
        n = i - start
        self._counted.update(chain[i0:i])
        self._memo = (chain, start, self.version, n)
        return n

    def load(self, hashes: list[int]) -> tuple[int, int]:
        """Take ``hashes`` (each in host or disk) out of their tiers to load them to the GPU;
        (blocks from host, blocks from disk)."""
        rest = self.host.remove_here(hashes)
        if rest:
            self.disk.remove_here(rest)  # (each is there)
        self._left(hashes)
        from_disk = len(rest)
        from_host = len(hashes) - from_disk
        self.tally.loaded_host += from_host
        self.tally.loaded_disk += from_disk
        self.version += 1
        return from_host, from_disk

    def supersede(self, h: int) -> None:
        """The GPU caches ``h`` again: a lower tier's copy of it leaves."""
        if h in self.host:
            self.host.remove(h)
        else:
            self.disk.remove(h)
        self._left((h,))
        self.tally.superseded += 1
        self.version += 1


class TieredBlockPool(CachedBlockPool):
    """``CachedBlockPool`` whose evicted hashes go to ``tiers`` and whose registrations take a
    hash out of them (so no hash is in two tiers)."""

    def __init__(self, num_blocks: int, eviction: str, tiers: LowerTiers):
        super().__init__(num_blocks, eviction)
        self.tiers = tiers
        self.on_evict = tiers.offload

    def register(self, blocks, hashes, fresh: bool = False) -> int:
        tiers = self.tiers
        if tiers.host or tiers.disk:
            found = tiers.host.keys() & hashes  # (a set operation in C: most hashes are in no tier)
            if tiers.disk:
                found |= tiers.disk.keys() & hashes
            if found:
                block_of, carried = self.block_of, {} if fresh else self._carried()
                for b, h in zip(blocks, hashes):
                    if h in found and h not in block_of and b not in carried:
                        tiers.supersede(h)
        return super().register(blocks, hashes, fresh)


class TieredKVManager(PrefixKVManager):
    """``PrefixKVManager`` over a ``TieredBlockPool``: prefix hits continue into host and disk;
    a hit's lower-tier blocks are loaded into fresh GPU blocks when it is admitted. With swap
    preemption the host tier is the swap space (``swap_blocks`` = its size)."""

    tiered = True
    # A refused admission stays refused while the batch only decodes unless the head's hit moves:
    # growth that evicts one of its GPU hit blocks (as without tiers), or a block caching a hash
    # of its chain past that hit (host gains the hash: the lower-tier run may grow), or that
    # drops a hash of its lower-tier run out of the last tier. ``evicts_watched`` peeks at all three.
    static_refusal = True

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, *, host_blocks: int,
                 disk_blocks: int = 0, swap: bool = False, eviction: str = "lru", tally: TierTally | None = None):
        super().__init__(num_blocks, block_size, watermark, swap_blocks=host_blocks if swap else 0, eviction=eviction)
        self.tiers = LowerTiers(host_blocks, disk_blocks, tally, self.swapped)
        self.pool = TieredBlockPool(num_blocks, eviction, self.tiers)
        self.last_loads = (0, 0)  # (host, disk) blocks the last admission with a hit loaded
        self._rest: tuple = (None, 0, set())  # (chain, GPU hit length, the chain's hashes past it): evicts_watched

    def prefix_hit(self, spec, num_tokens: int) -> int:
        chain = self.chain(spec)
        g = len(self._hit_blocks(chain))
        return usable_hit_tokens(g + self.tiers.run(chain, g), self.block_size, num_tokens)

    def evicts_watched(self, n_blocks: int) -> bool:
        """Whether taking ``n_blocks`` now could change the answer of the last hit lookup (the
        waiting head's: ``static_refusal``): an eviction of one of its GPU hit blocks, or of a
        block caching a hash of its chain past them, or a drop of a hash of its lower-tier run
        out of the last tier."""
        pool = self.pool
        k = n_blocks - pool.num_plain_free
        if k <= 0:
            return False
        if pool.cut is not None or (pool.watched and pool.evicts_any(k, pool.watched)):
            return True
        chain, hits = self._last_hits
        if chain is None or len(hits) >= len(chain):
            return False
        g = len(hits)
        rest = self._rest
        if rest[0] is not chain or rest[1] != g:
            rest = self._rest = (chain, g, set(chain[g:]))
        evicted = pool.next_evicted(k, hashes=True)
        if not rest[2].isdisjoint(evicted):
            return True
        run = self.tiers.run(chain, g)
        return run > 0 and self.tiers.drops_any(len(evicted), chain[g:g + run])

    def _loadable(self, chain: list[int], start: int, end: int) -> bool:
        return self.tiers.run(chain, start) >= end - start

    def _load(self, hashes: list[int]) -> None:
        self.last_loads = self.tiers.load(hashes)

    def record_loads(self, plan, first: bool) -> None:
        """Put the last admission's loads in ``plan`` (priced with its step) and, at a request's
        first admission, count its hit tokens per tier."""
        host, disk = self.last_loads
        if not (host or disk):
            return
        self.last_loads = (0, 0)
        plan.blocks_loaded += host
        plan.blocks_loaded_disk += disk
        if first:
            t = self.tiers.tally
            t.hit_tokens_host += host * self.block_size
            t.hit_tokens_disk += disk * self.block_size

    def swap_out(self, req_id: int) -> int:
        n = super().swap_out(req_id)
        self.tiers.pin()
        return n
