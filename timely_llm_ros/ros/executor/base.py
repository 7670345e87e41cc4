"""SkillExecutorNode: the ExecuteSegment action server a robot driver subclasses (see docs/executor.md).

A subclass registers one Python callable per skill (``@skill`` methods, ``register_skill`` or a skill-set
module); the base serves ``<namespace>/execute_segment`` and handles the rest:

- one plan at a time (core/execution/robot_queue.py): a second plan's segments wait until the first has nothing
  left here, plans in order of arrival; a plan's segments run strictly in index order (a missing predecessor is
  waited for: the server withdraws what will not run); a queued segment holds no thread;
- ``plan_rule`` urgent_preempts: a segment sent with ``preempts`` stops the running plan at once, through the same
  path as a cancel (the running skill sees ``ctx.cancelled``, ``ctx.sleep`` raises; ``halt()`` is called): its
  running and queued segments end PREEMPTED, so do its later ones, then its plan runs; under queue it waits;
- a robot type (parameter robot_type, a subclass's ROBOT_TYPE, or the one skill set of its skills_dir) is needed to
  start: the status says the executor interprets, and the server refuses goals for one that does not;
- plan semantics: a segment's text is parsed with the robot type's skill set and run by the interpreter (queries
  return values, variables live across the plan's segments, conditionals and loops are evaluated as they are
  reached); after a return the plan's later segments end NOT_RUN;
- verdicts at once, without queueing: UNKNOWN_SKILL (a skill the robot does not have, in any branch), FAILED (the
  text does not parse), BUSY (queue full and the segment belongs to no plan the robot already holds);
- progress feedback (skills_done, current_skill, time_remaining) at the start, after each skill and every
  ``feedback_period_s``;
- cancel: the running skill sees ``ctx.cancelled`` (``ctx.sleep`` raises), ``halt()`` is called, CANCELLED;
- FAILED when a skill raises; execution_time measured from the moment the segment starts running;
- a plan stops at a segment that did not succeed: its later segments waiting here end NOT_RUN at once; a plan the
  robot left for another ends NOT_RUN for its segments that come after; a segment whose plan's earlier segment never
  arrives ends NOT_RUN after ``predecessor_timeout_s``;
- status: ExecutorStatus on ``<namespace>/executor_status`` (robot type, skills, plan rule, idle/busy/stopping, the
  running plan and segment, segments waiting), latched with a liveliness lease, on every change (and every
  ``status_period_s`` when set; ros/executor_status.py): the server checks goals against it and notices a killed
  executor. A driver with its own main (not run_executor) calls ``publish_status()`` once its skills exist.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment

from timely_llm_ros.core.capabilities import RobotStatus
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, SegmentRun, Stopped, format_value
from timely_llm_ros.ros.action_client import deep_queues
from timely_llm_ros.ros.conversions import skill_from_msg, skill_to_msg
from timely_llm_ros.ros.executor_status import StatusPublisher
from timely_llm_ros.ros.executor.job import SegmentJob
from timely_llm_ros.ros.executor.parameters import declare_executor_params
from timely_llm_ros.ros.executor.plans import declared_returns, returns_conflicts, segment_program, skill_set_for
from timely_llm_ros.ros.executor.robot_plans import RobotPlans
from timely_llm_ros.ros.executor.skills import SkillCancelled, SkillContext, SkillFn, SkillRegistry, Estimate

R = ExecuteSegment.Result
F = ExecuteSegment.Feedback
# ExecuteSegment has no SHUTDOWN constant on this branch's interface: FAILED with a message that says so.
SHUTDOWN_MESSAGE = "executor shutting down"
NOT_RUN_SHUTDOWN = "not run: the executor shut down before its turn"


class _SkillError(Exception):
    """A skill raised: the message names it, its arguments and the exception."""


class SkillExecutorNode(Node):
    """Base ExecuteSegment server; subclass it and register skills."""

    ROBOT_TYPE = ""   # default of the robot_type parameter: a subclass names its skill set (an executor needs one)

    def __init__(self, node_name: str = "executor", skills: object | None = None, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        p = declare_executor_params(self, self.ROBOT_TYPE)
        self.robot_type, self.skills_dir, self.queue_size, self.plan_rule = (p.robot_type, p.skills_dir,
                                                                             p.queue_size, p.plan_rule)
        self.feedback_period_s, self.shutdown_grace_s, self.log_timing = (p.feedback_period_s, p.shutdown_grace_s,
                                                                          p.log_timing)
        self.predecessor_timeout_s = p.predecessor_timeout_s
        self.skill_set = skill_set_for(self.robot_type, self.skills_dir or None)
        self.robot_type = self.skill_set.name
        self.skills = SkillRegistry()
        self.skills.add_marked(self)
        if skills is not None:
            self.skills.add_marked(skills)
        self._cv = threading.Condition()
        self._plans = RobotPlans(self.plan_rule, self.queue_size, self.get_logger())
        self._jobs: dict[bytes, SegmentJob] = {}
        self._running: SegmentJob | None = None
        self._stopping = False
        self._group = ReentrantCallbackGroup()
        self._action = ActionServer(self, ExecuteSegment, "execute_segment", execute_callback=self._execute,
                                    goal_callback=self._on_goal,
                                    handle_accepted_callback=self._on_accepted,
                                    cancel_callback=self._on_cancel, callback_group=self._group,
                                    **deep_queues(100, server=True))
        self._timer = (self.create_timer(self.feedback_period_s, self._periodic_feedback, callback_group=self._group)
                       if self.feedback_period_s > 0 else None)
        # the timer runs only while a segment runs: an idle robot's timer would wake the executor for nothing
        self._pause_feedback()
        self._status = StatusPublisher(self, p.status_period_s, self._status_snapshot)
        self._worker = threading.Thread(target=self._dispatch_loop, name="segment-dispatch", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ for subclasses
    def register_skill(self, name: str, fn: SkillFn, estimate: Estimate | None = None,
                       returns: type | str | None = None) -> None:
        """Add (or replace) the callable for skill ``name``: ``fn(ctx, *args)``; ``returns`` marks a query."""
        self.skills.add(name, fn, estimate, returns)
        self._status_changed()

    def check_skills(self) -> None:
        """ValueError when a skill's ``returns`` disagrees with the skill set (run_executor calls it at start)."""
        conflicts = returns_conflicts(self.skill_set, self.skills.returns())
        if conflicts:
            raise ValueError("; ".join(conflicts))

    def on_segment_start(self, request_id: str, index: int, calls: list[SkillCall]) -> None:
        """Called when a segment starts running, before its first skill. Override (e.g. to arm the robot)."""

    def halt(self) -> None:
        """Bring the robot to a safe stop (a skill was cancelled, failed, or the node shuts down). Override."""

    def ready_message(self) -> str:
        return (f"executor ready: {self.get_namespace().rstrip('/')}/execute_segment robot_type="
                f"{self.robot_type} plan_rule={self.plan_rule} skills={','.join(self.skills.names())}")

    # ------------------------------------------------------------------ action callbacks
    def _timing(self, job: SegmentJob, event: str) -> None:
        if self.log_timing:
            self.get_logger().info(f"segment timing {job.request_id} {job.index} {event} {time.monotonic():.6f}")

    def _on_goal(self, goal: ExecuteSegment.Goal) -> GoalResponse:
        """Every goal is accepted; verdicts (UNKNOWN_SKILL, BUSY) come as its result, with a message."""
        if self.log_timing:
            self.get_logger().info(f"segment timing {goal.request_id} {goal.index} received {time.monotonic():.6f}")
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle) -> None:
        goal: ExecuteSegment.Goal = handle.request
        seg = segment_program(self.skill_set, goal.text, [skill_from_msg(s) for s in goal.skills])
        job = SegmentJob(handle, goal.request_id, int(goal.index), seg.program, seg.calls,
                         float(goal.expected_duration))
        unknown = sorted({c.name for c in job.calls if c.name not in self.skills})
        if unknown:
            job.verdict = R(success=False, error_code=R.UNKNOWN_SKILL,
                            error_message=f"this robot has no skill(s) {unknown}; it has {self.skills.names()}")
        elif seg.problem:
            job.verdict = R(success=False, error_code=R.FAILED,
                            error_message=f"segment {job.index} is no valid {self.robot_type} "
                                          f"{'plan text' if goal.text.strip() else 'skill list'}: {seg.problem}")
        with self._cv:
            self._jobs[bytes(handle.goal_id.uuid)] = job
            if job.verdict is None and self._stopping:
                job.verdict = R(success=False, error_code=R.NOT_RUN, error_message=NOT_RUN_SHUTDOWN)
            preempted = self._plans.admit(job, bool(goal.preempts)) if job.verdict is None else []
            # decided here: once the lock is released, the plan's running segment may end and give this queued
            # segment its NOT_RUN verdict and start it itself (an orphan); reading job.verdict later starts it twice
            refused = job.verdict is not None
            running = self._running
            interrupt = running is not None and bool(running.preempted_by) and running.ctx is not None
            self._cv.notify_all()
        if interrupt:               # the running skill is stopped now (its ctx.sleep raises), not at its end
            running.ctx.wake()
        self._status_changed()
        if refused:
            self._start(job)
        for other in preempted:     # the plan it preempted: its queued segments end PREEMPTED
            self._start(other)

    def _on_cancel(self, handle) -> CancelResponse:
        with self._cv:
            job = self._jobs.get(bytes(handle.goal_id.uuid))
            self._cv.notify_all()
        if job is not None and job.ctx is not None:
            job.ctx.wake()
        return CancelResponse.ACCEPT

    def _start(self, job: SegmentJob) -> None:
        """Hand the goal to the ROS executor to run _execute (any thread)."""
        try:
            job.handle.execute()
        except Exception:  # cancel arrived between the check and the EXECUTE transition: run it as cancelled
            self._action.notify_execute(job.handle, None)

    def _dispatch_loop(self) -> None:
        """Start the next segment in plan order when the robot is free; flush cancelled queued segments."""
        while True:
            start: list[SegmentJob] = []
            with self._cv:
                for w in list(self._plans.queue.waiting):
                    if self._stopping or w.item.handle.is_cancel_requested:
                        self._plans.queue.remove(w.item)
                        start.append(w.item)
                start += self._plans.give_up_waiting(self.predecessor_timeout_s)
                if self._running is None and not self._stopping:
                    job = self._plans.queue.next()
                    if job is not None:
                        self._running = job
                        start.append(job)
                if not start:
                    if self._stopping:
                        return
                    # poll only while segments wait (a cancel is visible just after its callback); an idle robot
                    # sleeps until a segment arrives or it shuts down
                    self._cv.wait(0.02 if len(self._plans.queue) else None)
                    continue
            self._status_changed()
            for job in start:
                self._start(job)

    def _execute(self, handle) -> ExecuteSegment.Result:
        with self._cv:
            job = self._jobs.get(bytes(handle.goal_id.uuid))
        result = None
        try:
            result = self._outcome(handle, job)
            return result
        finally:
            orphans: list[SegmentJob] = []
            with self._cv:
                self._jobs.pop(bytes(handle.goal_id.uuid), None)
                if job is not None:
                    self._timing(job, "ended")
                    orphans = self._plans.ended(job, result)
                    if self._running is job:
                        self._running = None
                        self._pause_feedback()
                self._cv.notify_all()
            self._status_changed()
            for orphan in orphans:
                self._start(orphan)

    def _outcome(self, handle, job: SegmentJob | None) -> ExecuteSegment.Result:
        if job is None:  # cannot happen: every accepted goal is registered first
            handle.abort()
            return R(success=False, error_code=R.FAILED, error_message="segment not registered")
        if job.verdict is not None:
            handle.abort()
            return job.verdict
        if handle.is_cancel_requested:
            handle.canceled()
            return R(success=False, error_code=R.CANCELLED, error_message="cancelled while queued")
        if self._stopping:      # it waited here and never started: NOT_RUN (the running one ends FAILED)
            handle.abort()
            return R(success=False, error_code=R.NOT_RUN, error_message=NOT_RUN_SHUTDOWN)
        return self._run(job)

    # ------------------------------------------------------------------ running a segment
    def _run(self, job: SegmentJob) -> ExecuteSegment.Result:
        handle = job.handle
        job.start(sum(self.skills.estimate(c.name, c.args) for c in job.calls))
        self._timing(job, "started")
        self._resume_feedback()
        stop = lambda: self._stopping or handle.is_cancel_requested or not handle.is_active  # noqa: E731
        # a more urgent plan took the robot: the running skill stops as for a cancel, and no further call starts
        interrupted = lambda: stop() or bool(job.preempted_by)  # noqa: E731
        self.get_logger().info(f"[{job.request_id}] segment {job.index}: "
                               f"{' '.join(f'{c.name}{list(c.args)}' for c in job.calls)}")
        self.on_segment_start(job.request_id, job.index, job.calls)
        with self._cv:
            state = self._plans.variables.state(job.request_id)
        interpreter = Interpreter(lambda call: self._call(job, call, interrupted),
                                  declared_returns(self.skill_set, self.skills.returns()), interrupted)
        run = SegmentRun(executed=job.executed)
        error = None
        stopped = False
        try:
            interpreter.run_segment(job.program, state, job.index, run)
        except Stopped:
            stopped = True
        except (PlanError, _SkillError) as exc:
            error = str(exc)
        if error is not None or stop():
            self._safe_halt()
            return self._end(job, error)
        if stopped:                     # a more urgent plan took the robot: its skill in progress was stopped
            self._safe_halt()
            return self._preempted(job)
        job.finish()
        self._feedback(job)
        handle.succeed()
        if run.returned:
            self.get_logger().info(f"[{job.request_id}] the plan returned {format_value(run.value)!r} at segment "
                                   f"{job.index}")
        return R(success=True, error_code=R.ERROR_NONE, execution_time=time.monotonic() - job.started,
                 executed_skills=[skill_to_msg(c) for c in job.executed], returned=run.returned,
                 return_value=format_value(run.value) if run.returned else "")

    def _call(self, job: SegmentJob, call: SkillCall, stop) -> Any:
        """Run one call of the segment (the interpreter's callback); its value goes back to the plan."""
        entry = self.skills.get(call.name)
        if entry is None:   # refused on arrival unless the skill was removed meanwhile
            raise PlanError(f"this robot has no skill {call.name!r}; it has {self.skills.names()}")
        job.begin_call(call, SkillContext(job.request_id, job.index, call.name, call.args, stop, self.get_logger(),
                                          on_progress=lambda s, j=job: setattr(j, "hint_s", s)))
        self._feedback(job)
        try:
            value = entry.fn(job.ctx, *call.args)
        except SkillCancelled:
            raise Stopped(f"{call.name} cancelled") from None
        except Exception as exc:  # the robot's skill failed: report it, do not crash the node
            raise _SkillError(f"skill {call.name}{list(call.args)} failed: {type(exc).__name__}: {exc}") from exc
        job.end_call(self.skills.estimate(call.name, call.args))
        if stop():
            raise Stopped(f"cancelled after {call.name}")
        return value

    def _end(self, job: SegmentJob, error: str | None) -> ExecuteSegment.Result:
        elapsed = time.monotonic() - job.started
        handle = job.handle
        executed = [skill_to_msg(c) for c in job.executed]
        if error is None and handle.is_cancel_requested:
            handle.canceled()
            return R(success=False, error_code=R.CANCELLED, error_message="cancelled", execution_time=elapsed,
                     executed_skills=executed)
        message = error or SHUTDOWN_MESSAGE
        self.get_logger().warning(f"[{job.request_id}] segment {job.index}: {message}")
        if handle.is_active:
            handle.abort()
        return R(success=False, error_code=R.FAILED, error_message=message, execution_time=elapsed,
                 executed_skills=executed)

    def _preempted(self, job: SegmentJob) -> ExecuteSegment.Result:
        stopped_in = f" (stopped in {job.current.name})" if job.current is not None else ""
        message = (f"preempted: plan {job.preempted_by} took the robot (plan_rule urgent_preempts); "
                   f"{len(job.executed)} skill call(s) started{stopped_in}")
        self.get_logger().info(f"[{job.request_id}] segment {job.index} {message}")
        if job.handle.is_active:
            job.handle.abort()
        return R(success=False, error_code=R.PREEMPTED, error_message=message,
                 execution_time=time.monotonic() - job.started, executed_skills=[skill_to_msg(c) for c in job.executed])

    def _safe_halt(self) -> None:
        try:
            self.halt()
        except Exception as exc:
            self.get_logger().error(f"halt() failed: {type(exc).__name__}: {exc}")

    def _feedback(self, job: SegmentJob) -> None:
        done, total, current, left = job.progress(lambda c: self.skills.estimate(c.name, c.args))
        try:
            job.handle.publish_feedback(F(skills_done=done, skills_total=total, current_skill=current,
                                          time_remaining=float(left)))
        except Exception:  # goal already finished or the context is going down
            pass

    def _pause_feedback(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _resume_feedback(self) -> None:
        if self._timer is not None:
            self._timer.reset()

    def _periodic_feedback(self) -> None:
        job = self._running
        if job is not None and job.started is not None and job.handle.is_active:
            self._feedback(job)

    # ------------------------------------------------------------------ shutdown
    def begin_shutdown(self) -> None:
        """Stop taking segments: the running one ends FAILED ('executor shutting down'), queued ones NOT_RUN."""
        with self._cv:
            self._stopping = True
            running = self._running
            self._cv.notify_all()
        self._status_changed()
        if running is not None and running.ctx is not None:
            running.ctx.wake()

    def idle(self) -> bool:
        """True when no accepted segment is still without its result."""
        with self._cv:
            return not self._jobs

    def shutdown(self) -> None:
        """Join the dispatch thread and free the ROS entities destroy_node() does not."""
        self.begin_shutdown()
        self._worker.join(5.0)
        if self._timer is not None:
            self.destroy_timer(self._timer)
        self._status.destroy()
        self._action.destroy()

    # ------------------------------------------------------------------ status (ExecutorStatus)
    def publish_status(self) -> None:
        """The executor is complete (skills registered): advertise it now (run_executor calls it at start)."""
        self._status.announce()

    def _status_changed(self) -> None:
        """Something the status shows may have changed: publish it if it did (after publish_status)."""
        status = getattr(self, "_status", None)   # register_skill runs before the publisher exists too
        if status is not None:
            status.update()

    def _status_snapshot(self) -> RobotStatus:
        """What the status says now (read without the lock: a status a moment stale is corrected by the next)."""
        running, stopping = self._running, self._stopping
        state = "stopping" if stopping else "busy" if running is not None else "idle"
        return RobotStatus(robot_type=self.robot_type, skills=frozenset(self.skills.names()), interprets=True,
                           plan_rule=self.plan_rule,
                           state=state, request_id=running.request_id if running is not None else "",
                           segment_index=running.index if running is not None else 0,
                           segments_waiting=len(self._plans.queue))
