"""The typed, validated simulation config (docs/architecture.md section 9).

Sections: ``model``, ``hardware``, ``dtype``, ``parallelism``, ``cluster``, ``scheduler``, ``kv``,
``workload``, ``slo``, ``cost``, ``engine``, ``faults``, ``output``, ``seed``. Every section rejects unknown keys, naming
the dotted path and the closest valid key. ``--set a.b=c`` addresses the same keys. Loading
does no I/O beyond reading the YAML file it is given.
"""
from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from sim.cost.roofline import RooflineParams
from sim.errors import ConfigError, ConfigTypeError
from sim.kv.blocks import DEFAULT_BLOCK_SIZE
from sim.speculative import Speculative
from sim.workload.config import WorkloadConfig


class _Strict(BaseModel):
    """Frozen, unknown keys rejected, and every float finite: NaN and inf are errors in every
    section (the one rule for all float fields, present and future)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MAX_REPLICAS = 10_000
"""Most replicas of one simulated cluster (each is a scheduler and a KV pool in memory)."""
MIN_AUTOSCALE_INTERVAL_S = 0.01
"""Shortest ``cluster.autoscale.interval_s``: about one decode step, below which a decision sees no
new state (and a run of hours would take billions of decisions)."""
MAX_FAULT_S = 365 * 86400.0
"""Latest fault start and longest fault (a year of simulated time; traces span hours to weeks)."""
MAX_SLOWDOWN = 1000.0
"""Largest straggler or degraded-link factor: a replica 1,000 times slower serves nothing, which
a crash models."""
MAX_GPU_BLOCKS = 10_000_000
"""Largest ``kv.num_gpu_blocks`` (160 M tokens at 16 per block: beyond any GPU's KV cache)."""


class Parallelism(_Strict):
    tp: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree (GPUs per stage)")
    pp: int = Field(default=1, ge=1, le=64, description="pipeline stages")
    ep: int = Field(default=1, ge=1, le=1024, description=(
        "expert-parallel degree: the routed experts are placed ep ways over the tp x dp GPUs of the "
        "expert group, each expert split tp x dp / ep ways (vLLM --enable-expert-parallel, SGLang "
        "--ep-size, TRT-LLM moe_ep_size)"))
    dp: int = Field(default=1, ge=1, le=1024, description=(
        "attention data-parallel ranks sharing one expert group (vLLM --data-parallel-size, SGLang "
        "--enable-dp-attention, TRT-LLM attention_dp): each rank its own scheduler and KV pool, steps "
        "synchronised over the expert group (the engine's Engine._group); replicas count expert groups"))


class Autoscale(_Strict):
    """Queue-length autoscaling (``sim/cluster/autoscale.py``): every ``interval_s`` the fleet
    is sized to ceil(outstanding requests / ``target_outstanding``) within [min, max]."""

    enabled: bool = False
    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    max_replicas: int = Field(default=4, ge=1, le=MAX_REPLICAS)
    interval_s: float = Field(default=10.0, ge=MIN_AUTOSCALE_INTERVAL_S, description="seconds between two decisions")
    target_outstanding: float = Field(default=16.0, ge=1, description=(
        "waiting + running requests per serving replica the policy aims for (at least 1: a lower "
        "target provisions more replicas than there are requests)"))
    cold_start_s: float = Field(default=60.0, ge=0, description=(
        "seconds from provisioning a replica until it serves (paid for meanwhile)"))

    @model_validator(mode="after")
    def _bounds(self):
        return _replica_bounds(self)


def _replica_bounds(scaler):
    """An autoscaler's bounds hold: ``max_replicas`` >= ``min_replicas`` (both autoscalers)."""
    if scaler.max_replicas < scaler.min_replicas:
        raise ValueError(f"max_replicas ({scaler.max_replicas}) is below min_replicas ({scaler.min_replicas})")
    return scaler


class PrefixRouting(_Strict):
    """Knobs of the cache-aware routers ``prefix_aware`` and ``prefix_approx``
    (``sim/cluster/prefix_aware.py``): each replica's score is the weighted sum of three scores
    in [0, 1] (cached prefix, queue, KV use), as llm-d's scorers are combined."""

    prefix_weight: float = Field(default=1.0, ge=0, description=(
        "weight of the prefix score: the fraction of the request's full prompt blocks cached on the replica"))
    queue_weight: float = Field(default=1.0, ge=0, description=(
        "weight of the queue score: 1 for the replica with the fewest waiting + running requests, "
        "0 for the most (min-max normalised)"))
    kv_weight: float = Field(default=1.0, ge=0, description="weight of the KV score: 1 - the replica's KV use")
    history_blocks: int | None = Field(default=None, ge=1, description=(
        "prefix_approx: prefix blocks remembered per replica, least recently routed forgotten first "
        "(default: the replica's KV pool size in blocks)"))


AUTOSCALE_SIGNALS = ("outstanding", "prefill_tokens", "kv_usage", "running")


class PoolAutoscale(_Strict):
    """One pool's autoscaler (``cluster.pools[i].autoscale``; ``sim/cluster/autoscale.py``): every
    ``interval_s`` the pool is sized to ceil(signal summed over its replicas / ``target``) within
    [min, max], as the Kubernetes HPA sizes a deployment from a per-replica average."""

    enabled: bool = True
    signal: Literal["outstanding", "prefill_tokens", "kv_usage", "running"] | None = Field(default=None, description=(
        "what is measured: outstanding (waiting + running requests), prefill_tokens (prompt tokens not yet "
        "computed), kv_usage (fraction of the KV pool in use), running (sequences in the batch); default: "
        "prefill_tokens for a prefill pool, kv_usage for a decode pool, outstanding for a pool that does both"))
    target: float = Field(gt=0, description=(
        "the signal per serving replica the policy aims for (kv_usage: a fraction in (0, 1])"))
    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    max_replicas: int = Field(default=4, ge=1, le=MAX_REPLICAS)
    interval_s: float = Field(default=10.0, ge=MIN_AUTOSCALE_INTERVAL_S, description="seconds between two decisions")
    cold_start_s: float = Field(default=60.0, ge=0, description=(
        "seconds from provisioning a replica until it serves (paid for meanwhile)"))

    @model_validator(mode="after")
    def _bounds(self):
        _replica_bounds(self)
        if self.signal == "kv_usage" and self.target > 1:
            raise ValueError(f"target ({self.target}) is a fraction of the KV pool for signal kv_usage: at most 1")
        return self


class PoolParallelism(_Strict):
    """One pool's parallelism, with the meaning of the top-level ``parallelism``: a replica of a
    pool with dp > 1 is an expert group of dp attention ranks (each its own scheduler and KV pool,
    stepping together), ep the expert-parallel degree over its tp x dp GPUs."""

    tp: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree (GPUs per stage)")
    pp: int = Field(default=1, ge=1, le=64, description="pipeline stages")
    ep: int | None = Field(default=None, ge=1, le=1024, description=(
        "expert-parallel degree over the tp x dp GPUs of one replica (default: the top-level parallelism.ep)"))
    dp: int | None = Field(default=None, ge=1, le=1024, description=(
        "attention data-parallel ranks of one replica, an expert group stepping together (default: the "
        "top-level parallelism.dp)"))


class PoolScheduler(_Strict):
    """One pool's scheduler limits (``cluster.pools[i].scheduler``): what its engines were launched
    with where it differs from the top-level ``scheduler`` (disaggregated deployments size the
    prefill and the decode workers apart: TRT-LLM ``max_batch_size`` / ``max_num_tokens``, vLLM
    ``--max-num-seqs`` / ``--max-num-batched-tokens``, SGLang ``--max-running-requests`` /
    ``--chunked-prefill-size``). The policy and its other knobs stay the top-level ones."""

    max_num_seqs: int | None = Field(default=None, ge=1, le=1_000_000, description=(
        "most sequences in one step of each rank of this pool (default: scheduler.max_num_seqs)"))
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_000_000, description=(
        "most new tokens in one step of each rank of this pool (default: scheduler.max_num_batched_tokens)"))

    def overrides(self) -> dict:
        """The knobs given ({} when none)."""
        return {k: v for k, v in (("max_num_seqs", self.max_num_seqs),
                                  ("max_num_batched_tokens", self.max_num_batched_tokens)) if v is not None}


