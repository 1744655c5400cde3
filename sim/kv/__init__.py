"""KV-cache memory: a paged pool counted per request (``blocks``), prefix caching with block ids (``prefix``),
preemption by swap to a bounded host space (``KVManager.swap_out`` / ``swap_in``)."""
from __future__ import annotations

from sim.kv.blocks import KVManager
from sim.kv.prefix import PrefixKVManager
from sim.kv.tiers import HostLink, TieredKVManager, TierTally, host_tier_blocks, tier_blocks, tier_refusal

GIB = 2**30


def swap_space_blocks(swap_space_gib: float, block_bytes: float) -> int:
    """Host swap space per GPU in blocks: a replica's request is sharded over its GPUs the same
    way its GPU blocks are, so the per-GPU figure is the per-replica block count."""
    return int(swap_space_gib * GIB // block_bytes) if block_bytes > 0 else 0


def make_kv_manager(kv_cfg, num_blocks: int, block_bytes: float, tally: TierTally | None = None) -> KVManager:
    """The KV manager the ``kv:`` config section asks for (one per replica); ``tally``: where a
    tiered cache counts its hits and moves (shared by a run's replicas)."""
    if kv_cfg.host_tier is not None:
        return TieredKVManager(num_blocks, kv_cfg.block_size, kv_cfg.watermark,
                               host_blocks=host_tier_blocks(kv_cfg, block_bytes),
                               disk_blocks=tier_blocks(kv_cfg.disk_offload_gib, None, block_bytes),
                               swap=kv_cfg.preemption == "swap", eviction=kv_cfg.eviction, tally=tally)
    swap = swap_space_blocks(kv_cfg.swap_space_gib, block_bytes) if kv_cfg.preemption == "swap" else 0
    if kv_cfg.prefix_caching:
        return PrefixKVManager(num_blocks, kv_cfg.block_size, kv_cfg.watermark, swap_blocks=swap,
                               eviction=kv_cfg.eviction)
    return KVManager(num_blocks, kv_cfg.block_size, kv_cfg.watermark, swap_blocks=swap)


__all__ = ["HostLink", "KVManager", "PrefixKVManager", "TierTally", "TieredKVManager", "host_tier_blocks",
           "make_kv_manager", "swap_space_blocks", "tier_refusal"]
