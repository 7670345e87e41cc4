"""One request planned to its end with nothing executed: each segment counts as run the moment it is ready (what the
server's dry_run goals do), for the tools that show what a model writes."""
from __future__ import annotations

import time

from timely_llm_ros.core.events import RequestFinished, SegmentReady
from timely_llm_ros.core.outcome import RequestOutcome
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.scheduler import PlanScheduler


def plan_dry(scheduler: PlanScheduler, req: PlanRequest) -> RequestOutcome:
    """Submit ``req`` and step ``scheduler`` until it ends, each of its segments executed at once; its outcome."""
    events, outcome = scheduler.submit(req), None
    while outcome is None:
        for ev in events:
            if isinstance(ev, SegmentReady):
                now = time.monotonic()
                scheduler.on_execution_started(ev.req_id, ev.segment.index, now)
                events.extend(scheduler.on_execution_finished(ev.req_id, ev.segment.index, now))
            elif isinstance(ev, RequestFinished):
                outcome = ev.outcome
        events = scheduler.step() if outcome is None else []
    return outcome
