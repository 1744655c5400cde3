"""The serving front end: the API server process between the client and the engine
(``frontend`` in the config; docs/workloads.md, "The serving front end").

A real server does work on the CPU that no kernel table sees, before the engine receives a
request and after it emits each token:

- **In**: the HTTP request is received, parsed and validated and the chat template applied
  (``api_overhead_s``, a fixed latency per request), then the prompt is tokenised
  (``tokenize_s_per_token`` x prompt tokens). In vLLM the OpenAI API server (``vllm serve``) does
  this in its own process and hands the token ids to the engine core (V1: ``AsyncLLM`` ->
  ``EngineCoreClient``, a separate process), so the engine sees the request only afterwards.
  Request handling overlaps across requests (an asyncio server; network time is no CPU time), so
  ``api_overhead_s`` delays each request alone; tokenisation is CPU work of the one API-server
  process, taken in the order requests come: request i reaches the engine at
  ``max(sent_i + api_overhead_s, ready_{i-1}) + tokenize_s_per_token x prompt_i`` (a FIFO single
  server after a fixed delay, Lindley's recursion), so a burst of long prompts queues in front of
  the engine. The order is kept (the delay is the same for every request).
- **Out**: every output token is detokenised and streamed by the same process
  (``detokenize_s_per_token``): the client sees each token that long after the engine emitted
  it. The engine's steps are not delayed (vLLM V1's engine core runs in its own process, and
  vLLM from 0.6 overlaps output processing with the next step); TTFT and E2E as the client
  measures them grow by it, ITL and TPOT do not.

Departures (stated): the output work does not compete with tokenisation for the API server's
time (the process is modelled as two independent lanes); one API-server process
(``--api-server-count 1``); no per-token cost on the engine's critical path (a synchronous
engine would add it to each step). Every default is 0, the engine then receives each request
when it is sent and results are identical to a run without this module.

Request rows (``sim/metrics/requestlog.py``): with a front end ``arrival_s`` is the client's send
time and ``engine_arrival_s`` when the engine received it; ``first_token_s`` and ``finish_s`` stay
engine-side, and ``ttft_s`` / ``e2e_s`` are the client's (``+ frontend_out_s``), as the metric
definitions of docs/architecture.md section 4 measure them from the client's arrival.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from sim.types import RequestSpec


class Frontend:
    """One API-server process: ``receive`` gives the time the engine gets a request sent at
    ``sent_s`` with ``prompt_tokens`` tokens (it remembers when its tokeniser is free again);
    ``out_s`` is the delay of every output token the client sees."""

    __slots__ = ("api_s", "tok_s", "out_s", "free_at")

    def __init__(self, cfg):
        self.api_s, self.tok_s = float(cfg.api_overhead_s), float(cfg.tokenize_s_per_token)
        self.out_s = float(cfg.detokenize_s_per_token)
        self.free_at = float("-inf")

    def receive(self, sent_s: float, prompt_tokens: int) -> float:
        """When the engine receives a request sent at ``sent_s``: ``api_overhead_s`` later, then
        after the tokenisation of the requests before it and of its own prompt."""
        start = sent_s + self.api_s
        if start < self.free_at:
            start = self.free_at
        self.free_at = start + self.tok_s * prompt_tokens
        return self.free_at

    def requests(self, specs: Iterable[RequestSpec]) -> Iterator[RequestSpec]:
        """``specs`` (in sending order) as the engine receives them: ``arrival_s`` moved to the
        engine's receipt, ``sent_s`` the client's time. The order is kept (a FIFO front end)."""
        self.free_at = float("-inf")
        for s in specs:
            yield replace(s, arrival_s=self.receive(s.arrival_s, s.prompt_tokens), sent_s=s.arrival_s)


def with_frontend(workload, cfg):
    """``workload`` (a ``Workload``) seen through the front end ``cfg`` (the config's
    ``frontend``), or ``workload`` itself when every front-end time is 0."""
    if not cfg.active:
        return workload
    from sim.workload import Workload

    inner = workload
    return Workload(lambda: Frontend(cfg).requests(iter(inner)), inner.info)