class Pool(_Strict):
    """One pool of identical replicas (``cluster.pools``; ``sim/cluster/pools.py``): its GPU,
    dtype, parallelism, count, role and price."""

    name: str = Field(min_length=1, max_length=64)
    hardware: str
    dtype: Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4", "fp32"] | None = Field(
        default=None, description="weight dtype (default: the top-level dtype)")
    parallelism: PoolParallelism | None = Field(default=None, description=(
        "tp and pp of each replica (default: the top-level parallelism)"))
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    role: Literal["both", "prefill", "decode"] = Field(default="both", description=(
        "both: serves arrivals to the end; prefill: serves arrivals up to their first token, then hands "
        "the KV to a decode pool; decode: receives them"))
    price: float | None = Field(default=None, ge=0, description=(
        "$/GPU-hour (default: cost.usd_per_gpu_hour, else the card's dated price)"))
    kv_link_gbps: float | None = Field(default=None, gt=0, description=(
        "GB/s per direction one replica of this pool sends or receives KV at (default: the card's host "
        "link per direction times the replica's GPUs); cluster.kv_transfer_gbps overrides every pool's"))
    autoscale: PoolAutoscale | None = None
    scheduler: PoolScheduler | None = Field(default=None, description=(
        "this pool's scheduler limits where they differ from the top-level scheduler's"))
    moe_table: Literal["framework", "vllm", "sglang", "trtllm"] | None = Field(default=None, description=(
        "whose kernel-database collection prices this pool's routed experts (cost.moe_table for this pool: "
        "disaggregated workers may run different MoE backends, e.g. TRT-LLM DeepGEMM prefill and TRTLLM "
        "decode); default: cost.moe_table"))
    moe_dispatch: Literal["allgather", "deepep_ll", "deepep_ht"] | None = Field(default=None, description=(
        "how this pool's attention-DP ranks exchange tokens around the routed experts (cost.moe_dispatch for "
        "this pool: SGLang's disaggregated decode workers run DeepEP low-latency, its prefill workers DeepEP "
        "normal); default: cost.moe_dispatch"))

    @field_validator("hardware")
    @classmethod
    def _card(cls, v):
        from sim.catalog import CatalogError, get_hardware

        try:
            get_hardware(v)
        except CatalogError as e:
            raise ValueError(str(e)) from None
        return v



