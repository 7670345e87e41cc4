"""The ablations of TimelyLLM the README reports: closed-loop feedback off, prefill steps alone off, interrupts off,
and timely's admission, preemption and drop rule under EDF or FCFS order instead of Eq. 4."""
from __future__ import annotations

from timely_llm_ros.core.admission import segment_deadline
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.registry import register
from timely_llm_ros.core.policies.timely import TimelyPolicy


@register
class TimelyOpenLoop(TimelyPolicy):
    """Ablation: timely with E from execution-time estimates only (the executor's start/finish reports ignored)."""

    name = "timely-open-loop"
    forced_options = {"feedback": "open"}


@register
class TimelyMixedSteps(TimelyPolicy):
    """Ablation: timely with option prefill_alone off: a step that prefills always carries the decode pass too."""

    name = "timely-mixed-steps"
    forced_options = {"prefill_alone": False}


@register
class TimelyNoInterrupt(TimelyPolicy):
    """Ablation: timely with option interrupt off: a request that arrives during an engine step waits for its end."""

    name = "timely-nointerrupt"
    forced_options = {"interrupt": False}


@register
class EdfAdmit(TimelyPolicy):
    """Ablation: timely's admission, preemption and drop rule with EDF order (segment deadline) instead of Eq. 4."""

    name = "edf-admit"

    def priority(self, gen: Generation, now: float) -> float:
        return -segment_deadline(gen)


@register
class FcfsAdmit(TimelyPolicy):
    """Ablation: timely's admission, preemption and drop rule with FCFS order (request arrival) instead of Eq. 4."""

    name = "fcfs-admit"

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival
