"""The prefix cache's block pool against a plain reference model, on random operation
sequences: the same block ids, hits and evictions for every eviction policy (the pool's queue,
heap and counters are only there to be fast), and no block leaks (every block is free, cached or
held; an eviction only takes a free cached block and drops only its hash)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.kv import PrefixKVManager
from sim.kv.prefix import EVICTION, kv_block_hashes, usable_hit_tokens
from sim.types import RequestSpec


class Reference:
    """What ``PrefixKVManager`` must do, the slow way: scans instead of queues and heaps."""

    def __init__(self, num_blocks, block_size, eviction):
        self.n, self.bs, self.key = num_blocks, block_size, EVICTION[eviction]
        self.free = list(range(num_blocks))  # free blocks without a hash, oldest first
        self.ref = [0] * num_blocks
        self.hash_of: dict[int, int] = {}
        self.meta = {b: [0, 0, 0] for b in range(num_blocks)}  # last_access, hits, cached_at
        self.freed_at = [0] * num_blocks  # order in which cached blocks became free
        self.frees = self.tick = 0
        self.tables: dict[int, list[int]] = {}
        self.chains: dict[int, list[int]] = {}
        self.registered: dict[int, int] = {}

    def num_free(self):
        return len(self.free) + sum(1 for b in self.hash_of if self.ref[b] == 0)

    def hits(self, chain):
        where = {h: b for b, h in self.hash_of.items()}
        out = []
        for h in chain:
            if h not in where:
                break
            out.append(where[h])
        return out

    def take(self, n):
        out = []
        for _ in range(n):
            if self.free:
                b = self.free.pop(0)
            else:
                b = min((b for b in self.hash_of if self.ref[b] == 0),
                        key=lambda b: (self.key(*self.meta[b]), self.freed_at[b]))
                del self.hash_of[b]
            self.ref[b] = 1
            out.append(b)
        return out

    def register(self, rid, total):
        chain, table = self.chains.get(rid, []), self.tables[rid]
        for j in range(self.registered.get(rid, 0), min(len(chain), total // self.bs)):
            h = chain[j]
            if h not in self.hash_of.values() and table[j] not in self.hash_of:
                self.hash_of[table[j]] = h
                self.meta[table[j]] = [self.tick, 0, self.tick]
        if rid in self.chains:
            self.registered[rid] = max(self.registered[rid], min(len(chain), total // self.bs))

    def allocate(self, rid, total, spec=None, cached=0, admit=False, reserve=0):
        need = -(-total // self.bs)
        if rid in self.tables and need <= len(self.tables[rid]):
            self.register(rid, total)
            return True
        self.tick += 1
        if rid not in self.tables and spec is not None:
            chain = kv_block_hashes(spec.block_hashes, spec.hash_block_tokens, self.bs, spec.prompt_tokens) \
                if spec.block_hashes is not None else []
            hits = self.hits(chain)[: cached // self.bs]
            if len(hits) * self.bs < cached:
                return False
            fresh = max(0, need - len(hits))
            if self.num_free() - fresh - sum(1 for b in hits if self.ref[b] == 0) < reserve:
                return False
            for b in hits:
                self.ref[b] += 1
                self.meta[b][0] = self.tick
                self.meta[b][1] += 1
            self.tables[rid] = hits + self.take(fresh)
            self.chains[rid], self.registered[rid] = chain, len(hits)
        else:
            extra = need - len(self.tables.get(rid, []))
            if self.num_free() - extra < reserve:
                return False
            self.tables.setdefault(rid, []).extend(self.take(extra))
        self.register(rid, total)
        return True

    def release(self, rid):
        self.tick += 1
        self.chains.pop(rid, None)
        self.registered.pop(rid, None)
        for b in reversed(self.tables.pop(rid, [])):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in self.hash_of:
                    self.meta[b][0] = self.tick
                    self.frees += 1
                    self.freed_at[b] = self.frees
                else:
                    self.free.append(b)


new = st.tuples(st.just("new"), st.integers(1, 30), st.lists(st.integers(0, 1), min_size=8, max_size=8),
               st.integers(1, 30), st.sampled_from([True, True, True, False]))
grow = st.tuples(st.just("grow"), st.integers(0, 50), st.integers(1, 9))
free = st.tuples(st.just("free"), st.integers(0, 50))
retry = st.tuples(st.just("retry"))  # the last refused request asks again (a queue's head, each step)
ops = st.lists(st.one_of(new, grow, grow, free, retry, retry), min_size=10, max_size=80)

def check_no_leaks(kv: PrefixKVManager):
    pool = kv.pool
    free = pool.free_blocks()
    cached = [b for b in range(pool.num_blocks) if pool.ref[b] == 0 and pool.hash_of[b] is not None]
    held = [b for b in range(pool.num_blocks) if pool.ref[b] > 0]
    assert len(set(free)) == len(free) and all(pool.ref[b] == 0 and pool.hash_of[b] is None for b in free)
    assert len(free) + len(cached) + len(held) == pool.num_blocks  # each block exactly one of the three
    assert pool.num_evictable == len(cached) and kv.num_free == len(free) + len(cached)
    assert {h: b for b, h in enumerate(pool.hash_of) if h is not None} == pool.block_of
    refs = [0] * pool.num_blocks
    for table in kv.tables.values():
        assert len(set(table)) == len(table)
        for b in table:
            refs[b] += 1
    assert refs == pool.ref and kv.held == {r: len(t) for r, t in kv.tables.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eviction=st.sampled_from(sorted(EVICTION)), blocks=st.integers(4, 24), bs=st.sampled_from([2, 4]),
       hbt=st.sampled_from([4, 8, 6]), ops=ops)
def test_pool_matches_the_reference_and_leaks_nothing(eviction, blocks, bs, hbt, ops):
    kv, ref = PrefixKVManager(blocks, bs, 0.0, eviction=eviction), Reference(blocks, bs, eviction)
    live: dict[int, int] = {}  # request id -> tokens it holds
    stats = {"hits": 0, "evictions": 0}
    refused: list = []
    for i, (op, *args) in enumerate(ops):
        if op == "retry" and refused:
            s, chunk = refused.pop()
            op, prompt, i = "new", s.prompt_tokens, s.id
        elif op == "new":
            prompt, ids, chunk, hashed = args
            s = RequestSpec(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=1,
                            block_hashes=tuple(ids[: -(-prompt // hbt)]) if hashed else None, hash_block_tokens=hbt)
        if op == "new":
            hit = kv.prefix_hit(s, prompt)
            assert hit == usable_hit_tokens(len(ref.hits(kv.chain(s))), bs, prompt)
            stats["hits"] += hit > 0
            total = min(prompt, hit + chunk)  # a first chunk
            got = kv.allocate(i, total, spec=s, cached_tokens=hit)
            assert got == ref.allocate(i, total, spec=s, cached=hit)
            if got:
                live[i] = total
            else:
                refused.append((s, chunk))
        elif op == "grow" and live:
            rid = sorted(live)[args[0] % len(live)]
            total = live[rid] + args[1]
            assert kv.allocate(rid, total) == ref.allocate(rid, total)
            if len(kv.tables[rid]) * bs >= total:
                live[rid] = total
        elif op == "free" and live:
            rid = sorted(live)[args[0] % len(live)]
            del live[rid]
            assert kv.free(rid) == len(ref.tables[rid])
            ref.release(rid)
        assert kv.tables == ref.tables
        assert {b: h for b, h in enumerate(kv.pool.hash_of) if h is not None} == ref.hash_of
        check_no_leaks(kv)
    for rid in list(live):
        kv.free(rid)
        ref.release(rid)
    check_no_leaks(kv)
    assert kv.num_used == 0 and kv.num_free == blocks
    STATS.append((stats["hits"], kv.pool.evictions))


STATS: list = []


def test_the_random_sequences_hit_and_evict():
    """The sequences above exercise hits and evictions (this runs after them, in file order)."""
    assert len(STATS) >= 100
    assert sum(1 for h, e in STATS if h and e) >= 20