"""The Plan goals the server holds: intake (validation, the max_queued bound, the robot's executor), cancel, and
answering each goal once the scheduler (or a shutdown) has ended it.

An open goal holds no thread and no task: the intake runs in the action server's accept callback, which marks the
goal EXECUTING at once, so its action status is EXECUTING from acceptance to result, as ROS clients and
``ros2 action`` expect. Its execute callback is scheduled only when its outcome is known
(``ActionServer.notify_execute``, from whichever thread ended the goal: rclpy runs the callback on the node's
executor and wakes it), and only answers. rclpy's ``goal_handle.execute()`` would do both at once: a coroutine
callback waiting for the outcome holds no thread, but rclpy (Kilted) resumes every pending task at each wake-up of
its executor, which made a 200-goal burst's intake 2-4 times slower a goal. A goal refused at intake is answered at
once. At most ``max_queued`` goals are open at once; a goal beyond that ends at once with OVERLOADED (41).

Every goal is answered: an unexpected exception on its way in ends it with a code (GENERATION_FAILED, the message
names the exception) and frees what it held; so does one while its result is built (its outcome's code).
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import replace

from action_msgs.msg import GoalStatus
from rclpy.action import CancelResponse
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from timely_llm_ros.action import Plan

from timely_llm_ros.core.capabilities import check_robot_type
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.request import PlanRequest, RequestState
from timely_llm_ros.core.validation import validate_goal
from timely_llm_ros.ros.conversions import error_result, goal_fields, outcome_to_result
from timely_llm_ros.ros.server.plan_session import GoalSession, bare_outcome, goal_request_id
from timely_llm_ros.ros.server.robot_directory import twins_message
from timely_llm_ros.ros.server.runtime import ServerRuntime

SHUTDOWN_MESSAGE = "server shutting down (or cleaning up); send the goal again when it is active"


class GoalIntake:
    """The open goals of one server node (``node``: PlanServerNode, read for its lifecycle state, parameters and
    logger); what configure made comes in through ``attach``."""

    def __init__(self, node) -> None:
        self._node = node
        self._runtime: ServerRuntime | None = None
        self.sessions: dict[str, GoalSession] = {}
        self.lock = threading.Lock()
        self.counts = {"total": 0, "done": 0, "dropped": 0, "failed": 0, "overloaded": 0}
        self.received = 0   # goals that reached on_accepted, answered at once or not: read only for a change
        # set by end_all (under the lock, with its snapshot), cleared by attaching a runtime: no goal registers
        # while it is set, so end_all's snapshot holds every goal it has to end, even one that passed the active
        # check just before the server stopped
        self.closed = False

    def attach(self, runtime: ServerRuntime | None) -> None:
        """The configured server's runtime (None: unconfigured; goals then end NOT_ACTIVE or SERVER_SHUTDOWN)."""
        with self.lock:
            self._runtime = runtime
            self.closed = runtime is None

    def open_goals(self) -> int:
        return len(self.sessions)

    def get(self, req_id: str) -> GoalSession | None:
        return self.sessions.get(req_id)

    def count_finished(self, state: RequestState) -> None:
        with self.lock:
            self.counts[{RequestState.DONE: "done", RequestState.DROPPED: "dropped"}.get(state, "failed")] += 1

    def snapshot_counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)

    # ------------------------------------------------------------------ action callbacks
    def on_accepted(self, goal_handle) -> None:
        """The accept callback (executor thread): answer at once, or register the goal, start its execution (it is
        EXECUTING from now) and start its way in. An unexpected exception still answers it."""
        self.received += 1
        try:
            self._accept(goal_handle)
        except Exception as exc:   # a bug must not leave a goal unanswered
            self.fail(goal_request_id(goal_handle), goal_handle, ErrorCode.GENERATION_FAILED, "taking the goal in",
                      exc)

    def _accept(self, goal_handle) -> None:
        node, runtime = self._node, self._runtime
        arrival = time.monotonic()
        req_id = goal_request_id(goal_handle)
        goal: Plan.Goal = goal_handle.request
        if node.closing:
            return _answer_at_once(goal_handle, req_id, ErrorCode.SERVER_SHUTDOWN, SHUTDOWN_MESSAGE)
        if not node.active or runtime is None:
            return _answer_at_once(goal_handle, req_id, ErrorCode.NOT_ACTIVE, _not_active_message(node))
        try:
            req = validate_goal(goal_fields(goal), req_id, arrival, runtime.skill_sets, runtime.urgency_classes,
                                runtime.limits, grammar=runtime.grammar)
        except RequestError as err:
            node.get_logger().warning(f"[{req_id}] rejected goal from {goal.agent_id!r}: {err.code.name}: "
                                      f"{err.message}")
            return _answer_at_once(goal_handle, req_id, err.code, err.message)
        req.dry_run = bool(goal.dry_run)
        session = GoalSession(req_id, req.agent_id, req.dry_run, req.urgency, goal_handle,
                              answer=lambda: node.action_server.notify_execute(goal_handle, None))
        max_queued = node.params.max_queued
        with self.lock:
            closed = self.closed or self._runtime is not runtime   # the server stopped since the check above
            full = not closed and len(self.sessions) >= max_queued
            if full:
                self.counts["overloaded"] += 1
            elif not closed:
                self.sessions[req_id] = session
                self.counts["total"] += 1
        if closed:
            return _answer_at_once(goal_handle, req_id, ErrorCode.SERVER_SHUTDOWN, SHUTDOWN_MESSAGE)
        if full:
            return _answer_at_once(goal_handle, req_id, ErrorCode.OVERLOADED,
                                   f"the server already holds max_queued={max_queued} goals; retry later (or raise "
                                   "max_queued)")
        _mark_executing(goal_handle)    # its execute callback (answer) is scheduled once it has its outcome
        discovery = runtime.discovery
        if session.dry_run or discovery.known(req.agent_id):
            self._enter(session, req)
        else:
            node.get_logger().info(f"[{req_id}] waiting for /{req.agent_id}/execute_segment to answer (a first goal "
                                   "to a robot not in expected_agents, or its executor restarted)")
            if not discovery.find(req.agent_id, lambda: session.ended,
                                  lambda found: self._found(session, req, found)):
                self._enter(session, req)   # the discovery pool is gone (cleanup): _enter ends it SERVER_SHUTDOWN

    def on_cancel(self, goal_handle) -> CancelResponse:
        req_id = goal_request_id(goal_handle)
        session = self.sessions.get(req_id)
        if session is None:   # answered already
            return CancelResponse.ACCEPT
        runtime = self._runtime
        # held by the scheduler: cancelled there (its segments at the robot are withdrawn with it); else ended here
        post = (lambda: runtime.loop.post(lambda s: s.cancel(req_id))) if runtime is not None else None
        if not session.request_cancel(post):
            session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        return CancelResponse.ACCEPT

    def answer(self, goal_handle) -> Plan.Result:
        """The execute callback, run once the goal's session has its outcome: the result to its client (a result
        that cannot be built is answered with the outcome's code and what went wrong)."""
        node = self._node
        req_id = goal_request_id(goal_handle)
        with self.lock:
            session = self.sessions.pop(req_id, None)
        if session is None or session.outcome is None:   # cannot happen: the callback follows end()
            _end_goal(goal_handle, ok=False, cancelled=False)
            return error_result(req_id, ErrorCode.SERVER_SHUTDOWN, "the goal was not registered")
        outcome = session.outcome
        try:
            node.health.ended(session.urgency, outcome.state)
            self._log_outcome(session, outcome)
            result = outcome_to_result(req_id, outcome)
        except Exception as exc:    # a bug must not leave the client an empty result that reads as success
            node.get_logger().error(f"[{req_id}] the result could not be built: {type(exc).__name__}: {exc}\n"
                                    f"{traceback.format_exc()}")
            code = outcome.error_code if not outcome.ok else ErrorCode.GENERATION_FAILED
            result = error_result(req_id, code, f"{outcome.message + '; ' if outcome.message else ''}the server "
                                                f"could not build the result ({type(exc).__name__}: {exc}); it "
                                                "logged the traceback")
            outcome = replace(outcome, error_code=code)
        cancelled = outcome.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested
        _end_goal(goal_handle, ok=outcome.error_code == ErrorCode.NONE, cancelled=cancelled)
        return result

    def fail(self, req_id: str, goal_handle, code: ErrorCode, stage: str, exc: Exception) -> None:
        """An unexpected exception while ``stage``: the goal is answered with ``code`` and its session freed (the
        scheduler's state of it is the caller's to free)."""
        message = (f"internal error while {stage}: {type(exc).__name__}: {exc} (the server logged the traceback and "
                   "freed what the goal held; please report it)")
        self._node.get_logger().error(f"[{req_id}] {message}\n{traceback.format_exc()}")
        session = self.sessions.get(req_id)
        if session is not None:
            if not session.ended:
                self.count_finished(RequestState.FAILED)
            session.end(bare_outcome(session, code, message))
        elif goal_handle is not None:
            _answer_at_once(goal_handle, req_id, code, message)

    # ------------------------------------------------------------------ the way in
    def _found(self, session: GoalSession, req: PlanRequest, found: bool) -> None:
        """Discovery pool thread: the agent's executor was looked for (and its status waited for)."""
        try:
            self._found_or_not(session, req, found)
        except Exception as exc:   # a bug must not leave the goal unanswered
            self.fail(session.req_id, None, ErrorCode.GENERATION_FAILED, "taking the goal in", exc)

    def _found_or_not(self, session: GoalSession, req: PlanRequest, found: bool) -> None:
        node = self._node
        if session.ended:
            return
        if not found:
            msg = (f"no executor at /{req.agent_id}/execute_segment (waited {time.monotonic() - req.arrival:.1f} s; "
                   f"executor_discovery_timeout_s is {node.params.executor_discovery_timeout_s:.1f}); start the "
                   "robot's executor node or set dry_run")
            node.get_logger().warning(f"[{session.req_id}] {msg}")
            session.end(bare_outcome(session, ErrorCode.EXECUTOR_UNAVAILABLE, msg))
            return
        self._enter(session, req)

    def _enter(self, session: GoalSession, req: PlanRequest) -> None:
        """Check the robot's type against its executor's status, then hand the request to the scheduler thread (its
        plan may call only the skills the executor advertises; the skill set's own when it has not reported)."""
        node, runtime = self._node, self._runtime
        if not session.dry_run and runtime is not None:
            # WRONG_ROBOT_TYPE before anything is generated, when the agent's executor serves another robot type
            status = runtime.directory.status(req.agent_id)
            try:
                check_robot_type(req.agent_id, req.robot_type, status)
            except RequestError as err:
                node.get_logger().warning(f"[{session.req_id}] {err.code.name}: {err.message}")
                session.end(bare_outcome(session, err.code, err.message))
                return
            if status is not None and status.skills:
                req.skills = tuple(sorted(status.skills))
            # two live executors under one name would each run every segment (and rclpy's events executor, host of
            # the robots' clients, has crashed on their duplicate answers): refused before anything is generated
            twins = runtime.directory.live_executors(req.agent_id)
            if twins > 1:
                msg = twins_message(req.agent_id, twins)
                node.get_logger().error(f"[{session.req_id}] {msg}")
                session.end(bare_outcome(session, ErrorCode.EXECUTOR_UNAVAILABLE, msg))
                return
        if session.ended:
            return
        if runtime is None:
            session.end(bare_outcome(session, ErrorCode.SERVER_SHUTDOWN, "server shutting down"))
            return
        if not session.hand_over(lambda: runtime.loop.post(lambda s: node.events.submit(s, req, session))):
            return      # its client cancelled it meanwhile: on_cancel ends it
        runtime.loop.announce(req)      # an engine step in flight may end early for it (policy parameter interrupt)
        tuf = req.urgency or f"ert {req.tuf.ert:g} s, alpha {req.tuf.alpha:g}, beta {req.tuf.beta:g}"
        node.get_logger().info(f"[{session.req_id}] {req.agent_id} ({req.robot_type}, "
                               f"{tuf}{'' if req.constrained else ', unconstrained'}): {req.task!r}")

    def _log_outcome(self, session: GoalSession, outcome) -> None:
        log = self._node.get_logger()
        # a goal that said `unconstrained` on a server that applies the grammar is reported apart
        runtime = self._runtime
        free = (" (unconstrained: decoded without its grammar)" if runtime is not None and runtime.grammar
                and outcome.req.robot_type and not outcome.req.constrained else "")
        if outcome.ok:
            log.info(f"[{session.req_id}] {session.agent_id} done{free}: {len(outcome.segments)} segments, "
                     f"response {outcome.response_time:.2f} s, waiting {outcome.waiting_time:.2f} s, "
                     f"utility {outcome.utility:.2f} (segments {outcome.total_utility:.2f})")
        else:
            log.warning(f"[{session.req_id}] {session.agent_id} ended {outcome.state.value}{free}: "
                        f"{outcome.error_code.name}: {outcome.message}")

    # ------------------------------------------------------------------ shutdown
    def end_all(self, loop, timeout_s: float) -> None:
        """End every open goal with SERVER_SHUTDOWN: through the scheduler thread when it holds the request (its
        engine state and executor goals are released, and its RequestFinished ends the session), else at once.
        Their answers go out when the executor next runs their execute callbacks. From now until a runtime is
        attached again no goal registers: one that passed the active check is answered SERVER_SHUTDOWN at once."""
        with self.lock:
            self.closed = True
            sessions = list(self.sessions.values())
        submitted = [s.req_id for s in sessions if s.submitted and not s.ended]
        if submitted and loop is not None:
            def cancel_all(scheduler) -> None:
                for req_id in submitted:
                    self._node.events.handle(scheduler.cancel(req_id, ErrorCode.SERVER_SHUTDOWN, SHUTDOWN_MESSAGE))
            try:
                loop.call(cancel_all).result(timeout_s)
            except Exception:   # the scheduler thread did not answer in time (or is gone): end them here
                pass
        for s in sessions:
            if not s.ended:
                s.end(bare_outcome(s, ErrorCode.SERVER_SHUTDOWN, SHUTDOWN_MESSAGE))

    def wait_answered(self, timeout_s: float) -> None:
        """Wait (off the executor's thread) until every goal has been answered."""
        deadline = time.monotonic() + timeout_s
        while self.sessions and time.monotonic() < deadline:
            time.sleep(0.02)


