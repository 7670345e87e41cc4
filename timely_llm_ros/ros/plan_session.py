"""One accepted Plan goal on the server: the session its execute callback waits on, and its feedback."""
from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass, field

from timely_llm_ros.action import Plan

from ..core.errors import ErrorCode
from ..core.request import PlanRequest, RequestState
from ..core.scheduler import PlanScheduler, RequestOutcome, measure_outcome
from ..core.tuf import TimeUtility
from .conversions import segment_to_msg


@dataclass
class GoalSession:
    """One accepted goal: what its execute callback waits on."""

    req_id: str
    agent_id: str
    dry_run: bool
    goal_handle: object
    done: threading.Event = field(default_factory=threading.Event)
    outcome: RequestOutcome | None = None
    submitted: bool = False
    segments_generated: int = 0
    state: str = ""                    # last state sent as feedback

    def end(self, outcome: RequestOutcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self.done.set()


def goal_request_id(goal_handle) -> str:
    """The server's request id: the first 12 hex digits of the action goal id."""
    return uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid)).hex[:12]


def bare_outcome(session: GoalSession, code: ErrorCode, message: str) -> RequestOutcome:
    """The outcome of a goal that never reached the scheduler (or whose scheduler is gone)."""
    state = RequestState.CANCELLED if code == ErrorCode.CANCELLED else RequestState.FAILED
    req = PlanRequest(req_id=session.req_id, agent_id=session.agent_id, robot_type="", task="",
                      tuf=TimeUtility(1.0, -1.0, 1.0), arrival=math.nan)
    return RequestOutcome(req=req, state=state, error_code=code, message=message, plan_text="", segments=[],
                          tokens=0, finished_at=time.monotonic())


def plan_feedback(scheduler: PlanScheduler, session: GoalSession, state: str, segment=None) -> Plan.Feedback:
    """Plan feedback for a state change or a new segment, with the plan's progress so far."""
    fb = Plan.Feedback(request_id=session.req_id, state=state, new_segment=segment is not None,
                       segments_generated=session.segments_generated)
    if segment is not None:
        fb.segment = segment_to_msg(segment)
    gen = scheduler.generation(session.req_id)
    if gen is not None:
        done = [s for s in gen.segments if s.exec_finished is not None]
        fb.segments_executed = len(done)
        if done:
            fb.utility_so_far = float(measure_outcome(gen, gen.state, ErrorCode.NONE, "", 0.0).total_utility)
        fb.estimated_time_remaining = float(sum(s.est_exec_s for s in gen.segments if s.exec_finished is None))
    return fb
