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

    def hand_off(self, rep, r) -> float:
        """``r`` got its first token on prefill replica ``rep``: it leaves (its blocks return to
        the pool) and its KV starts moving; the transfer's seconds."""
        rep.scheduler.finish(r)
        lifecycle.hand_off(r)
        self.in_flight += 1
        return r.num_computed * self.kv_bytes_per_token / self.bytes_per_s

    def land(self, r):
        """The transfer of ``r`` ended: it joins the least loaded decode replica (returned)."""
        self.in_flight -= 1
        dst = min(self.decode_pool, key=lambda d: (len(d.scheduler.waiting) + len(d.scheduler.running), d.idx))
        r.replica = dst.idx
        dst.scheduler.add(r)
        return dst

    def upstream_busy(self, rep) -> bool:
        """Can work still reach ``rep`` from another replica (a decode replica's prefill pool)?"""
        if rep.role != "decode":
            return False
        return bool(self.in_flight) or any(p.scheduler.has_work() for p in self.entry_pool)