def _not_active_message(node) -> str:
    """Why a goal is refused by a server that is not active, and the transitions that would make it active."""
    state, name = node.lifecycle_state(), node.get_fully_qualified_name()
    if state == "unconfigured":
        todo = f"configure it, then activate it (ros2 lifecycle set {name} configure, then activate)"
    elif state == "inactive":
        todo = f"activate it (ros2 lifecycle set {name} activate)"
    elif state == "finalized":
        return f"the plan server {name} is finalized (shut down through its lifecycle): start it again"
    else:   # a transition is running (configuring, activating, ...)
        todo = "wait until it is active"
    return f"the plan server is {state}, not active; {todo}, or wait for autostart if it is set"


def _answer_at_once(goal_handle, req_id: str, code: ErrorCode, message: str) -> None:
    """A goal refused before it was registered: its execute callback aborts it with this error."""
    def refuse(handle) -> Plan.Result:
        _end_goal(handle, ok=False, cancelled=False)
        return error_result(req_id, code, message)
    goal_handle.execute(refuse)


def _mark_executing(goal_handle) -> None:
    """The goal is EXECUTING from now, its execute callback not scheduled yet. rclpy has no public call for this
    (``execute()`` also schedules the callback: see the module docstring); this is the first half of it."""
    goal_handle._update_state(_rclpy.GoalEvent.EXECUTE)


def _end_goal(goal_handle, ok: bool, cancelled: bool) -> None:
    """The goal's terminal state (a goal already terminal stays as it is)."""
    try:
        if goal_handle.status == GoalStatus.STATUS_ACCEPTED and not cancelled:   # ended before it was marked
            _mark_executing(goal_handle)
        if cancelled:
            goal_handle.canceled()
        elif ok:
            goal_handle.succeed()
        else:
            goal_handle.abort()
    except Exception:   # no transition from its state (e.g. canceling and not cancelled): rclpy aborts it
        pass
