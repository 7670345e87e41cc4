"""What the scheduler tells its caller (the ROS server, the simulator): each call returns a list of these."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.outcome import Progress, RequestOutcome
from timely_llm_ros.core.request import RequestState, Segment


@dataclass(frozen=True)
class SegmentGenerated:
    """A new executable segment of the request's plan (its feedback); it goes to the robot with SegmentReady, at
    once or once the robot's earlier plan has ended."""

    req_id: str
    segment: Segment
    progress: Progress


@dataclass(frozen=True)
class SegmentReady:
    """Send this segment to the request's robot now (a plan's segments come in order; the robot queues them).
    preempts: the plan is more urgent than the one the robot runs, which it stops (its plan rule urgent_preempts)."""

    req_id: str
    segment: Segment
    preempts: bool = False


@dataclass(frozen=True)
class SegmentsWithdrawn:
    """Segments sent to the robot that must not run (any more): cancel them there. reason: why (the request ended,
    an earlier segment failed, or EXECUTOR_UNAVAILABLE / EXECUTOR_TIMEOUT: the robot did not answer in time)."""

    req_id: str
    indices: tuple[int, ...]
    reason: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class StateChanged:
    """The request's state changed (QUEUED when it is accepted), with its progress."""

    req_id: str
    state: RequestState
    progress: Progress


@dataclass(frozen=True)
class RequestFinished:
    req_id: str
    outcome: RequestOutcome


Event = Union[SegmentGenerated, SegmentReady, SegmentsWithdrawn, StateChanged, RequestFinished]