class Cluster(_Strict):
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, description=(
        "identical model replicas (with pools: their total, filled in from them)"))
    router: str = "round_robin"
    prefill_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS, description=(
        "prefill/decode disaggregation: the first N replicas only prefill, the others only decode "
        "(0: every replica does both)"))
    kv_transfer_gbps: float | None = Field(default=None, gt=0, description=(
        "GB/s moving one request's KV cache from a prefill to a decode replica (default: the "
        "hardware's host link per direction, times the GPUs of a replica)"))
    autoscale: Autoscale = Autoscale()
    prefix_routing: PrefixRouting = PrefixRouting()
    pools: list[Pool] | None = Field(default=None, description=(
        "the fleet as pools of identical replicas, each its own GPU, dtype, parallelism, count, role and "
        "price (replicas and prefill_replicas are the shorthand for one or two pools of the top-level GPU)"))

    @model_validator(mode="before")
    @classmethod
    def _pool_total(cls, data):
        """With pools, ``replicas`` is their total (filled in; a different value given is an error)."""
        if not isinstance(data, dict) or not isinstance(data.get("pools"), list) or not data["pools"]:
            return data
        counts = [p.get("replicas", 1) if isinstance(p, dict) else 1 for p in data["pools"]]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
            return data  # the pool's own field reports it
        total = sum(counts)
        given = data.get("replicas")
        if given is not None and given != total:
            raise ValueError(f"cluster.replicas ({given}) differs from the pools' total ({total}); with "
                             "cluster.pools leave replicas out")
        return {**data, "replicas": total}

    @property
    def disaggregated(self) -> bool:
        """Whether some replicas only prefill (``prefill_replicas`` or a pool of role prefill)."""
        return bool(self.prefill_replicas) or any(p.role == "prefill" for p in self.pools or ())

    @model_validator(mode="after")
    def _pools(self):
        if self.pools is None:
            return self
        if not self.pools:
            raise ValueError("cluster.pools: give at least one pool (or leave pools out)")
        seen = {}
        for i, p in enumerate(self.pools):
            if p.name in seen:
                raise ValueError(f"cluster.pools[{i}].name: {p.name!r} is already pool {seen[p.name]}'s name")
            seen[p.name] = i
        if self.prefill_replicas:
            raise ValueError("cluster.prefill_replicas: with cluster.pools give the prefill pool a role: prefill")
        if self.autoscale.enabled:
            raise ValueError("cluster.autoscale: with cluster.pools each pool has its own autoscale block")
        roles = [p.role for p in self.pools]
        for want, need in (("decode", "prefill"), ("prefill", "decode")):
            if want in roles and need not in roles:
                i = roles.index(want)
                raise ValueError(f"cluster.pools[{i}].role: a {want} pool ({self.pools[i].name}) needs a {need} pool")
        for i, p in enumerate(self.pools):
            a = p.autoscale
            if a is not None and a.enabled and not a.min_replicas <= p.replicas <= a.max_replicas:
                raise ValueError(f"cluster.pools[{i}].replicas: {p.replicas} must lie within autoscale.min_replicas "
                                 f"({a.min_replicas}) and autoscale.max_replicas ({a.max_replicas})")
            if a is not None and a.enabled and a.signal == "prefill_tokens" and p.role == "decode":
                raise ValueError(f"cluster.pools[{i}].autoscale.signal: a decode pool computes no prompt tokens; "
                                 "use kv_usage, running or outstanding")
        return self

    @model_validator(mode="after")
    def _router(self):
        from sim.cluster import ROUTERS

        if self.router not in ROUTERS:
            raise ValueError(_unknown("router", self.router, ROUTERS))
        if self.prefill_replicas and self.prefill_replicas >= self.replicas:
            raise ValueError(f"prefill_replicas ({self.prefill_replicas}) must leave at least one of the "
                             f"{self.replicas} replicas for decoding")
        a = self.autoscale
        if a.enabled and not a.min_replicas <= self.replicas <= a.max_replicas:
            raise ValueError(f"replicas ({self.replicas}) must lie within autoscale.min_replicas "
                             f"({a.min_replicas}) and autoscale.max_replicas ({a.max_replicas})")
        if a.enabled and self.prefill_replicas:
            raise ValueError("autoscale does not support prefill/decode disaggregation (prefill_replicas > 0)")
        return self


