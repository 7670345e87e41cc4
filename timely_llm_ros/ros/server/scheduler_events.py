"""The scheduler's events as ROS: Plan feedback, ExecuteSegment goals to the robots (and their cancels), and each
goal's end. Runs on the scheduler thread (core/runtime.py SchedulerThread), for every event the scheduler produces.

Feedback: every state change the scheduler reports ("queued" once it holds the goal, then generating, suspended,
executing) and each new segment, with the progress the event carries.

Every goal is answered: an unexpected exception while a request enters the scheduler ends its goal
GENERATION_FAILED, one while its segment is sent ends it EXECUTOR_UNAVAILABLE, one while its end is handed over ends
it with its outcome's code; the scheduler's state of it (its plan on the robot, its engine state) is freed with it.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import replace

from timely_llm_ros.action import Plan

from timely_llm_ros.core.capabilities import missing_skills, unknown_skill_error
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.request import PlanRequest, RequestState
from timely_llm_ros.core.scheduler import (PlanScheduler, RequestFinished, SegmentGenerated, SegmentReady, SegmentsWithdrawn,
                              StateChanged)
from timely_llm_ros.ros.server.goal_intake import GoalIntake
from timely_llm_ros.ros.server.plan_session import GoalSession, bare_outcome, plan_feedback
from timely_llm_ros.ros.server.runtime import ServerRuntime

_FINAL = {RequestState.DONE, RequestState.CANCELLED, RequestState.DROPPED, RequestState.FAILED}


class SchedulerEvents:
    """Hands the scheduler's events to the goals' clients and the robots (``node``: PlanServerNode, read for its
    parameters, logger and whether it is stopping); the robots' side comes with the runtime (``attach``)."""

    def __init__(self, node, intake: GoalIntake) -> None:
        self._node = node
        self._intake = intake
        self._runtime: ServerRuntime | None = None

    def attach(self, runtime: ServerRuntime | None) -> None:
        """The configured server's runtime (None: unconfigured; goals still end, nothing goes to a robot)."""
        self._runtime = runtime

    def submit(self, scheduler: PlanScheduler, req: PlanRequest, session: GoalSession) -> None:
        """Scheduler thread: a goal that passed intake enters the scheduler (unless it ended meanwhile)."""
        if not session.ended and (session.cancel_requested or session.goal_handle.is_cancel_requested):
            session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        if session.ended:  # cancelled or shut down before it reached the scheduler
            return
        try:
            events = scheduler.submit(req)
        except RequestError as err:
            self._node.get_logger().warning(f"[{req.req_id}] not accepted: {err.code.name}: {err.message}")
            session.end(bare_outcome(session, err.code, err.message))
            return
        except Exception as exc:   # a bug: the scheduler drops what it may hold of the request; the goal is answered
            self._fail(scheduler, req.req_id, ErrorCode.GENERATION_FAILED, "the request entered the scheduler", exc)
            return
        self.handle(events)

    def handle(self, events) -> None:
        """Hand each event over; one that fails ends its request's goal (see the module docstring)."""
        for ev in events:
            try:
                self._handle(ev)
            except Exception as exc:
                code, stage = ErrorCode.GENERATION_FAILED, "its events were handed over"
                if isinstance(ev, SegmentReady):
                    code, stage = ErrorCode.EXECUTOR_UNAVAILABLE, f"its segment {ev.segment.index} was sent"
                elif isinstance(ev, RequestFinished):
                    code = ev.outcome.error_code if not ev.outcome.ok else ErrorCode.GENERATION_FAILED
                    stage = "its end was handed over"
                runtime = self._runtime
                self._fail(runtime.scheduler if runtime is not None else None, ev.req_id, code, stage, exc)

    def _fail(self, scheduler: PlanScheduler | None, req_id: str, code: ErrorCode, stage: str,
              exc: Exception) -> None:
        """End the request in the scheduler (its robot and engine state freed) and answer its goal with ``code``."""
        self._intake.fail(req_id, None, code, stage, exc)
        if scheduler is None:
            return
        try:
            events = scheduler.cancel(req_id, code, f"internal error while {stage}")
        except Exception:
            self._node.get_logger().error(f"[{req_id}] the scheduler could not drop it:\n{traceback.format_exc()}")
            return
        for ev in events:           # the withdrawals and the next plans' segments; this request's own end is over
            if ev.req_id != req_id:
                self.handle([ev])
            elif isinstance(ev, SegmentsWithdrawn):
                try:
                    self._handle(ev)
                except Exception:
                    self._node.get_logger().error(f"[{req_id}] withdrawing its segments failed:\n"
                                                  f"{traceback.format_exc()}")

    def _handle(self, ev) -> None:
        node, runtime = self._node, self._runtime
        dispatcher = runtime.dispatcher if runtime is not None else None
        session = self._intake.get(ev.req_id)
        if session is None:
            return
        if isinstance(ev, SegmentReady):
            if session.ended or self._refuse_unknown_skills(session, ev):
                return
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
        runtime = self._runtime
        if session.dry_run or runtime is None:
            return False
        scheduler = runtime.scheduler
        status = runtime.directory.status(session.agent_id)
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
