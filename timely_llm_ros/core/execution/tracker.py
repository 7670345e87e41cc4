"""ExecutionTracker: the planner's one record of every robot's execution (ROS-free; the scheduler owns one).

Per robot (agent): its plan rule (``queue`` | ``urgent_preempts``), the current plan and the plans waiting for it.
Only the current plan's segments go to the robot; the others' generated segments are held. When the current plan
ends, the next waiting plan becomes current and its held segments are sent: in arrival order under ``queue``, the
most urgent first under ``urgent_preempts`` (a strictly shorter ERT; ties in arrival order). Under
``urgent_preempts`` a waiting plan more urgent than the current one takes the robot as soon as its first segment is
ready: its segments go out with ``preempts``, the robot stops the other plan, its skill in progress interrupted (its segments there
end PREEMPTED) and that plan stops (PlanPreempted); a current plan that has sent the robot nothing yet just waits
again instead.

Per segment: held / sent / accepted / running / finished / failed / not run / preempted / withdrawn (plan.py), with
its deadlines on the scheduler's clock: the robot must accept or reject a sent segment within ``ack_timeout_s``
(else EXECUTOR_UNAVAILABLE) and finish a started one within its worst-case time + ``exec_timeout_s`` (else
EXECUTOR_TIMEOUT). A segment starts for real at the robot's first feedback, provisionally when the segment before it
on the robot ends (or when the robot accepts it with nothing ahead of it). A failed segment makes the later segments
of its plan NOT_RUN (withdrawn at the robot).

The policies read each plan's E and earliest start from its view (the Generation): a plan that is not current
cannot start before the plans ahead of it on the robot are expected to end.
"""
from __future__ import annotations

import heapq
import itertools
import math
from typing import Callable, Iterable, Union

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.events import SegmentReady, SegmentsWithdrawn
from timely_llm_ros.core.request import Segment
from timely_llm_ros.core.execution.plan import (OUT, PlanExecution, PlanPreempted, PlanView, Robot, SegmentExpired, SegmentStatus,
                   TrackedSegment)
from timely_llm_ros.core.execution.robot_queue import PLAN_RULES

Clock = Callable[[], float]
Out = Union[SegmentReady, SegmentsWithdrawn, PlanPreempted]