class SchedulerSection(BaseModel):
    """``name`` plus that policy's knobs (checked against the policy's own ``Knobs``)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: str = "vllm_v1"

    @model_validator(mode="after")
    def _knobs(self):
        self.knobs()
        return self

    def knobs(self):
        from sim.scheduler import REGISTRY

        if self.name not in REGISTRY:
            raise ValueError(_unknown("scheduler", self.name, REGISTRY))
        return REGISTRY[self.name].Knobs(**(self.model_extra or {}))


class KV(_Strict):
    block_size: int = Field(default=DEFAULT_BLOCK_SIZE, ge=1, le=1024, description="tokens per KV block")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=MAX_GPU_BLOCKS, description="override: blocks a real engine reported")
    runtime_overhead_gib: float = Field(default=1.0, ge=0, le=1024, description="CUDA context, NCCL, graphs (per GPU)")
    watermark: float = Field(default=0.01, ge=0, lt=1, description="fraction of blocks kept free at admission")
    dtype: Literal["bf16", "fp16", "fp8", "fp32"] | None = Field(default=None, description=(
        "KV-cache dtype; default = the activation dtype (precision.activations), as vLLM's "
        "kv_cache_dtype 'auto' keeps the model dtype even for fp8/fp4 weights"))
    preemption: Literal["recompute", "swap"] = "recompute"
    swap_space_gib: float = Field(default=4.0, ge=0, le=1024, description="host memory for swapped blocks, per GPU (vLLM default 4)")
    prefix_caching: bool = False
    eviction: Literal["lru", "lfu", "fifo"] = "lru"
    # the tiered KV cache (sim/kv/tiers.py): a host tier under the GPU prefix cache, a disk under it
    cpu_offload_gib: float | None = Field(default=None, gt=0, le=2**20, description=(
        "host-memory tier under the GPU prefix cache, GiB per GPU (vLLM's kv_offloading_size; "
        "or kv.num_cpu_blocks, not both)"))
    num_cpu_blocks: int | None = Field(default=None, ge=1, le=2**40, description=(
        "host-memory tier in KV blocks per replica (vLLM OffloadingConnector's num_cpu_blocks)"))
    offload_latency_s: float = Field(default=6e-6, ge=0, le=1, description=(
        "latency of a step's load from the host tier: 6 us, the middle of the 5-7 us per "
        "cudaMemcpyAsync call measured in DualPath (arXiv 2602.21548, section 5.2)"))
    disk_offload_gib: float | None = Field(default=None, gt=0, le=2**30, description=(
        "disk (or remote store) tier under the host tier, GiB per GPU; needs kv.disk_read_gbps"))
    disk_read_gbps: float | None = Field(default=None, gt=0, le=1e5, description=(
        "read bandwidth of the disk tier per GPU, GB/s (no default: the device's figure)"))
    disk_latency_s: float = Field(default=0.0, ge=0, le=10, description=(
        "latency of a step's load from the disk tier (default 0: set the device's figure)"))

    @property
    def host_tier(self) -> str | None:
        """The key that sizes the host tier (None: no tiers)."""
        if self.cpu_offload_gib is not None:
            return "kv.cpu_offload_gib"
        return "kv.num_cpu_blocks" if self.num_cpu_blocks is not None else None


class Precision(_Strict):
    """Dtypes other than the weights' (top-level ``dtype``): activations (GEMM inputs/outputs,
    norms, attention Q/O, embedding, LM head) and the tensor-parallel collectives. bf16 by default:
    engines keep activations and all-reduces in the model dtype whatever the weight format."""

    activations: Literal["bf16", "fp16"] = "bf16"
    communication: Literal["bf16", "fp16", "fp8"] | None = Field(
        default=None, description="all-reduce / all-gather / pipeline send dtype (default: activations)")


class SLOClass(_Strict):
    ttft_s: float = Field(default=2.0, gt=0)
    tpot_s: float = Field(default=0.2, gt=0)


class SLO(_Strict):
    """A request meets its SLO when TTFT <= ttft_s and TPOT <= tpot_s. Defaults: the MLPerf
    Inference Llama-2-70B server-scenario limits (2 s TTFT, 200 ms TPOT)."""

    ttft_s: float = Field(default=2.0, gt=0)
    tpot_s: float = Field(default=0.2, gt=0)
    classes: dict[str, SLOClass] = Field(default_factory=dict)


Roofline = create_model(
    "Roofline", __base__=_Strict, __module__=__name__,
    **{f.name: (float, Field(default=f.default, **f.metadata)) for f in fields(RooflineParams)})
Roofline.__doc__ = """``cost.roofline``: the roofline's efficiency factors and overheads, field for
field the documented defaults and bounds of ``sim.cost.roofline.RooflineParams`` (their one source)."""


class Cost(_Strict):
    usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="override the card's dated price")
    model: Literal["auto", "roofline", "profiled", "kerneldb"] = Field(
        default="auto", description=(
            "auto: profiled when a profile exists for (hardware, model, dtype), else the kernel database "
            "when it covers the GPU and dtype, else roofline (the summary says why)"))
    framework: Literal["vllm", "sglang", "trtllm"] = Field(
        default="vllm", description="serving framework whose kernels (and engine overhead) price the steps (kerneldb)")
    framework_version: str | None = Field(
        default=None, description="framework version in the kernel database (default: the newest it holds)")
    profiles_dir: str | None = Field(default=None, description="fitted profiles folder (default: the shipped ones)")
    sampling: Literal["random", "greedy"] = Field(default="random", description=(
        "how tokens are sampled: random (temperature softmax + multinomial) or greedy (argmax); "
        "a profile prices it from its rows of that method"))
    roofline: Roofline = Roofline()
    expert_distribution: Literal["balanced", "power_law_1.01", "power_law_1.2"] = Field(
        default="balanced", description=(
            "token-to-expert distribution of the kernel database's moe_perf rows that price the routed "
            "experts (kerneldb; balanced: uniform routing, power_law_*: the measured skewed rows)"))
    moe_dispatch: Literal["allgather", "deepep_ll", "deepep_ht"] = Field(default="allgather", description=(
        "how attention data-parallel ranks exchange tokens around the routed experts (dp > 1): an "
        "all-gather and a reduce-scatter (vLLM's default, SGLang's DP attention), or DeepEP's "
        "low-latency / high-throughput dispatch and combine (the database's moe_a2a_perf rows)"))
    moe_table: Literal["framework", "vllm", "sglang", "trtllm"] = Field(default="framework", description=(
        "whose kernel-database collection on this GPU prices the routed experts (kerneldb): the framework's "
        "own, or another framework's where it times the kernel the engine runs (TRT-LLM's TRTLLM MoE backend "
        "on Blackwell runs the trtllm-gen kernels that vLLM and SGLang call through FlashInfer; TRT-LLM's "
        "collection times fp8_block with DeepGEMM only)"))
    expert_skew: float = Field(default=1.0, ge=1.0, le=100.0, description=(
        "routed-expert time multiplier for expert-load imbalance: the busiest GPU's load over the mean "
        "(the slowest rank sets the pace of an expert-parallel step); 1: as the table prices it"))


class EngineSection(_Strict):
    fast_forward: bool = Field(default=True, description=(
        "price runs of identical decode steps without per-request work between their ends; "
        "exact (same results as step by step), only faster"))
    workers: int = Field(default=1, ge=1, le=256, description=(
        "processes that share the replicas when they share no state (a router that reads no "
        "load and knows its turns, i.e. round_robin; no disaggregation; open-loop arrivals); "
        "results are identical to one process"))


class Frontend(_Strict):
    """The serving front end (the API server process) between the client and the engine
    (``sim/cluster/frontend.py``; docs/workloads.md, "The serving front end"). Every default is 0
    (no front end: the engine receives a request when the client sends it), because no public
    source gives these times for a given server, CPU and tokenizer; set them from your own
    server's measurements."""

    api_overhead_s: float = Field(default=0.0, ge=0, le=60, description=(
        "seconds from the client's send to the API server's tokenisation of the request (HTTP, JSON "
        "parsing, chat template, validation), a latency of each request, overlapping across requests"))
    tokenize_s_per_token: float = Field(default=0.0, ge=0, le=1, description=(
        "seconds of tokenisation per prompt token, on the one API-server process (requests in turn), "
        "before the engine sees the request"))
    detokenize_s_per_token: float = Field(default=0.0, ge=0, le=1, description=(
        "seconds of detokenisation and streaming per output token, on the API server: delays what the "
        "client sees of each token, not the engine's steps"))

    @property
    def active(self) -> bool:
        return bool(self.api_overhead_s or self.tokenize_s_per_token or self.detokenize_s_per_token)


