"""Prefill/decode disaggregation (``cluster.prefill_replicas``, or pools of role prefill and
decode: ``sim/cluster/pools.py``): the first N replicas only prefill, the others only decode. Arrivals go to the prefill pool; when a request has its first
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
    """The entry and decode pools and the transfers in flight between them."""

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
        self.links: dict | None = None  # pools: (prefill pool, decode pool) -> bytes/s (``for_pools``)
        self.heading: dict = {}  # pools: request id -> the decode pool its transfer goes to
        self.handed_off: dict = {}  # pools: prefill pool -> requests it handed off

    @classmethod
    def for_config(cls, cfg, replicas: list, hw, model, pools, parts) -> Disaggregation | None:
        """The disaggregation ``cfg`` asks for (``cluster.prefill_replicas`` or pools of role
        prefill; None without). The link defaults to the hardware's host link times the GPUs of a
        replica (with pools: the slower end's, ``sim.cluster.pools.link_bytes_per_s``)."""
        if cfg.cluster.pools:
            return cls.for_pools(cfg, replicas, model, pools, parts)
        npre = cfg.cluster.prefill_replicas
        if not npre:
            return None
        from sim.cluster.pools import link_bytes_per_s

        bw = link_bytes_per_s(cfg, pools[0], hw)  # (the shorthand's two pools share one card and layout)
        return cls(replicas, npre, bw, model.kv_bytes_per_token(cfg.kv_dtype))

    @classmethod
    def for_pools(cls, cfg, replicas: list, model, pools, parts) -> Disaggregation | None:
        """Pools with role prefill hand off to pools with role decode; replicas of role both take
        arrivals too and keep them to the end. Each (prefill, decode) pair of pools moves KV at the
        slower end's link."""
        from sim.cluster.pools import link_bytes_per_s

        if not any(p.role == "prefill" for p in pools):
            return None
        self = cls([], 0, 0.0, model.kv_bytes_per_token(cfg.kv_dtype))
        self.entry_pool = [r for r in replicas if r.role != "decode"]
        self.decode_pool = [r for r in replicas if r.role == "decode"]
        bw = {p.name: link_bytes_per_s(cfg, p, parts[p.key][0]) for p in pools}
        self.links = {(a.name, b.name): min(bw[a.name], bw[b.name])
                      for a in pools if a.role == "prefill" for b in pools if b.role == "decode"}
        self.handed_off = {p.name: 0 for p in pools if p.role == "prefill"}
        return self

    def add(self, rep) -> None:
        """A replica an autoscaler added joins its pool's side."""
        (self.decode_pool if rep.role == "decode" else self.entry_pool).append(rep)

    def hand_off(self, rep, r) -> float:
        """``r`` got its first token on prefill replica ``rep``: it leaves (its blocks return to
        the pool) and its KV starts moving; the transfer's seconds."""
        rep.scheduler.finish(r)
        lifecycle.hand_off(r)
        self.in_flight += 1
        if self.links is None:
            return r.num_computed * self.kv_bytes_per_token / self.bytes_per_s
        # pools: the transfer goes to the pool of the least loaded serving decode replica now
        # (the replica within it is chosen when the transfer ends), at the slower end's link
        self.handed_off[rep.pool.name] += 1
        pool = [d for d in self.decode_pool if d.up] or self.decode_pool
        to = min(pool, key=_load).pool.name
        self.heading[r.id] = to
        return r.num_computed * self.kv_bytes_per_token / self.links[(rep.pool.name, to)]

    def land(self, r):
        """The transfer of ``r`` ended: it joins the least loaded serving decode replica. Returns
        that replica and None, or, when the replica could never admit ``r`` (its prompt + 1 token's
        blocks at once exceed what the watermark leaves: ``Scheduler.readmit_reason``), the
        reason, and ``r`` joins no queue (the engine aborts it); (None, None) when every decode
        replica is down after a crash."""
        self.in_flight -= 1
        pool = [d for d in self.decode_pool if d.up]
        if self.links is not None:  # within the pool the KV was sent to, while one of it serves
            to = self.heading.pop(r.id)
            pool = [d for d in pool if d.pool.name == to] or pool
        if not pool:
            return None, None
        dst = min(pool, key=_load)
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


def _load(d) -> tuple:
    """A decode replica's order of choice: the fewest waiting + running requests, then the lowest index."""
    return (len(d.scheduler.waiting) + len(d.scheduler.running), d.idx)
