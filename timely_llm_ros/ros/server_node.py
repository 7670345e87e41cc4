"""timely_server: the Plan action server hosting the LLM engine and the segmented scheduler.

ROS plumbing only: goals are validated into core PlanRequests, handed to the scheduler thread,
and the scheduler's events come back as Plan feedback, ExecuteSegment goals to the robots, and
Plan results. Scheduling logic lives in timely_llm_ros.core.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import rclpy
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile

from diagnostic_msgs.msg import DiagnosticArray

from timely_llm_ros.action import Plan
from timely_llm_ros.msg import SchedulerState

from ..core.errors import ErrorCode, RequestError
from ..core.policies import make_policy
from ..core.request import RequestState
from ..core.runtime import SchedulerThread
from ..core.scheduler import (PlanScheduler, RequestFinished, SchedulerConfig, SegmentReady, StateChanged,
                              measure_outcome)
from ..core.validation import GoalLimits, validate_goal
from .conversions import error_result, goal_fields, outcome_to_result, segment_to_msg
from .parameters import ServerParams, declare_server_params
from .segment_dispatcher import SegmentDispatcher
from .spin import spin_node
from .state_message import diagnostics_msg, scheduler_state_msg

_FINAL = {RequestState.DONE, RequestState.CANCELLED, RequestState.DROPPED, RequestState.FAILED}


@dataclass
class _GoalSession:
    """What the goal's execute callback waits on."""

    req_id: str
    agent_id: str
    dry_run: bool
    items: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    segments_generated: int = 0
    segments_executed: int = 0


