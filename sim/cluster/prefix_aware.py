"""``prefix_aware`` and ``prefix_approx``: send a request to the replica that caches the longest
prefix of its prompt, weighed against the replicas' load.

Source: llm-d's precise prefix-cache scorer (llm-d docs 0.7-0.8, "Precise Prefix Cache Routing"
and "Prefix-Cache Aware Routing"; the scorer plugins of the Kubernetes Gateway API Inference
Extension's endpoint picker): vLLM pods publish KV-block events, the router indexes them by
block hash and scores each pod by the fraction of the request's prefix blocks resident there;
a queue scorer (waiting requests, min-max normalised) and a KV-cache utilisation scorer
(1 - usage) weigh load; the pod with the highest weighted sum of scores wins. NVIDIA Dynamo's
KV router makes the same trade in blocks (an overlap weight times the blocks left to prefill,
plus the blocks of active decodes; the lowest cost wins). Here, per replica i::

    score_i = prefix_weight * cached_i / blocks
            + queue_weight * (q_max - q_i) / (q_max - q_min)     (1 for all when all q are equal)
            + kv_weight * (1 - kv_used_i)

``blocks``: the request's full prompt KV blocks (``sim.kv.prefix.kv_block_hashes``; the prefix
score is 0 without them); ``cached_i``: the leading ones cached on replica i, read from its KV
manager (``cached_blocks``: what llm-d's index learns from the KV events); ``q_i``: waiting +
running requests. The highest score wins, ties to the lowest index. Weights are the knobs
``cluster.prefix_routing.{prefix,queue,kv}_weight`` (equal by default, as in the Inference
Extension's example profile, where all three scorers weigh 2).

``prefix_approx`` is llm-d's approximate variant (approx-prefix-cache-producer with the
prefix-cache scorer): the router never reads a replica's cache; it remembers the prefix blocks
it routed to each replica, in an index of at most ``history_blocks`` blocks per replica that
forgets the least recently routed first (default: the replica's KV pool size, as the scorer's
``autoTune`` takes the capacity from the server's metrics), and ``cached_i`` counts the
request's leading blocks found there.

Departures: the router sees caches and counts the moment a request arrives (no event or metrics
delay); blocks are the simulator's KV block keys (no tokenizer, no character approximation);
Dynamo's cost in blocks and its softmax sampling (``router_temperature``) are not modelled.
Both routers read replica state, so they give no ``turns``: with several replicas the decode
fast-forward is off (results are the same either way).
"""
from __future__ import annotations

from collections import OrderedDict

from sim.cluster import register
from sim.kv.prefix import kv_block_hashes


def _chain(spec, loads) -> list[int]:
    kv = loads[0].kv
    if spec.block_hashes is None or kv is None:
        return []
    return kv_block_hashes(spec.block_hashes, spec.hash_block_tokens, kv.block_size, spec.prompt_tokens)


def _knobs(state):
    knobs = state.get("cluster")
    if knobs is None:
        from sim.config import Cluster

        knobs = state["cluster"] = Cluster()
    return knobs.prefix_routing


def best(cached: list[int], blocks: int, loads, knobs) -> int:
    """The replica with the highest weighted score (ties to the lowest index)."""
    q = [ld.waiting + ld.running for ld in loads]
    lo, hi = min(q), max(q)
    scores = []
    for i, ld in enumerate(loads):
        s = knobs.prefix_weight * (cached[i] / blocks if blocks else 0.0)
        s += knobs.queue_weight * ((hi - q[i]) / (hi - lo) if hi > lo else 1.0)
        s += knobs.kv_weight * (1.0 - ld.kv_used_frac)
        scores.append(s)
    return max(range(len(loads)), key=lambda i: (scores[i], -i))


@register("prefix_aware")
def route(spec, loads, state) -> int:
    chain = _chain(spec, loads)
    cached = [ld.kv.cached_blocks(chain) if chain and ld.kv is not None else 0 for ld in loads]
    return best(cached, len(chain), loads, _knobs(state))


@register("prefix_approx")
def route_approx(spec, loads, state) -> int:
    knobs = _knobs(state)
    chain = _chain(spec, loads)
    index: dict = state.setdefault("index", {})  # replica -> OrderedDict of the block keys routed there
    cached = []
    for i in range(len(loads)):
        seen = index.get(i, ())
        n = 0
        for h in chain:
            if h not in seen:
                break
            n += 1
        cached.append(n)
    i = best(cached, len(chain), loads, knobs)
    if chain:
        seen = index.setdefault(i, OrderedDict())
        for h in chain:
            seen[h] = None
            seen.move_to_end(h)
        cap = knobs.history_blocks or (loads[i].kv.num_blocks if loads[i].kv is not None else len(chain))
        while len(seen) > cap:
            seen.popitem(last=False)
    return i