class FaultEvent(_Strict):
    """One scheduled fault (``sim/cluster/faults.py``; docs/faults.md)."""

    kind: Literal["crash", "straggler", "degraded_link"]
    at_s: float = Field(ge=0, le=MAX_FAULT_S, description="simulated time the fault starts")
    replica: int | None = Field(default=None, ge=0, description=(
        "the replica hit (crash, straggler: required; degraded_link: null = every replica)"))
    duration_s: float | None = Field(default=None, gt=0, le=MAX_FAULT_S, description=(
        "crash: seconds until the replica serves again (KV empty); straggler, degraded_link: how long it lasts"))
    factor: float | None = Field(default=None, ge=1, le=MAX_SLOWDOWN, description=(
        "straggler: every step-time component x factor; degraded_link: communication and KV transfer x factor"))

    @model_validator(mode="after")
    def _kind(self):
        if self.duration_s is None:
            raise ValueError(f"a {self.kind} fault needs duration_s (crash: the restart delay)")
        if self.kind != "degraded_link" and self.replica is None:
            raise ValueError(f"a {self.kind} fault needs replica")
        if self.kind == "crash" and self.factor is not None:
            raise ValueError("a crash takes no factor")
        if self.kind != "crash" and self.factor is None:
            raise ValueError(f"a {self.kind} fault needs factor (>= 1)")
        return self


class Faults(_Strict):
    """Faults scheduled in simulated time. ``on_crash``: what happens to the requests a crashed
    replica held (``requeue``: routed again to a serving replica, KV recomputed; ``lose``: lost)."""

    on_crash: Literal["requeue", "lose"] = "requeue"
    events: list[FaultEvent] = Field(default_factory=list)


class Output(_Strict):
    plots: bool = True
    progress: bool = True
    step_records: bool = Field(default=True, description=(
        "keep one row per engine step (steps.parquet, time-series figures); turn off for runs of "
        "millions of requests, whose memory is then bounded by the requests alone"))
    stream: bool = Field(default=False, description=(
        "write request rows to requests.parquet in chunks as requests leave, so memory stays "
        "bounded (runs of tens of millions); needs an output folder; latency quantiles are read "
        "back exactly from the file, ITL quantiles come from a log-bucket sketch (0.1% relative "
        "error); no figures"))
    stream_chunk_rows: int = Field(default=200_000, ge=1, description="request rows per written chunk")