class PlanServerNode(Node):
    """Serves /plan (timely_llm_ros/action/Plan) for many robots with one engine."""

    def __init__(self, **kwargs) -> None:
        super().__init__("timely_server", **kwargs)
        self.params: ServerParams = declare_server_params(self)
        p = self.params
        log = self.get_logger()
        log.info(f"loading engine={p.engine} model={p.model_path or '(embedded default)'} device={p.device}")
        t0 = time.monotonic()
        from ..engine.factory import make_engine  # torch is imported only here
        engine = make_engine(p.engine, p.model_path or None, device=p.device, dtype=p.dtype,
                             kv_budget_mb=p.kv_budget_mb if p.kv_budget_mb > 0 else None,
                             num_threads=p.num_threads or None)
        from ..core.exec_time import load_exec_models
        from ..core.skills import load_skill_sets
        from ..core.urgency import load_urgency_classes
        self.skill_sets = load_skill_sets()
        warm_up(engine, next(iter(self.skill_sets.values())).build_prompt("warm up", ""))
        self.urgency_classes = load_urgency_classes(p.urgency_classes_file or None)
        policy = make_policy(p.policy, max_batch=p.max_batch, options=self.policy_options())
        from ..engine.evicting import with_policy_eviction
        engine = with_policy_eviction(engine, policy)   # TimeBill: real prompt-KV eviction in the engine
        self.scheduler = PlanScheduler(engine, policy, self.skill_sets, load_exec_models(), time.monotonic,
                                       SchedulerConfig(network_delay_s=p.network_delay_s,
                                                       max_prompt_tokens=p.max_prompt_tokens,
                                                       replan_on_failure=p.replan_on_failure))
        self.limits = GoalLimits(max_task_chars=p.max_task_chars, max_context_chars=p.max_context_chars,
                                 max_new_tokens=p.max_new_tokens)
        self._sessions: dict[str, _GoalSession] = {}
        self._sessions_lock = threading.Lock()
        self._group = ReentrantCallbackGroup()
        self.loop = SchedulerThread(self.scheduler, self._on_events, on_idle=self._on_idle)
        self.dispatcher = SegmentDispatcher(self, self.loop.post, p.executor_timeout_s)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._state_pub = self.create_publisher(SchedulerState, "~/state", latched)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._last_state = 0.0
        self._counts = {"total": 0, "done": 0, "dropped": 0, "failed": 0}
        self._undiscovered = list(p.expected_agents)
        for agent in self._undiscovered:  # start discovering their executors now, not on the first goal
            self.dispatcher.client(agent)
        if self._undiscovered:
            self._discovery_timer = self.create_timer(0.2, self._report_discovery, callback_group=self._group)
        self._action = ActionServer(self, Plan, "plan", execute_callback=self._execute,
                                    goal_callback=self._on_goal, cancel_callback=self._on_cancel,
                                    callback_group=self._group)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.loop.start()
        log.info(f"timely_server ready: action /plan, policy={p.policy} max_batch={p.max_batch} "
                 f"robot types={sorted(self.skill_sets)} urgency classes={sorted(self.urgency_classes)} "
                 f"(engine loaded in {time.monotonic() - t0:.1f} s)")

    def policy_options(self) -> dict:
        """Options every policy gets (those a policy does not use are ignored): segment sizes from the skill
        sets, the network delay, and G measured online on this engine instead of a profile made elsewhere."""
        from ..core.policies.timely import options_from_skill_sets
        return {**options_from_skill_sets(self.skill_sets), "network_delay_s": self.params.network_delay_s,
                "online_gen_time": True}

    def _report_discovery(self) -> None:
        """Log each expected robot's executor once it is discoverable."""
        for agent in list(self._undiscovered):
            if self.dispatcher.client(agent).server_is_ready():
                self._undiscovered.remove(agent)
                self.get_logger().info(f"executor discovered: {agent}/execute_segment")
        if not self._undiscovered:
            self._discovery_timer.cancel()
            self.get_logger().info("all expected executors discovered")

    # ------------------------------------------------------------------ action callbacks
    def _on_goal(self, goal: Plan.Goal) -> GoalResponse:
        # Every well-formed message is accepted; bad fields end in an aborted goal carrying an
        # error code (a rejected goal would give the client no reason).
        return GoalResponse.ACCEPT

    def _on_cancel(self, goal_handle) -> CancelResponse:
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle) -> Plan.Result:
        arrival = time.monotonic()
        req_id = uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid)).hex[:12]
        goal: Plan.Goal = goal_handle.request
        log = self.get_logger()
        try:
            req = validate_goal(goal_fields(goal), req_id, arrival, self.skill_sets, self.urgency_classes, self.limits)
        except RequestError as err:
            log.warning(f"[{req_id}] rejected goal from {goal.agent_id!r}: {err.code.name}: {err.message}")
            goal_handle.abort()
            return error_result(req_id, err.code, err.message)
        if not goal.dry_run and not self.dispatcher.wait_for(req.agent_id, self.params.executor_discovery_timeout_s):
            msg = (f"no executor at /{req.agent_id}/execute_segment (waited "
                   f"{self.params.executor_discovery_timeout_s:.1f} s); start the robot's executor node or set dry_run")
            log.warning(f"[{req_id}] {msg}")
            goal_handle.abort()
            return error_result(req_id, ErrorCode.EXECUTOR_UNAVAILABLE, msg)
        session = _GoalSession(req_id, req.agent_id, bool(goal.dry_run))
        with self._sessions_lock:
            self._sessions[req_id] = session
            self._counts["total"] += 1
        try:
            self.loop.call(lambda s: self._submit(s, req)).result(timeout=30.0)
        except RequestError as err:
            self._drop_session(req_id)
            log.warning(f"[{req_id}] not accepted: {err.code.name}: {err.message}")
            goal_handle.abort()
            return error_result(req_id, err.code, err.message)
        log.info(f"[{req_id}] {req.agent_id} ({req.robot_type}, {req.urgency or 'custom TUF'}): {req.task!r}")
        return self._serve(goal_handle, session)

    def _serve(self, goal_handle, session: _GoalSession) -> Plan.Result:
        """Forward feedback until the request finishes; honour cancel requests."""
        cancel_sent = False
        while True:
            if goal_handle.is_cancel_requested and not cancel_sent:
                cancel_sent = True
                self.dispatcher.cancel_request(session.req_id)
                self.loop.post(lambda s: s.cancel(session.req_id))
            try:
                kind, payload = session.items.get(timeout=0.05)
            except queue.Empty:
                if not rclpy.ok():
                    return error_result(session.req_id, ErrorCode.SERVER_SHUTDOWN, "server shutting down")
                continue
            if kind == "feedback":
                goal_handle.publish_feedback(payload)
                continue
            outcome = payload
            self._drop_session(session.req_id)
            result = outcome_to_result(session.req_id, outcome)
            self._log_outcome(session, outcome)
            if outcome.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
                goal_handle.canceled()
            elif outcome.ok:
                goal_handle.succeed()
            else:
                goal_handle.abort()
            return result

    # ------------------------------------------------------------------ scheduler thread side
    def _submit(self, scheduler: PlanScheduler, req) -> None:
        self._on_events(scheduler.submit(req))

    def _on_events(self, events) -> None:
        """Runs on the scheduler thread for every event the scheduler produces."""
        for ev in events:
            session = self._sessions.get(ev.req_id)
            if session is None:
                continue
            if isinstance(ev, SegmentReady):
                session.segments_generated += 1
                session.items.put(("feedback", self._feedback(session, RequestState.EXECUTING.value, ev.segment)))
                if session.dry_run:
                    now = time.monotonic()
                    self.scheduler.on_execution_started(ev.req_id, ev.segment.index, now)
                    self._on_events(self.scheduler.on_execution_finished(ev.req_id, ev.segment.index, now))
                else:
                    self.dispatcher.send(ev.req_id, session.agent_id, ev.segment)
            elif isinstance(ev, StateChanged) and ev.state not in _FINAL:
                session.items.put(("feedback", self._feedback(session, ev.state.value)))
            elif isinstance(ev, RequestFinished):
                self.dispatcher.cancel_request(ev.req_id)
                with self._sessions_lock:
                    key = {RequestState.DONE: "done", RequestState.DROPPED: "dropped"}.get(ev.outcome.state, "failed")
                    self._counts[key] += 1
                session.items.put(("result", ev.outcome))

    def _feedback(self, session: _GoalSession, state: str, segment=None) -> Plan.Feedback:
        fb = Plan.Feedback(request_id=session.req_id, state=state, new_segment=segment is not None,
                           segments_generated=session.segments_generated)
        if segment is not None:
            fb.segment = segment_to_msg(segment)
        gen = next((g for g in self.scheduler.generations() if g.req_id == session.req_id), None)
        if gen is not None:
            done = [s for s in gen.segments if s.exec_finished is not None]
            fb.segments_executed = len(done)
            if done:
                fb.utility_so_far = float(measure_outcome(gen, gen.state, ErrorCode.NONE, "", 0.0).total_utility)
            remaining = sum(s.est_exec_s for s in gen.segments if s.exec_finished is None)
            fb.estimated_time_remaining = float(remaining)
        return fb

    def _on_idle(self) -> None:
        """Each scheduler-loop iteration: executor timeouts, and the latched state topic."""
        self.dispatcher.check_timeouts()
        now = time.monotonic()
        if now - self._last_state >= self.params.state_period_s:
            self._last_state = now
            with self._sessions_lock:
                counts = dict(self._counts)
            state = scheduler_state_msg(self, self.scheduler, counts)
            self._state_pub.publish(state)
            self._diag_pub.publish(diagnostics_msg(self, state, self.scheduler.policy.max_batch))

    # ------------------------------------------------------------------ misc
    def _drop_session(self, req_id: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(req_id, None)

    def _log_outcome(self, session: _GoalSession, outcome) -> None:
        log = self.get_logger()
        if outcome.ok:
            log.info(f"[{session.req_id}] {session.agent_id} done: {len(outcome.segments)} segments, "
                     f"response {outcome.response_time:.2f} s, waiting {outcome.waiting_time:.2f} s, "
                     f"utility {outcome.utility:.2f} (segments {outcome.total_utility:.2f})")
        else:
            log.warning(f"[{session.req_id}] {session.agent_id} ended {outcome.state.value}: "
                     f"{outcome.error_code.name}: {outcome.message}")

    def _on_set_parameters(self, params):
        from .parameters import check_runtime_update
        return check_runtime_update(self, params)

    def shutdown(self) -> None:
        """Stop the scheduler thread, end open goals, free ROS entities (destroy_node does not)."""
        self.loop.stop()
        with self._sessions_lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            outcome = self.scheduler.outcomes.get(session.req_id)
            if outcome is None:
                gen = next((g for g in self.scheduler.generations() if g.req_id == session.req_id), None)
                if gen is not None:
                    outcome = measure_outcome(gen, RequestState.FAILED, ErrorCode.SERVER_SHUTDOWN,
                                              "server shutting down", time.monotonic())
            if outcome is not None:
                session.items.put(("result", outcome))
        self.dispatcher.destroy()
        self._action.destroy()
        self.scheduler.engine.close()


def warm_up(engine, prompt: str, tokens: int = 4) -> None:
    """Run one short generation so the first robot's request does not pay one-time start-up costs."""
    engine.add("__warm_up__", engine.encode(prompt), tokens)
    try:
        for _ in range(tokens):
            if engine.step(["__warm_up__"]).finished:
                break
    finally:
        engine.release("__warm_up__")


def main(args: list[str] | None = None) -> int:
    # every Plan goal being served holds an executor thread
    return spin_node(PlanServerNode, lambda node: node.params.max_concurrent_goals + 8, args)

if __name__ == "__main__":
    sys.exit(main())
