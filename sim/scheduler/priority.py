"""``priority``: strict priority classes, as vLLM's ``--scheduling-policy priority``.

Source: vLLM V1 scheduler (0.8-0.10) with ``SchedulingPolicy.PRIORITY``: the waiting queue is
ordered by (priority, arrival time), lower number first, FCFS within a class; when blocks run
out the running request with the largest (priority, arrival time), i.e. the lowest-priority and
then the newest, is preempted, even if it was already scheduled this step (its tokens go back to
the budget). Steps are otherwise ``vllm_v1`` steps (one token budget, chunked prefill).

Departures: as ``vllm_v1``; a higher-priority arrival does not preempt a running request while
memory suffices (vLLM V1 does not either).
"""
from __future__ import annotations

from sim.scheduler.base import register
from sim.scheduler.vllm_v1 import VLLMV1Scheduler


def priority_key(r):
    return (r.spec.priority, r.spec.arrival_s, r.id)


@register("priority")
class PriorityScheduler(VLLMV1Scheduler):
    queue_key = staticmethod(priority_key)
    queue_static = True  # (priority, arrival) keys never change

    def victim(self):
        return max(self.running, key=priority_key)
