"""Prefill/decode disaggregation (``cluster.prefill_replicas``): the first N replicas only
prefill, the others only decode. Arrivals go to the prefill pool; when a request has its first
token its KV cache leaves the prefill replica and, after the transfer over the link between them,
joins the least loaded decode replica with its computed tokens intact.

Source: DistServe (Zhong et al., OSDI 2024, sections 2-3) and Splitwise (Patel et al., ISCA
2024): prefill and decode on separate GPU pools, the KV cache moved between them. Departures: the
transfer is one message at ``kv_transfer_gbps`` (no layer-wise overlap with the prefill), and the
decode replica is chosen when the transfer ends (the fewest waiting + running requests, ties to
the lowest index).

No event loop here: the engine asks ``hand_off`` how long a transfer takes, waits that long, then
calls ``land``.
"""
from __future__ import annotations

from sim import lifecycle


class Disaggregation:
    """The two pools and the transfers in flight between them."""

    def __init__(self, replicas: list, prefill_replicas: int, transfer_bytes_per_s: float, kv_bytes_per_token: float):
        self.entry_pool = replicas[:prefill_replicas]
        self.decode_pool = replicas[prefill_replicas:]
        for rep in self.entry_pool:
            rep.role = "prefill"
        for rep in self.decode_pool:
            rep.role = "decode"
        self.bytes_per_s = transfer_bytes_per_s
        self.kv_bytes_per_token = kv_bytes_per_token
        self.in_flight = 0  # KV transfers under way

    @classmethod
    def for_config(cls, cfg, replicas: list, hw, model) -> Disaggregation | None:
        """The disaggregation ``cfg`` asks for (``cluster.prefill_replicas``; None when it is 0).
        The link defaults to the hardware's host link times the GPUs of a replica."""
        npre = cfg.cluster.prefill_replicas
        if not npre:
            return None
        gpus = cfg.parallelism.tp * cfg.parallelism.pp
        bw = cfg.cluster.kv_transfer_gbps * 1e9 if cfg.cluster.kv_transfer_gbps else hw.host_bw * gpus
        return cls(replicas, npre, bw, model.kv_bytes_per_token(cfg.kv_dtype))

    def hand_off(self, rep, r) -> float:
        """``r`` got its first token on prefill replica ``rep``: it leaves (its blocks return to
        the pool) and its KV starts moving; the transfer's seconds."""
        rep.scheduler.finish(r)
        lifecycle.hand_off(r)
        self.in_flight += 1
        return r.num_computed * self.kv_bytes_per_token / self.bytes_per_s

    def land(self, r):
        """The transfer of ``r`` ended: it joins the least loaded serving decode replica. Returns
        that replica and None, or, when the replica could never admit ``r`` (its prompt + 1 token's
        blocks at once exceed what the watermark leaves: ``Scheduler.readmit_reason``), the
        reason, and ``r`` joins no queue (the engine aborts it); (None, None) when every decode
        replica is down after a crash."""
        self.in_flight -= 1
        pool = [d for d in self.decode_pool if d.up]
        if not pool:
            return None, None
        dst = min(pool, key=lambda d: (len(d.scheduler.waiting) + len(d.scheduler.running), d.idx))
        r.replica = dst.idx
        reason = dst.scheduler.readmit_reason(r, r.num_computed)
        if reason is None:
            dst.scheduler.add(r)
        return dst, reason

    def upstream_busy(self, rep) -> bool:
        """Can work still reach ``rep`` from another replica (a decode replica's prefill pool)?"""
        if rep.role != "decode":
            return False
        return bool(self.in_flight) or any(p.scheduler.has_work() for p in self.entry_pool)
