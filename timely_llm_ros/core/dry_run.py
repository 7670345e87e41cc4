"""One request planned to its end with nothing executed: each segment counts as run the moment it is ready (what the
server's dry_run goals do), for the tools that show what a model writes. ``dry_request`` makes the request of a goal
exactly as the server does (validated, grounded in its context, under the grammar when the model entry decodes
under one), so that what a tool shows is what a robot would be sent."""
from __future__ import annotations

import functools
import itertools
import time
from typing import Mapping

from timely_llm_ros.core.events import RequestFinished, SegmentReady
from timely_llm_ros.core.outcome import RequestOutcome
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.scheduler import PlanScheduler
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.core.urgency import load_urgency_classes
from timely_llm_ros.core.validation import GoalFields, validate_goal

_ids = itertools.count()


@functools.lru_cache(maxsize=1)
def _package_classes() -> Mapping[str, TimeUtility]:
    """The package's urgency classes (config/urgency_classes.yaml), read once per process."""
    return load_urgency_classes()


def dry_request(goal: GoalFields, robot_types: Mapping[str, object], grammar: bool) -> PlanRequest:
    """The server's request for ``goal`` (core/validation.py ``validate_goal``, the package's urgency classes):
    grounded in its context's objects, constrained when ``grammar`` (the model entry's ``grammar``) and the goal
    is not ``unconstrained``. RequestError, with the server's code and message, for a goal it would refuse."""
    return validate_goal(goal, f"dry-{next(_ids)}", time.monotonic(), robot_types, _package_classes(),
                         grammar=grammar)


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
