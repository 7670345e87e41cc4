"""How a request ended (RequestOutcome, from its executed segments) and how far it has got (Progress)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState, Segment


@dataclass
class RequestOutcome:
    """How a request ended, with the user-visible latencies (seconds) and utilities."""

    req: PlanRequest
    state: RequestState
    error_code: ErrorCode
    message: str
    plan_text: str
    segments: list[Segment]
    tokens: int
    response_time: float = math.nan     # arrival -> first action starts (W(s0))
    waiting_time: float = math.nan      # total time the robot waited for the planner (sum of W(s_k))
    completion_time: float = math.nan   # arrival -> last action ends
    utility: float = 0.0                # Eq. 1: TUF_0 of the response time (0 if never served)
    total_utility: float = 0.0          # Eq. 3: TUF_0(W(s0)) + sum_k TUF_1(W(s_k))
    finished_at: float = math.nan
    replans: int = 0                    # new generations after a failed segment (replan_on_failure)
    returned: bool = False              # a return statement ended the plan on the robot
    return_value: str = ""              # its value, as the robot reported it

    @property
    def ok(self) -> bool:
        return self.error_code == ErrorCode.NONE


@dataclass(frozen=True)
class Progress:
    """A request's progress when an event was made: what its Plan feedback reports."""

    state: RequestState
    segments_generated: int
    segments_executed: int        # segments the robot has finished (successfully or not)
    utility_so_far: float         # Eq. 3 over the executed segments
    estimated_time_remaining: float   # until the robot is expected to end the segments known so far (E - now)


def measure_outcome(gen: Generation, state: RequestState, code: ErrorCode, message: str, t: float) -> RequestOutcome:
    """Response time, waiting time, completion time and utilities from a generation's executed segments."""
    req = gen.req
    out = RequestOutcome(req=req, state=state, error_code=code, message=message, plan_text=gen.text,
                         segments=list(gen.segments), tokens=len(gen.output_ids), finished_at=t)
    executed = [s for s in gen.segments if s.exec_started is not None and s.exec_finished is not None]
    if not executed or gen.segments[0] is not executed[0]:
        return out
    waits = [executed[0].exec_started - req.arrival]
    for prev, seg in zip(executed, executed[1:]):
        waits.append(max(0.0, seg.exec_started - prev.exec_finished))
    out.response_time = waits[0]
    out.waiting_time = sum(waits)
    out.completion_time = executed[-1].exec_finished - req.arrival
    out.utility = req.tuf(waits[0])
    out.total_utility = req.tuf(waits[0]) + sum(req.tuf.resumed(w) for w in waits[1:])
    return out


def progress_of(gen: Generation, now: float) -> Progress:
    """The generation's progress at `now`."""
    executed = sum(1 for s in gen.segments if s.exec_finished is not None)
    utility = measure_outcome(gen, gen.state, ErrorCode.NONE, "", now).total_utility if executed else 0.0
    left = gen.expected_exec_end - now if gen.expected_exec_end is not None else 0.0
    return Progress(gen.state, len(gen.segments), executed, float(utility), max(float(left), 0.0))
