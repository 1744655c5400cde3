"""A request's lifecycle rules, as plain functions: the only code that changes request state
(docs/architecture.md sections 2-3). The engine calls them at its named points (admit, commit a plan,
complete a step, complete a decode run); ``tests/policy_kit.py`` calls the same functions to
step a scheduler without an engine, and ``calibration/plans.py`` replays step plans with the
same token-emission rule. No event loop, no simpy, standard library only (the replay runs on a
bare GPU machine).

The rules:

- **Token emission**: a request needs ``prompt + generated`` tokens in its KV cache before it
  can sample its next token; a step that brings its computed tokens there samples one output
  token, which exists at the end of the step (``emits_token``).
- **Commit**: preempted requests lose their progress (recompute) or keep it in host memory
  (swap); prefix-cache hits count as computed; a scheduled request becomes RUNNING, and its first
  schedule time is set once.
- **Complete a step**: every scheduled request advances by its new tokens; those whose computed
  tokens reach the emission point get a token, its time, and the inter-token gap since the last.
- **Complete a decode run**: the same as ``k`` single-token steps, applied at once (to a whole
  run's batch, ``complete_run``, or to one request, ``complete_decodes``).

``itl`` arguments take any object with ``add(gap_s, tokens)`` and ``extend(gaps, tokens)``
(``sim.metrics.steplog.ItlLog``), or None to drop the gaps.
"""
from __future__ import annotations

from operator import itemgetter, sub

from sim.request import Request, Status

_RUNNING, _FINISHED = Status.RUNNING, Status.FINISHED  # an enum member's attribute lookup costs ~80 ns


def emits_token(computed: int, prompt_tokens: int, generated: int) -> bool:
    """The token-emission rule: after a step that leaves ``computed`` tokens in a request's KV
    cache, it samples its next output token when those reach its prompt plus the tokens it has
    generated so far (vLLM v1's ``num_computed_tokens == num_tokens``)."""
    return computed >= prompt_tokens + generated


def reject(r: Request, reason: str) -> None:
    """An arrival the engine will never serve, with its reason (``code: detail``)."""
    r.status = Status.REJECTED
    r.reject_reason = reason


def preempt(r: Request, swapped: bool) -> None:
    """``r`` lost its GPU blocks: with swap its KV waits in host memory and its progress stays;
    with recompute its progress resets (the tokens already emitted stay emitted)."""
    r.preemptions += 1
    if swapped:
        r.status = Status.SWAPPED
    else:
        r.num_computed = 0
        r.status = Status.WAITING


def commit(plan, by_id: dict, now: float) -> list[int]:
    """Apply ``plan``'s preemptions and prefix-cache hits and mark its requests scheduled;
    returns each scheduled request's context (tokens already computed), in plan order."""
    if plan.preempted:
        swapped = plan.swapped_out
        for rid in plan.preempted:
            preempt(by_id[rid], rid in swapped)
    if plan.cached_tokens:
        for rid, c in plan.cached_tokens.items():  # prefix-cache hits count as computed
            r = by_id[rid]
            r.num_computed = c
            if r.first_scheduled_s is None:
                r.cached_tokens = c
    ctx = []
    append = ctx.append
    for rid in plan.num_new_tokens:
        r = by_id[rid]
        if r.status is not _RUNNING:
            if r.first_scheduled_s is None:
                # simpy adds the arrival's delay to the clock: keep an ulp of rounding from
                # putting the first schedule before the arrival
                r.first_scheduled_s = max(now, r.spec.arrival_s)
            r.status = _RUNNING
        append(r.num_computed)
    return ctx


def complete_step(plan, by_id: dict, start: float, now: float, itl,
                  accepted: dict | None = None) -> tuple[int, int, list[Request]]:
    """A step that ran from ``start`` to ``now``: advance every scheduled request, emit tokens,
    mark finished requests. Returns (prefill tokens, decode tokens, the requests that finished
    or got their first token this step, in plan order).

    ``accepted`` (speculative decoding): for each request that verified drafts this step, how
    many were accepted (``sim.speculative``); it emits that many tokens more than one, at the
    step's end (gaps of 0 after the first), capped by its output, and only the accepted drafts'
    KV counts as computed."""
    prefill = decode = 0
    step_gaps = 0  # tokens whose previous token came at this step's start: gap = the step
    changed = []
    for rid, n in plan.num_new_tokens.items():
        r = by_id[rid]
        if accepted is not None and rid in accepted:
            _complete_verification(r, n, accepted[rid], start, now, itl)
            decode += n
            if r.finish_s is not None:
                changed.append(r)
            continue
        c = r.num_computed + n
        r.num_computed = c
        g = r.num_generated
        if n == 1 and g:
            decode += 1
        else:
            prefill += n
        if c < r.prompt_tokens + g:  # emits_token, inlined on the hot path
            continue
        g += 1  # the step computed the last missing token: sample the next output token
        r.num_generated = g
        if r.first_token_s is None:
            r.first_token_s = now
            changed.append(r)
        else:
            last = r.last_token_s
            gap = now - last
            if last == start:
                step_gaps += 1
            elif itl is not None:
                itl.add(gap, 1)
            if gap > r.max_itl_s:
                r.max_itl_s = gap
        r.last_token_s = now
        if g >= r.output_tokens:
            r.status = _FINISHED
            r.finish_s = now
            if g > 1:
                changed.append(r)
    if step_gaps and itl is not None:
        itl.add(now - start, step_gaps)
    return prefill, decode, changed


