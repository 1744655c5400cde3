"""Pools: the fleet as deployed (``cluster.pools``). A pool is a set of identical replicas, each
with the pool's GPU, weight dtype and parallelism, hence its own cost model and KV capacity; its
role says what its replicas do (``both``: serve arrivals to the end; ``prefill``: serve arrivals
up to their first token and hand the KV cache to a decode pool; ``decode``: receive them) and its
price what a GPU-hour of it costs.

``cluster.replicas`` / ``cluster.prefill_replicas`` are the shorthand for one pool (``default``,
role both) or two (``prefill`` then ``decode``) of the top-level GPU: ``fleet`` resolves both
forms to the same list, and the shorthand's pools share the top-level config itself, so a run
written either way gives the same results.

Replicas are numbered pool by pool in list order (a fault's ``replica`` counts across pools);
replicas an autoscaler adds later take the next free numbers. A pool with attention data
parallelism (``parallelism.dp`` > 1) is as the top-level ``parallelism.dp``: each of its replicas
is an expert group of dp ranks, each rank an engine replica of its own (scheduler, KV pool, a
number), stepping together with the group's other ranks (the engine's ``_group``); the router and
the KV hand-off see ranks.

The KV transfer from a prefill to a decode replica (``transfer_bytes_per_s``) runs at the slower
end's link: each end moves the request's KV over its ``kv_link_gbps`` (default: the card's host
link per direction times the GPUs of one rank, ``gpus_per_rank``: a replica's without
attention DP, every GPU sending or receiving its shard in parallel), and ``cluster.kv_transfer_gbps`` overrides both ends. Whether two replicas share an
NVLink domain is not knowable from the config, so none is assumed: set ``kv_transfer_gbps`` for
a transfer within a node. A change of layout (the two ends' TPs differ) is priced as free: the
bytes moved are the request's KV either way (each KV head is sent once, to the decode rank that
holds it), and the re-sharding is only which rank sends which heads (docs/design-decisions.md,
"Pools").
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.errors import CapacityError, ConfigError


@dataclass(frozen=True)
class PoolSpec:
    """One resolved pool: what the engine builds its replicas from."""

    name: str
    role: str  # both | prefill | decode
    hardware: str
    dtype: str
    tp: int
    pp: int
    replicas: int
    cfg: object  # the Config its replicas are built from (the top-level one with this pool's GPU, dtype, parallelism)
    price: float | None = None  # $/GPU-hour given for this pool (None: the cost section's, else the card's)
    kv_link_gbps: float | None = None
    autoscale: object = None  # PoolAutoscale, or None
    index: int = 0  # position in cluster.pools (error messages)
    ep: int = 1  # expert-parallel degree over a replica's tp x dp GPUs
    dp: int = 1  # attention data-parallel ranks of a replica (an expert group: the engine's ``_group``)
    knobs: object = None  # this pool's scheduler Knobs (``cluster.pools[i].scheduler``); None: the top-level ones
    moe_table: str | None = None  # ``cluster.pools[i].moe_table`` (None: the cost section's)
    moe_dispatch: str | None = None  # ``cluster.pools[i].moe_dispatch`` (None: the cost section's)

    @property
    def gpus_per_rank(self) -> int:
        """GPUs of one attention rank: those that hold a request's KV cache."""
        return self.tp * self.pp

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica (an expert group of ``dp`` ranks)."""
        return self.tp * self.pp * self.dp

    @property
    def ranks(self) -> int:
        """The engine's replicas (schedulers with their KV pools) this pool holds: ``dp`` per replica."""
        return self.replicas * self.dp

    @property
    def key(self) -> tuple:
        """Pools with the same key share one cost model and one memory plan (whose activation peak
        follows the pool's token budget: a pool with its own limits plans its own)."""
        own = () if self.knobs is None else (self.knobs.max_num_batched_tokens,)
        table = () if self.moe_table is None else (("moe_table", self.moe_table),)
        dispatch = () if self.moe_dispatch is None else (("moe_dispatch", self.moe_dispatch),)
        return (self.hardware, self.dtype, self.tp, self.pp, self.ep, self.dp, *own, *table, *dispatch)

    @property
    def serves_arrivals(self) -> bool:
        return self.role != "decode"


