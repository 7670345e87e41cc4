"""Per-task-type metrics of simulated or real runs (TimelyLLM section 7) and scheduling-overhead helpers.

utility: TUF_0 of the response time (Eq. 1), the paper's headline metric; a request that was dropped, failed or
cancelled before its first action counts min(0, TUF_0(time it ended - arrival)), i.e. at most 0, never hidden.
utility_share: utility / beta. eq3_utility: Eq. 3 sum over executed segments. response_time and waiting_time
(sum of segment waits) are means over served requests. served/dropped: shares of all requests of the type.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Sequence

from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.request import Generation, RequestState


@dataclass
class TypeMetrics:
    """Aggregates for one task type (or 'all')."""

    task_type: str
    n: int
    utility: float
    utility_share: float
    eq3_utility: float
    response_time: float
    waiting_time: float
    completion_time: float
    served: float
    dropped: float

    def as_dict(self) -> dict:
        return asdict(self)


def request_utility(outcome) -> float:
    """TUF_0 of the response time; a request never served counts min(0, TUF_0 at the time it ended)."""
    if not math.isnan(outcome.response_time):
        return outcome.utility
    return min(0.0, outcome.req.tuf(outcome.finished_at - outcome.req.arrival))


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def summarize(outcomes: Iterable, key: Callable[[object], str] = lambda o: o.req.task_type) -> dict[str, TypeMetrics]:
    """Metrics per key(outcome) (default: task type, e.g. the LRTrace id), plus 'all'."""
    groups: dict[str, list] = {}
    for o in outcomes:
        groups.setdefault(key(o), []).append(o)
        groups.setdefault("all", []).append(o)
    out = {}
    for name in sorted(groups, key=lambda k: (k == "all", len(k), k)):
        os = groups[name]
        served = [o for o in os if not math.isnan(o.response_time)]
        utils = [request_utility(o) for o in os]
        beta = _mean([o.req.tuf.beta for o in os])
        out[name] = TypeMetrics(
            task_type=name, n=len(os), utility=_mean(utils), utility_share=_mean(utils) / beta,
            eq3_utility=_mean([o.total_utility if not math.isnan(o.response_time) else u
                               for o, u in zip(os, utils)]),
            response_time=_mean([o.response_time for o in served]),
            waiting_time=_mean([o.waiting_time for o in served]),
            completion_time=_mean([o.completion_time for o in served if not math.isnan(o.completion_time)]),
            served=len([o for o in os if o.state == RequestState.DONE]) / len(os),
            dropped=len([o for o in os if o.state == RequestState.DROPPED]) / len(os),
        )
    return out


def by_urgency(outcome) -> str:
    """Group key: the urgency class ('normal', 'urgent', ...)."""
    return outcome.req.urgency or "custom"


@dataclass
class OverheadStats:
    """Wall time of one scheduling decision (priority update + pick), milliseconds."""

    queued: int
    mean_ms: float
    p99_ms: float
    max_ms: float


def time_select(policy: Policy, waiting: Sequence[Generation], running: Sequence[Generation],
                ctx: SchedulingContext, repeats: int = 200) -> OverheadStats:
    """Measure policy.select over the same queue repeatedly (the clock moves, so priorities are recomputed)."""
    samples = []
    for i in range(repeats):
        ctx.now += 1e-4
        t0 = time.perf_counter()
        policy.select(waiting, running, ctx)
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return OverheadStats(len(waiting), _mean(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))],
                         samples[-1])
