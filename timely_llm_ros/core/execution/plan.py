"""One plan's execution as the planner tracks it: each segment's status and deadline, and E, the expected end of the
robot's execution of the plan (Eq. 4's input), with the robot's earliest start for a plan that waits for another;
a robot's plans; what the tracker tells the scheduler beyond its events (a preemption, an expired segment)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.request import Segment


class SegmentStatus(str, Enum):
    """Where a generated segment is."""

    HELD = "held"            # generated, not sent: its plan is not the robot's current plan, or the policy sends
                             # whole plans (vllm) and the generation has not finished
    SENT = "sent"            # sent to the robot, not yet accepted (its ack deadline runs)
    ACCEPTED = "accepted"    # the robot holds it, behind what it runs
    RUNNING = "running"      # started: a real start (the robot's first feedback) or a provisional one (the segment
                             # before it on the robot ended, or the robot accepted it with nothing ahead of it)
    FINISHED = "finished"
    FAILED = "failed"        # failed at the robot, refused, or the robot did not answer in time
    NOT_RUN = "not_run"      # an earlier segment of its plan did not succeed: withdrawn at the robot
    PREEMPTED = "preempted"  # the robot stopped it for a more urgent plan
    WITHDRAWN = "withdrawn"  # its plan ended (done by a return, cancelled, dropped, failed) before it ran


OUT = frozenset({SegmentStatus.SENT, SegmentStatus.ACCEPTED, SegmentStatus.RUNNING})   # at the robot or on its way


class PlanView(Protocol):
    """What the policies read of a plan's execution (the scheduler's Generation): the tracker keeps it up to date."""

    expected_exec_end: float | None
    earliest_start: float | None


@dataclass
class TrackedSegment:
    req_id: str
    seg: Segment
    status: SegmentStatus = SegmentStatus.HELD
    accepted: bool = False
    deadline: float | None = None           # ack deadline while SENT, execution deadline once started
    deadline_code: ErrorCode = ErrorCode.NONE
    robot_refusal: str = ""                 # the robot's NOT_RUN message, while an earlier segment's result decides
    reported: bool = False                  # the robot's feedback has said it runs (else its start is provisional)

    @property
    def index(self) -> int:
        return self.seg.index


@dataclass
class PlanExecution:
    """A request's segments on their way to, and at, its robot."""

    req_id: str
    robot: str | None           # None: a dry run (segments count as executed the moment they are sent)
    ert: float                  # its time requirement: a strictly shorter ERT is more urgent (urgent_preempts)
    rank: int                   # arrival order
    view: PlanView
    sendable: bool              # its policy streams segments (or its generation has finished)
    segments: list[TrackedSegment] = field(default_factory=list)
    preempts: bool = False      # it took the robot from a less urgent plan: its segments carry the flag
    stopping: bool = False      # preempted: the robot stops it; it ends once its segments there have ended
    cut: bool = False           # part of it did not run because it was preempted
    earliest_start: float | None = None

    def more_urgent_than(self, other: "PlanExecution") -> bool:
        return self.ert < other.ert

    def out(self) -> list[TrackedSegment]:
        return [s for s in self.segments if s.status in OUT]

    def held(self) -> list[TrackedSegment]:
        return [s for s in self.segments if s.status == SegmentStatus.HELD]

    def sent_any(self) -> bool:
        return any(s.status != SegmentStatus.HELD and s.status != SegmentStatus.WITHDRAWN for s in self.segments)

    def expected_end(self, network_delay_s: float, uses_feedback: bool) -> float | None:
        """E: the expected end of the robot's execution of the segments known so far. With feedback, the last reported
        completion replaces the estimates before it, and a real (or provisional) start replaces a segment's
        expected one; a held segment cannot start before the robot is free for this plan (earliest_start).
        Without (the open-loop ablation), estimates only: every segment from when it was (or will be) sent."""
        d = network_delay_s
        free = self.earliest_start if self.earliest_start is not None else -math.inf
        end = -math.inf
        live = [s for s in self.segments if s.status not in (SegmentStatus.NOT_RUN, SegmentStatus.WITHDRAWN)]
        if not uses_feedback:
            for s in live:
                seg = s.seg
                start = max(end, (seg.dispatched if seg.dispatched is not None else seg.gen_finished) + d)
                end = (max(start, free) if s.status == SegmentStatus.HELD else start) + seg.est_exec_s
            return end if math.isfinite(end) else None
        done = [s.seg.exec_finished for s in live if s.seg.exec_finished is not None]
        end = done[-1] if done else -math.inf
        for s in live:
            seg = s.seg
            if s.status in OUT:
                sent = seg.dispatched if seg.dispatched is not None else seg.gen_finished
                end = max(end, seg.exec_started if seg.exec_started is not None else sent + d) + seg.est_exec_s
            elif s.status == SegmentStatus.HELD:
                end = max(end, seg.gen_finished + d, free) + seg.est_exec_s
        return end if math.isfinite(end) else None


@dataclass(frozen=True)
class PlanPreempted:
    """The robot stops this plan for a more urgent one (`by`): its generation must stop."""

    req_id: str
    by: str
    message: str


@dataclass(frozen=True)
class SegmentExpired:
    """A segment the robot did not accept, or did not finish, in time (marked FAILED; the plan's later segments out
    are withdrawn NOT_RUN: `later`)."""

    req_id: str
    index: int
    code: ErrorCode
    message: str
    later: tuple[int, ...] = ()


@dataclass
class Robot:
    """A robot as the planner sees it: its plan rule, current plan, waiting plans and the segments it holds."""

    name: str
    rule: str
    current: PlanExecution | None = None
    waiting: list[PlanExecution] = field(default_factory=list)
    line: list[TrackedSegment] = field(default_factory=list)   # at the robot, in the order it runs them

    def order(self) -> list[PlanExecution]:
        """The waiting plans in the order they would get the robot."""
        if self.rule == "urgent_preempts":
            return sorted(self.waiting, key=lambda p: (p.ert, p.rank))
        return list(self.waiting)