class Config(_Strict):
    model: str = "llama-3.1-8b"
    hardware: str = "h100-sxm"
    dtype: Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4", "fp32"] = Field(default="bf16", description=(
        "weight dtype (bytes per parameter incl. block scales; GEMM tensor-core dtype); fp32 (the "
        "whole model in fp32, activations and KV cache too) only where a profile with fp32 rows exists"))
    precision: Precision = Precision()
    parallelism: Parallelism = Parallelism()
    cluster: Cluster = Cluster()
    scheduler: SchedulerSection = SchedulerSection()
    kv: KV = KV()
    workload: WorkloadConfig = WorkloadConfig()
    slo: SLO = SLO()
    cost: Cost = Cost()
    engine: EngineSection = EngineSection()
    frontend: Frontend = Frontend()
    speculative: Speculative = Speculative()
    faults: Faults = Faults()
    output: Output = Output()
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    @model_validator(mode="after")
    def _runnable(self):
        """The model splits over the parallelism: checked here, before any simulation, with the
        rule the cost model applies (dtype support: ``_dtype_on_hardware``)."""
        from sim.catalog import get_model

        par = self.parallelism
        card = get_model(self.model)
        why = card.parallelism_problem(par.tp, par.pp) or card.expert_parallel_problem(par.tp, par.ep, par.dp)
        if why:
            raise ValueError(why)
        if par.dp > 1:  # expert groups step as one: what the engine does not simulate with them yet
            for on, what in ((self.faults.events, "faults are"), (self.cluster.autoscale.enabled, "autoscaling is"),
                             (self.cluster.prefill_replicas > 0, "prefill/decode disaggregation is"),
                             (self.engine.workers > 1, "engine.workers > 1 is")):
                if on:
                    raise ValueError(f"parallelism.dp: {what} not simulated with attention data parallelism yet; "
                                     "use dp=1")
        return self

    @model_validator(mode="after")
    def _pool_cards(self):
        """Each pool splits the model over its own parallelism, on a GPU that runs its dtype;
        what pools do not simulate yet is refused (the memory fit is checked by the engine,
        before simulating, naming the pool)."""
        from sim.catalog import CatalogError, get_hardware, get_model

        pools = self.cluster.pools
        if not pools:
            return self
        card = get_model(self.model)
        from sim.cluster.pools import fleet, pool_parallelism, pool_scheduler

        for i, p in enumerate(pools):
            tp, pp, ep, dp = pool_parallelism(self, p)
            why = card.parallelism_problem(tp, pp) or card.expert_parallel_problem(tp, ep, dp)
            if why:
                key = why.split(":")[0].removeprefix("parallelism.") if why.startswith("parallelism.") else None
                raise ValueError(f"cluster.pools[{i}].parallelism{'.' + key if key else ''} ({p.name}): "
                                 f"{why.split(': ', 1)[1] if key else why}")
            if dp > 1:  # an expert group steps as one: what the engine does not simulate with it yet
                if p.autoscale is not None and p.autoscale.enabled:
                    raise ValueError(f"cluster.pools[{i}].autoscale ({p.name}): autoscaling is not simulated with "
                                     "attention data parallelism (parallelism.dp > 1) yet")
                if self.faults.events:
                    raise ValueError(f"cluster.pools[{i}].parallelism.dp ({p.name}): faults are not simulated with "
                                     "attention data parallelism yet; use dp=1 or no faults")
            if p.scheduler is not None and p.scheduler.overrides():
                try:
                    pool_scheduler(self.scheduler, p.scheduler).knobs()
                except (ValueError, TypeError) as e:
                    raise ValueError(f"cluster.pools[{i}].scheduler ({p.name}): {str(e).splitlines()[0]}") from None
            dtype = p.dtype or self.dtype
            try:
                get_hardware(p.hardware).check_dtype(dtype)
            except CatalogError as e:
                raise ValueError(f"cluster.pools[{i}].dtype ({p.name}): {dtype}: {e}") from None
            if dtype in ("mxfp4", "int4") and not card.is_moe:
                raise ValueError(f"cluster.pools[{i}].dtype ({p.name}): {dtype} quantises the routed experts of an "
                                 f"MoE model; {self.model} has none")
        if self.speculative.draft_model is not None:
            raise ValueError("speculative.draft_model: a draft model is not simulated with cluster.pools yet (its "
                             "parallelism would be each decode pool's); use method mtp, eagle, eagle3 or ngram")
        for on, what in ((self.engine.workers > 1, "engine.workers > 1"),
                         (self.kv.host_tier is not None, f"a tiered KV cache ({self.kv.host_tier})")):
            if on:
                raise ValueError(f"cluster.pools: {what} is not simulated with pools yet")
        from sim.cost.memory import memory_for_config
        from sim.errors import CapacityError

        for p in fleet(self):  # the model fits each pool's GPUs (the numbers in the message)
            try:
                memory_for_config(p.cfg, card, get_hardware(p.hardware))
            except CapacityError as e:
                raise ValueError(f"cluster.pools[{p.index}].hardware ({p.name}): {e}") from None
        return self

    @model_validator(mode="after")
    def _speculation(self):
        """A draft card that exists, shares the target's vocabulary and is smaller; a policy that
        schedules draft tokens (a token-budget scheduler)."""
        sp = self.speculative
        if not sp.enabled:
            return self
        from sim.catalog import CatalogError, get_model
        from sim.scheduler import REGISTRY
        from sim.scheduler.base import BudgetScheduler
        from sim.speculative import draft_problem

        if sp.draft_model is not None:
            try:
                draft = get_model(sp.draft_model)
            except CatalogError as e:
                raise ValueError(f"speculative.draft_model: {e}") from None
            why = draft_problem(sp, get_model(self.model), draft) or draft.parallelism_problem(
                self.parallelism.tp, self.parallelism.pp)
            if why:
                raise ValueError(why if why.startswith("speculative") else f"speculative.draft_model: {why}")
        if sp.acceptance_column is not None and self.workload.trace is None:
            raise ValueError(f"speculative.acceptance: {sp.acceptance!r} reads each request's acceptance rate from a "
                             "trace column, and the workload has no trace (workload.trace)")
        cls = REGISTRY.get(self.scheduler.name)
        if cls is not None and not issubclass(cls, BudgetScheduler):
            raise ValueError(f"speculative: scheduler {self.scheduler.name!r} plans whole phases; speculative decoding "
                             "is modelled for the token-budget schedulers (vllm_v1, sarathi, priority, sjf, srpt, "
                             "lookahead, orca, trtllm)")
        return self

    @model_validator(mode="after")
    def _tiers(self):
        """The tiered KV cache: one host-tier size, a disk only under a host tier and with its
        bandwidth, prefix caching on, swap sharing the host pool, a card with a host link."""
        from sim.catalog import get_hardware

        kv = self.kv
        if kv.cpu_offload_gib is not None and kv.num_cpu_blocks is not None:
            raise ValueError("kv.num_cpu_blocks: the host tier is sized by kv.cpu_offload_gib or kv.num_cpu_blocks, "
                             "not both")
        host = kv.host_tier
        if kv.disk_offload_gib is not None and host is None:
            raise ValueError("kv.disk_offload_gib: the disk tier sits under a host tier; set kv.cpu_offload_gib or "
                             "kv.num_cpu_blocks")
        if (kv.disk_offload_gib is None) != (kv.disk_read_gbps is None):
            raise ValueError("kv.disk_read_gbps: set it with kv.disk_offload_gib (the disk tier's read bandwidth, GB/s)"
                             if kv.disk_read_gbps is None else
                             "kv.disk_read_gbps: given without a disk tier (kv.disk_offload_gib)")
        if host is None:
            return self
        if not kv.prefix_caching:
            raise ValueError(f"{host}: the host tier holds blocks evicted from the prefix cache; set "
                             "kv.prefix_caching: true (swap preemption alone uses kv.swap_space_gib)")
        if "swap_space_gib" in kv.model_fields_set:
            raise ValueError(f"kv.swap_space_gib: with a host tier ({host}) swap preemption uses the tier's host "
                             "pool; drop kv.swap_space_gib")
        hw = get_hardware(self.hardware)
        if not hw.host_link_gbps_bidir:
            raise ValueError(f"{host}: hardware {hw.id} has no host link (host_link_gbps_bidir) to offload over")
        return self

    @model_validator(mode="after")
    def _trace_format(self):
        from sim.workload.traces import FORMATS

        tc = self.workload.trace
        if tc is not None and tc.format != "auto" and tc.format not in FORMATS:
            raise ValueError("workload.trace.format: " + _unknown("trace format", tc.format, ["auto", *FORMATS]))
        return self

    @model_validator(mode="after")
    def _fault_replicas(self):
        for i, ev in enumerate(self.faults.events):
            if ev.replica is not None and ev.replica >= self.cluster.replicas:
                raise ValueError(f"faults.events.{i}.replica: {ev.replica} is not one of the "
                                 f"{self.cluster.replicas} replicas (0..{self.cluster.replicas - 1})")
        return self

    @field_validator("model", "hardware")
    @classmethod
    def _card(cls, v, info):
        from sim.catalog import CatalogError, get_hardware, get_model

        try:
            (get_model if info.field_name == "model" else get_hardware)(v)
        except CatalogError as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _dtype_on_hardware(self):
        from sim.catalog import CatalogError, get_hardware, get_model

        try:
            get_hardware(self.hardware).check_dtype(self.dtype)
        except CatalogError as e:
            raise ValueError(f"dtype {self.dtype}: {e}") from None
        if self.dtype in ("mxfp4", "int4") and not get_model(self.model).is_moe:
            raise ValueError(f"dtype {self.dtype}: quantises the routed experts of an MoE model (the gpt-oss / "
                             f"Kimi-K2.5 format); {self.model} has none, use bf16, fp8 or nvfp4")
        return self

    @property
    def act_dtype(self) -> str:
        """The activation dtype: fp32 for fp32 weights (the whole model runs in fp32, as PyTorch's
        CPU default), else ``precision.activations``."""
        return "fp32" if self.dtype == "fp32" else self.precision.activations

    @property
    def kv_dtype(self) -> str:
        return self.kv.dtype or self.act_dtype

    @property
    def comm_dtype(self) -> str:
        return self.precision.communication or self.act_dtype

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def _unknown(kind: str, name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown {kind} {name!r}{hint} (known: {', '.join(sorted(known))})"


# ---------------------------------------------------------------------------- loading


def _valid_keys(model_cls, path: tuple) -> list[str]:
    cls = model_cls
    for p in path:
        f = cls.model_fields.get(p)
        if f is None:
            return []
        ann = f.annotation
        cls = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            return []
    return list(cls.model_fields)


def _format_error(err: ValidationError, data: dict) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(str(x) for x in e["loc"])
        path = ".".join(loc) or "config"
        if loc[:2] == ("cluster", "pools") and len(loc) > 2 and loc[2].isdigit():  # as the pool checks name it
            path = f"cluster.pools[{loc[2]}]" + "".join("." + x for x in loc[3:])
        if e["type"] == "extra_forbidden":
            known = _valid_keys(Config, loc[:-1])
            if loc[:1] == ("scheduler",) and len(loc) == 2:
                try:
                    from sim.scheduler import REGISTRY
                    known = list(REGISTRY[data.get("scheduler", {}).get("name", "vllm_v1")].Knobs.model_fields) + ["name"]
                except Exception:
                    known = []
            close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.5)
            hint = f"; did you mean {'.'.join(loc[:-1] + (close[0],))}?" if close else ""
            lines.append(f"unknown config key {path}{hint}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{path}: {msg}" if loc else msg)  # a cross-section check names its own keys
    return "invalid config: " + "; ".join(lines)


