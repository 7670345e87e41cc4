"""One accepted Plan goal on the server: its outcome once known, and its feedback messages."""
from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from timely_llm_ros.action import Plan

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.outcome import Progress, RequestOutcome
from timely_llm_ros.core.request import PlanRequest, RequestState, Segment
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.ros.conversions import segment_to_msg


@dataclass
class GoalSession:
    """One accepted goal: what its execute callback needs to answer its client (the request's own state is the
    scheduler's, which reports it in its events). ``end`` may be called from any thread (the scheduler thread, the
    executor's, the discovery pool, a shutdown): it hands the goal to ``answer``, which schedules its execute callback
    on the node's executor (and wakes it)."""

    req_id: str
    agent_id: str
    dry_run: bool
    urgency: str
    goal_handle: object
    answer: Callable[[], None] = lambda: None
    outcome: RequestOutcome | None = None
    submitted: bool = False             # handed to the scheduler thread (hand_over)
    cancel_requested: bool = False      # its client asked to cancel it (request_cancel)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    def hand_over(self, post: Callable[[], None]) -> bool:
        """Post the goal to the scheduler thread unless it ended or its client asked to cancel it. Decided under
        the lock that request_cancel takes too: a cancel either comes first (nothing is posted) or is posted after
        this, so the scheduler never sees the cancel before the goal, nor holds a goal its client cancelled."""
        with self._lock:
            if self.outcome is not None or self.cancel_requested:
                return False
            self.submitted = True
            post()
            return True

    def request_cancel(self, post_cancel: Callable[[], None] | None) -> bool:
        """The client asked to cancel. True: the scheduler holds the goal and ``post_cancel`` was posted (after the
        goal's hand-over); False: it never reached the scheduler (or there is none), and the caller ends it."""
        with self._lock:
            self.cancel_requested = True
            if self.submitted and post_cancel is not None:
                post_cancel()
                return True
            return False

    def end(self, outcome: RequestOutcome) -> None:
        """The goal's outcome (the first one given counts)."""
        with self._lock:
            if self.outcome is not None:
                return
            self.outcome = outcome
        self.answer()


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


def plan_feedback(req_id: str, progress: Progress, segment: Segment | None = None) -> Plan.Feedback:
    """Plan feedback for a state change or a new segment, from the progress the scheduler's event carries."""
    fb = Plan.Feedback(request_id=req_id, state=progress.state.value, new_segment=segment is not None,
                       segments_generated=progress.segments_generated, segments_executed=progress.segments_executed,
                       utility_so_far=progress.utility_so_far,
                       estimated_time_remaining=progress.estimated_time_remaining)
    if segment is not None:
        fb.segment = segment_to_msg(segment)
    return fb
