"""The price of one attention-data-parallel rank's step inside an expert-parallel group.

With ``parallelism.dp`` attention ranks sharing one expert group (vLLM data parallel + expert
parallel, SGLang ``--enable-dp-attention``, TRT-LLM ``attention_dp``), every MoE layer is a
collective step: each rank runs attention (and the dense layers, norms, LM head) on its own batch,
the ranks' tokens meet in the routed experts, and the step ends when the slowest rank does (ranks
with nothing to do run a dummy batch, as vLLM does). ``dp_step_time`` prices that step from a cost
model built with the group's ``tp``, ``ep`` and ``dp``:

- each rank's own part: its ``step_time`` less the routed experts of its own tokens;
- the routed experts once, for the whole group's tokens (``moe``: the kernel database's
  ``moe_perf`` rows at the real ``moe_tp`` x ``moe_ep`` and token distribution; those rows are
  timed by the group's total tokens), times the MoE layers;
- the attention-DP exchange per MoE layer (``dp_exchange``): an all-gather of every rank's hidden
  states before the experts and a reduce-scatter after (vLLM's default ``allgather_reducescatter``
  all2all backend, SGLang's DP attention without DeepEP), from the kernel database's NCCL tables
  (``nccl_perf``: 2, 4 and 8 GPUs) where they cover the tp x dp GPUs, else the roofline
  collective; or, with ``cost.moe_dispatch`` ``deepep_ll`` / ``deepep_ht``, DeepEP's dispatch and
  combine from the database's ``moe_a2a_perf`` rows (vLLM and TRT-LLM: 8 GPUs in one node) by
  each rank's tokens, the all-gather where they have no row for the group.

The engine calls it with the batch shape of every rank of one synchronised step.
"""
from __future__ import annotations

from sim.types import BatchShape


def rank_part(cm, shape: BatchShape, st=None) -> float:
    """One rank's step without the routed experts: attention, dense layers, shared experts, router,
    norms, LM head, all-reduces within its tp group, CPU overhead (``st``: its ``step_time``, when
    the caller has it)."""
    st = cm.step_time(shape) if st is None else st
    return st.total - routed(cm, sum(shape.new_tokens))


def routed(cm, tokens: int) -> float:
    """The routed experts of a rank's own ``tokens`` in its ``step_time`` (every MoE layer), which
    ``rank_part`` takes off."""
    return cm.shapes.moe_layers * cm.moe(tokens)


def group_part(cm, tokens: int) -> float:
    """The routed experts and the attention-DP exchange of one step for ``tokens`` tokens of the
    whole expert group (every MoE layer)."""
    s = cm.shapes
    if not s.moe_layers or tokens <= 0:
        return 0.0
    return s.moe_layers * (cm.moe(tokens) + cm.dp_exchange(tokens))


def dp_step(cm, shapes: list[BatchShape], extra=None, decoding=None) -> tuple[float, list]:
    """One step synchronised over the ``cm.dp`` attention ranks of an expert group: its seconds
    (the slowest rank's own part plus the group's routed experts and exchange) and each rank's
    own ``StepTime`` (None for an idle rank), each priced once. ``shapes``: one batch shape per
    rank (an idle rank: an empty shape, a dummy batch of one token). ``extra``: a function of a
    rank's index and its ``StepTime`` that returns the rank's step with more of its own work
    added (speculative decoding's drafts), or None. ``decoding``: a function of a rank's index
    that gives (its own part, its tokens) for a rank whose shape is None: a rank in a decode run
    (``sim.grouprun``), which priced its steps ahead (its ``StepTime`` is None here)."""
    if len(shapes) != cm.dp:
        raise ValueError(f"dp_step_time: {len(shapes)} batch shapes for {cm.dp} attention ranks")
    steps = [cm.step_time(sh) if sh is not None and sh.new_tokens else None for sh in shapes]
    own = [0.0 if st is None else rank_part(cm, sh, st) for st, sh in zip(steps, shapes)]
    if extra is not None:
        for i, st in enumerate(steps):
            if st is not None:
                steps[i] = extra(i, st)
                own[i] += steps[i].total - st.total
    tokens = 0
    for i, sh in enumerate(shapes):
        if sh is None:
            own[i], t = decoding(i)
            tokens += t
        else:
            t = sum(sh.new_tokens)
            tokens += t if t > 1 else 1
    return max(own) + group_part(cm, tokens), steps


def dp_step_time(cm, shapes: list[BatchShape]) -> float:
    """Seconds of one step synchronised over the ``cm.dp`` attention ranks (``dp_step``)."""
    return dp_step(cm, shapes)[0]