def _complete_verification(r: Request, n: int, a: int, start: float, now: float, itl) -> None:
    """``r`` (decoding) verified ``n - 1`` drafts with its decode token and ``a`` were accepted:
    it emits ``a + 1`` tokens (capped by its output) at ``now``."""
    g = r.num_generated
    e = min(a + 1, r.output_tokens - g)
    r.num_computed += e  # the decode token's KV and the accepted drafts'; rejected slots are reused
    r.num_generated = g + e
    gap = now - r.last_token_s
    if itl is not None:
        itl.add(gap, 1)
        if e > 1:
            itl.add(0.0, e - 1)  # a burst: the accepted tokens arrive with the first
    if gap > r.max_itl_s:
        r.max_itl_s = gap
    r.last_token_s = now
    if r.num_generated >= r.output_tokens:
        r.status = _FINISHED
        r.finish_s = now


def complete_run(reqs: list[Request], times: list[float], steps: int, itl) -> list[Request]:
    """A decode run of ``steps`` single-token steps starting at ``times[0]`` (``times[j]`` the
    start of step j, ``times[-1]`` the end of the last): every request computed and emitted one
    token per step until its last token (a run may go on past a request's finish:
    ``fastforward.decode_run``). Returns the requests that finished, in the order they finished
    (ties in ``reqs`` order)."""
    start0, first_end = times[0], times[1]
    gaps = list(map(sub, times[2: steps + 1], times[1:steps]))  # "now - start" of each later step
    run_max = max(gaps) if gaps else 0.0
    step_gap = first_end - start0  # the first step's gap of a request whose last token came at its start
    others = 0  # requests whose last token came before the run's start
    done, early = [], []  # early: (steps, request) of those that finish before the last step
    for r in reqs:
        k = r.output_tokens - r.num_generated  # the steps it takes part in (its tokens still to come)
        if k >= steps:
            k, m_later = steps, run_max
        else:  # it finishes at the end of step k - 1: the largest gap of its steps 1 .. k - 1
            m_later = max(gaps[:k - 1]) if k > 1 else 0.0
            early.append((k, r))
        last = r.last_token_s  # the first step's gaps, grouped as complete_step groups them
        if last == start0:
            m = step_gap
        else:
            others += 1
            m = first_end - last
            if itl is not None:
                itl.add(m, 1)
        if m_later > m:
            m = m_later
        if m > r.max_itl_s:
            r.max_itl_s = m
        r.num_computed += k
        r.num_generated += k
        r.last_token_s = end = times[k]
        if k < steps or r.num_generated >= r.output_tokens:  # its last token
            r.status = _FINISHED
            r.finish_s = end
            if k == steps:
                done.append(r)
    if early:
        early.sort(key=itemgetter(0))  # finish order (ties in ``reqs`` order)
    if itl is not None:
        if others < len(reqs):
            itl.add(step_gap, len(reqs) - others)
        if gaps:
            itl.extend_parts(gaps, 0, len(reqs), [k - 1 for k, _ in early])
    if early:
        done[:0] = [r for _, r in early]
    return done


def complete_decodes(r: Request, steps: int, last_s: float, max_gap: float) -> None:
    """``r`` computed and emitted one token in each of ``steps`` consecutive decode steps, the
    last ending at ``last_s``, the largest gap between its tokens in them ``max_gap``: its state
    after them (what ``complete_run`` does for each request of a run; a flow applies each
    request's steps once, when it leaves or the flow ends: ``sim.flow``)."""
    r.num_computed += steps
    g = r.num_generated + steps
    r.num_generated = g
    r.last_token_s = last_s
    if max_gap > r.max_itl_s:
        r.max_itl_s = max_gap
    if g >= r.output_tokens:
        r.status = _FINISHED
        r.finish_s = last_s


def lose(r: Request, reason: str) -> None:
    """A fault took ``r`` (its replica crashed under ``faults.on_crash: lose``): it ends unserved,
    with the reason (``code: detail``)."""
    r.status = Status.LOST
    r.reject_reason = reason


def crash_requeue(r: Request) -> None:
    """``r``'s replica crashed (or no decode replica can take its KV): its KV cache is gone, so
    its progress resets as in a recompute preemption; the tokens already emitted stay emitted."""
    r.num_computed = 0
    r.status = Status.WAITING


def hand_off(r: Request) -> None:
    """Disaggregation: ``r`` left its prefill replica with its first token; it waits for its KV
    to reach a decode replica, its computed tokens intact."""
    r.status = Status.WAITING