def fleet(cfg) -> list[PoolSpec]:
    """The pools of ``cfg``: ``cluster.pools`` resolved against the top-level defaults, or the
    shorthand's one or two pools."""
    c = cfg.cluster
    par = cfg.parallelism
    if not c.pools:
        if c.prefill_replicas:
            return [PoolSpec("prefill", "prefill", cfg.hardware, cfg.dtype, par.tp, par.pp, c.prefill_replicas, cfg,
                             ep=par.ep, dp=par.dp),
                    PoolSpec("decode", "decode", cfg.hardware, cfg.dtype, par.tp, par.pp,
                             c.replicas - c.prefill_replicas, cfg, index=1, ep=par.ep, dp=par.dp)]
        return [PoolSpec("default", "both", cfg.hardware, cfg.dtype, par.tp, par.pp, c.replicas, cfg,
                         ep=par.ep, dp=par.dp)]
    from sim.config import Parallelism

    out = []
    for i, p in enumerate(c.pools):
        tp, pp, ep, dp = pool_parallelism(cfg, p)
        dtype = p.dtype or cfg.dtype
        update = {"hardware": p.hardware, "dtype": dtype, "parallelism": Parallelism(tp=tp, pp=pp, ep=ep, dp=dp)}
        own = p.scheduler is not None and bool(p.scheduler.overrides())
        if own:  # (its memory plan then sizes the activation peak by its own token budget)
            update["scheduler"] = pool_scheduler(cfg.scheduler, p.scheduler)
        own_cost = {k: v for k, v in (("moe_table", p.moe_table), ("moe_dispatch", p.moe_dispatch)) if v is not None}
        if own_cost:  # (its own cost model: the routed experts from that collection, its own exchange)
            update["cost"] = cfg.cost.model_copy(update=own_cost)
        pcfg = cfg.model_copy(update=update)
        out.append(PoolSpec(p.name, p.role, p.hardware, dtype, tp, pp, p.replicas, pcfg, p.price,
                            p.kv_link_gbps, p.autoscale if p.autoscale is not None and p.autoscale.enabled else None,
                            i, ep, dp, pcfg.scheduler.knobs() if own else None, p.moe_table, p.moe_dispatch))
    return out


def pool_scheduler(section, own):
    """The ``scheduler`` section a pool's engines run: the top-level ``section`` (its policy and
    knobs) with the pool's own limits (``own``: a ``cluster.pools[i].scheduler``) in place."""
    return type(section)(**{"name": section.name, **(section.model_extra or {}), **own.overrides()})


def pool_parallelism(cfg, pool) -> tuple[int, int, int, int]:
    """(tp, pp, ep, dp) of ``pool`` (a ``cluster.pools`` entry): its own ``parallelism``, each of
    ep and dp it leaves out (and all four without one) the top-level ``parallelism``'s."""
    par, own = cfg.parallelism, pool.parallelism
    if own is None:
        return par.tp, par.pp, par.ep, par.dp
    return (own.tp, own.pp, par.ep if own.ep is None else own.ep, par.dp if own.dp is None else own.dp)


def pool_parts(pools: list[PoolSpec], model, explicit: bool) -> dict:
    """{pool key: (hardware card, memory plan, cost model)}: one per distinct (GPU, dtype, TP,
    PP). A pool whose model does not fit its GPU is a CapacityError naming the pool (``explicit``:
    the user wrote ``cluster.pools``; the shorthand's error names the top-level keys as before)."""
    from sim.catalog import get_hardware
    from sim.cost import make_cost_model
    from sim.cost.memory import memory_for_config

    parts: dict = {}
    for p in pools:
        if p.key in parts:
            continue
        hw = get_hardware(p.hardware)
        try:
            mem = memory_for_config(p.cfg, model, hw)
        except CapacityError as e:
            if not explicit:
                raise
            raise CapacityError(f"cluster.pools[{p.index}].hardware ({p.name}): {e}") from None
        try:
            cm = make_cost_model(p.cfg, model, hw)
        except ConfigError as e:
            if p.moe_table is None or "moe_table" not in str(e):
                raise
            raise ConfigError(f"cluster.pools[{p.index}].moe_table ({p.name}): "
                              f"{str(e).split('cost.moe_table: ', 1)[-1]}") from None
        parts[p.key] = (hw, mem, cm)
    return parts


def link_bytes_per_s(cfg, pool: PoolSpec, hw) -> float:
    """Bytes/s one replica (one attention rank) of ``pool`` sends or receives KV at."""
    if cfg.cluster.kv_transfer_gbps:
        return cfg.cluster.kv_transfer_gbps * 1e9
    if pool.kv_link_gbps:
        return pool.kv_link_gbps * 1e9
    return hw.host_bw * pool.gpus_per_rank


def price_of_pool(cfg, pool: PoolSpec) -> tuple[float | None, str]:
    """$/GPU-hour of ``pool`` and where it comes from: the pool's ``price``, else
    ``cost.usd_per_gpu_hour``, else its card's dated price."""
    if pool.price is not None:
        return pool.price, f"cluster.pools[{pool.index}].price (set by the user)"
    from sim.metrics.summary import price_of

    return price_of(pool.cfg)


def pools_output(eng) -> dict:
    """Per pool, what the summary's ``pools`` block needs from a finished engine: its spec, its
    replicas (those an autoscaler added too), the requests it handed off (prefill pools), its
    busy nanoseconds and its provisioning record (autoscaled pools)."""
    eng.steps.fold_busy()
    busy = eng.steps.by_replica or {}
    fleets = eng.dynamics.pool_fleets
    handed = eng.disagg.handed_off if eng.disagg is not None else {}
    out = {}
    for p in eng.pools:
        idx = [i for i, q in enumerate(eng.pool_of) if q is p]
        out[p.name] = {"spec": p, "replicas": idx, "handed_off": handed.get(p.name, 0),
                       "busy_ns": sum(busy.get(i, 0) for i in idx), "fleet": fleets.get(p.name),
                       "kv_blocks_per_replica": eng.parts[p.key][1].num_gpu_blocks}
    return out