class ExecutionTracker:
    """Every robot's plans and segments (see the module docstring). Single-threaded, like the scheduler."""

    def __init__(self, clock: Clock, network_delay_s: float = 0.0, ack_timeout_s: float | None = None,
                 exec_timeout_s: float | None = None, plan_rule: Callable[[str], str] = lambda robot: "queue",
                 uses_feedback: bool = True) -> None:
        """uses_feedback False: E from the execution estimates alone (the open-loop ablation)."""
        self.clock = clock
        self.network_delay_s = network_delay_s
        self.ack_timeout_s = ack_timeout_s
        self.exec_timeout_s = exec_timeout_s
        self.plan_rule = plan_rule
        self.uses_feedback = uses_feedback
        self._plans: dict[str, PlanExecution] = {}
        self._robots: dict[str, Robot] = {}
        self._rank = itertools.count()
        self._deadlines: list[tuple[float, int, str, int]] = []   # (deadline, seq, request, index), lazily invalidated
        self._seq = itertools.count()

    # ------------------------------------------------------------------------------------------------ queries
    def plan(self, req_id: str) -> PlanExecution | None:
        return self._plans.get(req_id)

    def segment(self, req_id: str, index: int) -> TrackedSegment | None:
        plan = self._plans.get(req_id)
        if plan is None or not 0 <= index < len(plan.segments):
            return None
        return plan.segments[index]

    def outstanding(self, req_id: str) -> bool:
        """True while a segment of the plan is held or at the robot (the request cannot end DONE yet)."""
        plan = self._plans.get(req_id)
        return plan is not None and any(s.status in OUT or s.status == SegmentStatus.HELD for s in plan.segments)

    # ------------------------------------------------------------------------------------------------ plans
    def add_plan(self, req_id: str, robot: str | None, ert: float, view: PlanView, stream: bool) -> None:
        """A request was accepted: its plan waits for its robot (or becomes current). robot None: a dry run."""
        plan = PlanExecution(req_id, robot, ert, next(self._rank), view, sendable=stream)
        self._plans[req_id] = plan
        if robot is None:
            return
        rule = self.plan_rule(robot)
        if rule not in PLAN_RULES:
            raise ValueError(f"plan rule of {robot} must be one of {', '.join(PLAN_RULES)}, got {rule!r}")
        r = self._robots.get(robot)
        if r is None:
            r = self._robots[robot] = Robot(robot, rule)
        r.rule = rule
        if r.current is None:
            r.current = plan
        else:
            r.waiting.append(plan)
        self._refresh(r)

    def add_segment(self, req_id: str, seg: Segment) -> list[Out]:
        """A generated segment: sent now if its plan is current and sendable (it may take the robot first)."""
        plan = self._plans[req_id]
        plan.segments.append(TrackedSegment(req_id, seg))
        return self._release(plan)

    def regenerating(self, req_id: str, stream: bool) -> None:
        """A new generation of the plan starts (a replan after a failure): a whole-plan policy holds it again."""
        self._plans[req_id].sendable = stream

    def generation_done(self, req_id: str) -> list[Out]:
        """The plan's generation has ended: a policy that sends whole plans sends it now."""
        plan = self._plans[req_id]
        plan.sendable = True
        return self._release(plan)

    def discard_held(self, req_id: str) -> int:
        """The plan's held segments never go out (its text stopped parsing); returns how many there were."""
        plan = self._plans.get(req_id)
        if plan is None:
            return 0
        held = plan.held()
        self._withdraw(plan, held, SegmentStatus.WITHDRAWN, only_held=True)
        return len(held)

    def end_plan(self, req_id: str) -> list[Out]:
        """The request ended: its segments still out are withdrawn, its robot goes to the next waiting plan."""
        plan = self._plans.pop(req_id, None)
        if plan is None:
            return []
        out: list[Out] = []
        withdrawn = self._withdraw(plan, plan.segments, SegmentStatus.WITHDRAWN)
        if withdrawn:
            out.append(SegmentsWithdrawn(req_id, withdrawn))
        r = self._robots.get(plan.robot) if plan.robot is not None else None
        if r is None:
            return out
        if plan in r.waiting:
            r.waiting.remove(plan)
        if r.current is plan:
            r.current = None
            order = r.order()
            if order:
                r.current = order[0]
                r.waiting.remove(order[0])
                out += self._send_held(r.current)
        if r.current is None and not r.line:
            del self._robots[r.name]
        else:
            self._refresh(r)
        return out

    # ------------------------------------------------------------------------------------------------ robot reports
    def accepted(self, req_id: str, index: int, t: float) -> None:
        s = self.segment(req_id, index)
        if s is None or s.status not in OUT or s.accepted:
            return
        s.accepted, s.deadline = True, None
        r = self._robot(req_id)
        if r is not None and r.line and r.line[0] is s and s.seg.exec_started is None:
            self._start(s, t)       # nothing ahead of it on the robot: it runs from now
        elif s.seg.exec_started is not None:
            self._start(s, s.seg.exec_started)
        else:
            s.status = SegmentStatus.ACCEPTED
        self._refresh_plan(req_id)

    def started(self, req_id: str, index: int, t: float) -> None:
        """The robot's first feedback for the segment: its real start."""
        s = self.segment(req_id, index)
        if s is not None and s.status in OUT:
            s.reported = True
            self._start(s, t)
            self._refresh_plan(req_id)

    def finished(self, req_id: str, index: int, t: float, status: SegmentStatus,
                 exec_time_s: float | None = None) -> list[Out]:
        """The robot's result (status FINISHED, FAILED or PREEMPTED; NOT_RUN: not_run()). exec_time_s: its own
        measure of the run, which places the start (t - exec_time_s) when it is plausible. A failure makes the
        plan's later segments NOT_RUN (withdrawn at the robot; it explains the robot's NOT_RUN for them). Results
        for segments that already ended are ignored."""
        s = self.segment(req_id, index)
        if s is None or s.status not in OUT:
            return []
        seg = s.seg
        sent = seg.dispatched if seg.dispatched is not None else t
        if status == SegmentStatus.FINISHED and exec_time_s is not None and 0.0 < exec_time_s < t - sent + 1.0:
            seg.exec_started = max(sent, t - exec_time_s)
        elif seg.exec_started is None and status in (SegmentStatus.FINISHED, SegmentStatus.FAILED):
            seg.exec_started = sent
        if seg.exec_started is not None:     # a PREEMPTED segment that never started has no run
            seg.exec_finished = t
        seg.ok = status == SegmentStatus.FINISHED
        s.status, s.deadline = status, None
        plan = self._plans[req_id]
        if status == SegmentStatus.PREEMPTED:
            plan.cut = True
        out: list[Out] = []
        if status == SegmentStatus.FAILED:
            for later in plan.segments[index + 1:]:
                later.robot_refusal = ""
            withdrawn = self._withdraw(plan, plan.segments[index + 1:], SegmentStatus.NOT_RUN)
            if withdrawn:
                out.append(SegmentsWithdrawn(req_id, withdrawn))
        self._leave_line(plan, s, t)
        return out

    def refusal_after(self, req_id: str) -> tuple[int, str] | None:
        """A segment the robot ended NOT_RUN whose earlier segments all finished: (index, the robot's message). The
        robot says NOT_RUN when an earlier segment ended first; if that one succeeded, nothing else explains it."""
        plan = self._plans.get(req_id)
        if plan is None:
            return None
        for s in plan.segments:
            if s.robot_refusal:
                return (s.index, s.robot_refusal)
            if s.status in OUT or s.status == SegmentStatus.HELD:
                return None
        return None

    def earlier_out(self, req_id: str, index: int) -> bool:
        """Whether a segment of the plan before ``index`` is still out at the robot (sent, accepted or running)."""
        plan = self._plans.get(req_id)
        return plan is not None and any(x.status in OUT for x in plan.segments[:index])

    def not_run(self, req_id: str, index: int, t: float, message: str) -> bool:
        """The robot ended the segment NOT_RUN. True when an earlier segment of the plan is still out (its result
        decides what happens); False when none is: the refusal is the plan's failure."""
        plan = self._plans.get(req_id)
        s = self.segment(req_id, index)
        if plan is None or s is None or s.status not in OUT:
            return True
        earlier_out = self.earlier_out(req_id, index)
        s.status, s.deadline, s.seg.ok = SegmentStatus.NOT_RUN, None, False
        s.robot_refusal = message if earlier_out else ""
        self._leave_line(plan, s, t)
        return earlier_out

    def executor_lost(self, robot: str, t: float, message: str) -> list[SegmentExpired]:
        """The robot's executor left: every segment out at it fails EXECUTOR_UNAVAILABLE."""
        r = self._robots.get(robot)
        out = []
        while r is not None and r.line:
            out.append(self._expire(r.line[0], ErrorCode.EXECUTOR_UNAVAILABLE, message, t))
        return out

    def expired(self, now: float) -> list[SegmentExpired]:
        """Segments whose deadline has passed (each marked FAILED, taken off its robot)."""
        out: list[SegmentExpired] = []
        while self._deadlines and self._deadlines[0][0] < now:
            deadline, _, req_id, index = heapq.heappop(self._deadlines)
            s = self.segment(req_id, index)
            if s is None or s.status not in OUT or s.deadline != deadline:
                continue         # answered, re-armed or withdrawn since
            robot = self._plans[req_id].robot
            if s.deadline_code == ErrorCode.EXECUTOR_UNAVAILABLE:
                msg = (f"the executor of {robot} did not accept or reject segment {index} within "
                       f"executor_ack_timeout_s ({self.ack_timeout_s:.1f} s); check that the robot's executor is "
                       "running")
            else:
                since = "it started" if s.reported else \
                    "it was due to start (the robot sent no feedback that it runs)"
                msg = (f"the executor of {robot} did not finish segment {index} within its worst-case time "
                       f"({s.seg.bound_exec_s:.1f} s) + executor_timeout_s ({self.exec_timeout_s:.1f} s) after "
                       f"{since}; check the robot")
            out.append(self._expire(s, s.deadline_code, msg, now))
        return out

    # ------------------------------------------------------------------------------------------------ internals
    def _robot(self, req_id: str) -> Robot | None:
        plan = self._plans.get(req_id)
        return self._robots.get(plan.robot) if plan is not None and plan.robot is not None else None

    def _release(self, plan: PlanExecution) -> list[Out]:
        """Send what the plan may send now; a more urgent waiting plan may take the robot first."""
        if not plan.sendable or not plan.held():
            return []
        if plan.robot is None:
            t = self.clock()
            for s in plan.held():            # a dry run: executed the moment it is sent
                s.seg.dispatched = s.seg.exec_started = s.seg.exec_finished = t
                s.seg.ok, s.status = True, SegmentStatus.FINISHED
            self._refresh_plan(plan.req_id)
            return []
        r = self._robots[plan.robot]
        if r.current is plan:
            out = self._send_held(plan)
        elif r.rule == "urgent_preempts" and r.current is not None and plan.more_urgent_than(r.current):
            out = self._take_robot(r, plan)
        else:
            out = []
        self._refresh(r)
        return out

    def _take_robot(self, r: Robot, plan: PlanExecution) -> list[Out]:
        """`plan` preempts the robot's current plan: that one waits again if it sent the robot nothing yet, else it
        stops (its held segments are withdrawn, the robot ends those it holds PREEMPTED)."""
        old = r.current
        assert old is not None
        r.waiting.remove(plan)
        r.current, plan.preempts = plan, True
        out: list[Out] = []
        if not old.sent_any():
            r.waiting.append(old)
        else:
            old.stopping = True
            if old.held():
                old.cut = True
                self._withdraw(old, old.segments, SegmentStatus.WITHDRAWN, only_held=True)
            out.append(PlanPreempted(old.req_id, plan.req_id,
                                     f"plan {plan.req_id} for {r.name} is more urgent (ERT {plan.ert:g} s < "
                                     f"{old.ert:g} s): the robot stopped this plan, its skill in progress "
                                     "interrupted (plan_rule urgent_preempts)"))
        return out + self._send_held(plan)

    def _send_held(self, plan: PlanExecution) -> list[Out]:
        if not plan.sendable:
            return []
        t = self.clock()
        r = self._robots[plan.robot]
        out: list[Out] = []
        for s in plan.held():
            s.seg.dispatched = t
            s.status = SegmentStatus.SENT
            r.line.append(s)
            if self.ack_timeout_s is not None:
                self._arm(s, t + self.ack_timeout_s, ErrorCode.EXECUTOR_UNAVAILABLE)
            out.append(SegmentReady(plan.req_id, s.seg, plan.preempts))
        return out

    def _withdraw(self, plan: PlanExecution, segments: Iterable[TrackedSegment], status: SegmentStatus,
                  only_held: bool = False) -> tuple[int, ...]:
        """End these segments with `status` (held ones never go out); returns the indices of those that were out."""
        r = self._robots.get(plan.robot) if plan.robot is not None else None
        out = []
        for s in segments:
            if s.status == SegmentStatus.HELD or (s.status in OUT and not only_held):
                if s.status in OUT:
                    out.append(s.index)
                    if r is not None and s in r.line:
                        r.line.remove(s)
                s.status, s.deadline = status, None
        if r is not None and out:
            self._next_in_line(r, self.clock())
        return tuple(out)

    def _leave_line(self, plan: PlanExecution, s: TrackedSegment, t: float) -> None:
        r = self._robots.get(plan.robot) if plan.robot is not None else None
        if r is not None and s in r.line:
            r.line.remove(s)
            self._next_in_line(r, t)
            self._refresh(r)
        else:
            self._refresh_plan(plan.req_id)

    def _next_in_line(self, r: Robot, t: float) -> None:
        """The segment before it on the robot ended: the next one runs from now (provisionally)."""
        if r.line and r.line[0].seg.exec_started is None:
            self._start(r.line[0], t)

    def _start(self, s: TrackedSegment, t: float) -> None:
        s.seg.exec_started = t
        if s.status in OUT:
            s.status = SegmentStatus.RUNNING if s.accepted or self.ack_timeout_s is None else s.status
        self._arm_execution(s)

    def _arm_execution(self, s: TrackedSegment) -> None:
        """The execution deadline of a started segment the robot has accepted (its ack deadline runs until then)."""
        if self.exec_timeout_s is not None and s.seg.exec_started is not None and \
                (s.accepted or self.ack_timeout_s is None):
            self._arm(s, s.seg.exec_started + s.seg.bound_exec_s + self.exec_timeout_s, ErrorCode.EXECUTOR_TIMEOUT)

    def _arm(self, s: TrackedSegment, deadline: float, code: ErrorCode) -> None:
        s.deadline, s.deadline_code = deadline, code
        heapq.heappush(self._deadlines, (deadline, next(self._seq), s.req_id, s.index))

    def _expire(self, s: TrackedSegment, code: ErrorCode, message: str, t: float) -> SegmentExpired:
        req_id = s.req_id
        plan = self._plans[req_id]
        s.seg.exec_finished = t
        if s.seg.exec_started is None:
            s.seg.exec_started = s.seg.dispatched if s.seg.dispatched is not None else t
        s.seg.ok = False
        s.status, s.deadline = SegmentStatus.FAILED, None
        later = self._withdraw(plan, plan.segments[s.index + 1:], SegmentStatus.NOT_RUN)
        self._leave_line(plan, s, t)
        return SegmentExpired(req_id, s.index, code, message, later)

    def _refresh_plan(self, req_id: str) -> None:
        r = self._robot(req_id)
        if r is not None:
            self._refresh(r)
        else:
            plan = self._plans.get(req_id)
            if plan is not None:
                plan.view.expected_exec_end = plan.expected_end(self.network_delay_s, self.uses_feedback)
                plan.view.earliest_start = None

    def _refresh(self, r: Robot) -> None:
        """E and the earliest start of every plan on the robot: a waiting plan cannot start before the plans ahead
        of it (the current one, unless it would preempt it, and those that get the robot before it) are expected
        to end."""
        d, feedback = self.network_delay_s, self.uses_feedback
        done: list[tuple[PlanExecution, float]] = []     # plans placed so far, with when the robot is free of them
        for plan in ([r.current] if r.current is not None else []) + r.order():
            busy = -math.inf
            for q, q_end in done:
                if not (r.rule == "urgent_preempts" and q is r.current and plan.more_urgent_than(q)):
                    busy = max(busy, q_end)
            plan.earliest_start = busy if math.isfinite(busy) else None
            end = plan.expected_end(d, feedback)
            plan.view.expected_exec_end = end
            plan.view.earliest_start = plan.earliest_start
            done.append((plan, end if end is not None else busy))
