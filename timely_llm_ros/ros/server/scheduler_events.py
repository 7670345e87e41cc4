"""The scheduler's events as ROS: Plan feedback, ExecuteSegment goals to the robots (and their cancels), and each
goal's end. Runs on the scheduler thread (core/runtime.py SchedulerThread), for every event the scheduler produces.

Feedback: every state change the scheduler reports ("queued" once it holds the goal, then generating, suspended,
executing) and each new segment, with the progress the event carries.
"""
from __future__ import annotations

import time
from dataclasses import replace

from timely_llm_ros.action import Plan

from timely_llm_ros.core.capabilities import missing_skills, unknown_skill_error
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.request import PlanRequest, RequestState
from timely_llm_ros.core.scheduler import (PlanScheduler, RequestFinished, SegmentGenerated, SegmentReady, SegmentsWithdrawn,
                              StateChanged)
from timely_llm_ros.ros.server.goal_intake import GoalIntake
from timely_llm_ros.ros.server.plan_session import GoalSession, bare_outcome, plan_feedback

_FINAL = {RequestState.DONE, RequestState.CANCELLED, RequestState.DROPPED, RequestState.FAILED}


class SchedulerEvents:
    """Hands the scheduler's events to the goals' clients and the robots (``node``: PlanServerNode)."""

    def __init__(self, node, intake: GoalIntake) -> None:
        self._node = node
        self._intake = intake

    def submit(self, scheduler: PlanScheduler, req: PlanRequest, session: GoalSession) -> None:
        """Scheduler thread: a goal that passed intake enters the scheduler (unless it ended meanwhile)."""
        if not session.ended and session.goal_handle.is_cancel_requested:   # cancelled meanwhile
            session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        if session.ended:  # cancelled or shut down before it reached the scheduler
            return
        try:
            events = scheduler.submit(req)
        except RequestError as err:
            self._node.get_logger().warning(f"[{req.req_id}] not accepted: {err.code.name}: {err.message}")
            session.end(bare_outcome(session, err.code, err.message))
            return
        self.handle(events)

    def handle(self, events) -> None:
        node = self._node
        dispatcher = node.dispatcher
        for ev in events:
            session = self._intake.get(ev.req_id)
            if session is None:
                continue
            if isinstance(ev, SegmentReady):
                if session.ended or self._refuse_unknown_skills(session, ev):
                    continue
                if node.params.log_timing:
                    node.get_logger().info(f"segment timing {ev.req_id} {ev.segment.index} published "
                                           f"{time.monotonic():.6f}")
                if dispatcher is not None:
                    dispatcher.send(ev.req_id, session.agent_id, ev.segment, ev.preempts)
            elif isinstance(ev, SegmentGenerated):
                _publish(session, plan_feedback(ev.req_id, ev.progress, ev.segment))
            elif isinstance(ev, SegmentsWithdrawn):
                if dispatcher is not None:
                    dispatcher.withdraw(ev.req_id, ev.indices)
                    if ev.reason == ErrorCode.EXECUTOR_UNAVAILABLE:   # it did not answer: shake hands again
                        dispatcher.forget_handshake(session.agent_id)
            elif isinstance(ev, StateChanged) and ev.state not in _FINAL:
                _publish(session, plan_feedback(ev.req_id, ev.progress))
            elif isinstance(ev, RequestFinished):
                outcome = ev.outcome
                if node.stopping() and outcome.error_code in (ErrorCode.EXECUTION_FAILED,
                                                              ErrorCode.EXECUTOR_UNAVAILABLE):
                    # SIGINT reaches the robots' executors too (one process group): their segments end "executor
                    # shutting down" while the server itself is going down, which is SERVER_SHUTDOWN for the client
                    outcome = replace(outcome, error_code=ErrorCode.SERVER_SHUTDOWN,
                                      message=f"server shutting down ({outcome.message})")
                self._intake.count_finished(outcome.state)
                session.end(outcome)

    def _refuse_unknown_skills(self, session: GoalSession, ev: SegmentReady) -> bool:
        """End the request UNKNOWN_SKILL if the segment calls a skill its robot's executor lacks (by the executor's
        status; nothing is sent). True when it did."""
        directory, scheduler = self._node.directory, self._node.scheduler
        if session.dry_run or directory is None or scheduler is None:
            return False
        status = directory.status(session.agent_id)
        missing = missing_skills(ev.segment.skills, status)
        if not missing:
            return False
        err = unknown_skill_error(session.agent_id, ev.segment.index, missing, status)
        self.handle(scheduler.cancel(ev.req_id, err.code, err.message))
        return True


def _publish(session: GoalSession, feedback: Plan.Feedback) -> None:
    try:
        if session.goal_handle.is_active:
            session.goal_handle.publish_feedback(feedback)
    except Exception:  # the goal ended meanwhile; feedback is best effort
        pass