def _coerce(value: str) -> Any:
    """A --set value: YAML scalar syntax (numbers, true/false, null, lists); plain text when it
    does not parse as YAML."""
    try:
        v = yaml.load(value, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except (yaml.YAMLError, ConfigError, ValueError, OverflowError, RecursionError):
        return value
    check_keys(v, f"--set value {value!r}")
    return v


def _section_default(path: list[str]) -> dict:
    """The default contents of the config section at ``path`` (empty if it has none), so that
    ``--set workload.prompt.max=1000`` changes one knob of the default prompt distribution
    instead of replacing the distribution."""
    cls, default = Config, None
    for p in path:
        f = getattr(cls, "model_fields", {}).get(p)
        if f is None:
            return {}
        default = f.get_default(call_default_factory=True)
        ann = type(default) if isinstance(default, BaseModel) else f.annotation
        cls = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            return {}
    return default.model_dump(mode="json", exclude_unset=True) if isinstance(default, BaseModel) else {}


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` strings to a nested dict (a new dict is returned). A section the
    data does not mention starts from its default contents."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = _section_default(parts[: i + 1])
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a section")
            node = nxt
        node[parts[-1]] = _coerce(value)
    return data


MAX_YAML_BYTES = 16 * 2**20
"""Largest YAML file read (a config or sweep spec is a few KiB; this bounds memory)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key repeated in one mapping (plain PyYAML keeps the
    last value silently), naming the key and both lines."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; the constructor below reports it
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConfigError(f"duplicated key {key!r} at line {line} (first at line {first})")
            seen[key] = line
        return super().construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def parse_yaml(text: str, where: str) -> object:
    """Parse YAML text with duplicate keys rejected; errors name ``where`` and the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as e:  # e.g. a timestamp out of range
        raise ConfigError(f"{where}: not valid YAML: {e}") from None


def check_keys(data, where: str = "config", path: str = "", _seen: set | None = None) -> None:
    """Every mapping key is a string (a YAML key such as ``1:`` or ``true:`` is an error that
    names its path). A YAML alias is one shared object: each is walked once, so an alias bomb
    ("billion laughs") costs its size in the file, not its expanded size."""
    if not isinstance(data, (dict, list)):
        return
    seen = set() if _seen is None else _seen
    if id(data) in seen:
        return
    seen.add(id(data))
    if isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(k, str):
                at = f" under {path}" if path else ""
                raise ConfigError(f"{where}: key {k!r}{at} is a {type(k).__name__}; config keys are names")
            check_keys(v, where, f"{path}.{k}" if path else k, seen)
    else:
        for i, v in enumerate(data):
            check_keys(v, where, f"{path}[{i}]", seen)


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from a file: bounded size, duplicate and non-string keys rejected."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist" if not path.exists() else f"{path} is not a file")
    if path.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, larger than a config can be "
                          f"({MAX_YAML_BYTES // 2**20} MiB)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    data = parse_yaml(text, str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    check_keys(data, str(path))
    return data


def build_config(data: dict | None = None, overrides: list[str] | None = None) -> Config:
    """Validate a config dict (plus ``--set`` overrides); errors name the dotted key path."""
    if overrides is not None and (isinstance(overrides, (str, bytes)) or not isinstance(overrides, (list, tuple))
                                  or not all(isinstance(o, str) for o in overrides)):
        raise ConfigTypeError(f"overrides must be a list of 'key=value' strings, got {type(overrides).__name__} "
                              f"{str(overrides)[:60]!r}")
    if not isinstance(data, dict) and data is not None:
        raise ConfigTypeError(f"a config must be a dict of sections, got {type(data).__name__}")
    check_keys(data or {})
    data = apply_overrides(data or {}, overrides or [])
    try:
        return Config(**data)
    except ValidationError as e:
        raise ConfigError(_format_error(e, data)) from None


def load_config(source: str | Path | dict | Config | None = None, overrides: list[str] | None = None) -> Config:
    """A Config from a YAML path, a dict, a Config, or None (the embedded default)."""
    if isinstance(source, Config):
        return build_config(source.to_dict(), overrides) if overrides else source
    if source is None:
        data = {}
    elif isinstance(source, dict):
        data = source
    elif isinstance(source, (str, Path)):
        data = read_yaml(source)
    else:
        raise ConfigTypeError(f"a config is a YAML path, a dict of sections, a Config or None; got "
                              f"{type(source).__name__} {str(source)[:60]!r}")
    return build_config(data, overrides)
