"""One accepted segment on the executor and its progress (no ROS types: the handle is the action's goal handle)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.program import Statement
from timely_llm_ros.ros.executor.skills import SkillContext


@dataclass
class SegmentJob:
    """A segment from its arrival to its result; the fields below ``lock`` change while it runs (hold the lock)."""

    handle: Any
    request_id: str
    index: int
    program: list[Statement]      # what runs
    calls: list[SkillCall]        # every call it can make (worst case): skills_total, time_remaining
    expected_s: float             # the planner's estimate
    verdict: Any = None           # a Result decided on arrival (UNKNOWN_SKILL, FAILED: no parse, BUSY, NOT_RUN,
                                  # PREEMPTED), or while it waited (NOT_RUN, PREEMPTED)
    queued: bool = False          # it waited in the robot's queue (RobotQueue)
    preempted_by: str = ""        # a more urgent plan took the robot: stop its skill now
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None
    executed: list[SkillCall] = field(default_factory=list)   # calls started, with argument values
    lock: threading.Lock = field(default_factory=threading.Lock)
    skills_done: int = 0          # calls finished
    current: SkillCall | None = None
    ctx: SkillContext | None = None
    skill_started: float = 0.0
    hint_s: float | None = None   # time remaining of the current call, from ctx.progress()
    est_total: float = 0.0        # estimates of the worst case, and of the calls finished
    est_done: float = 0.0

    def start(self, est_total: float) -> None:
        """The segment starts running; ``est_total``: the estimates of its worst case summed (s)."""
        self.started = self.skill_started = time.monotonic()
        self.est_total = est_total

    def begin_call(self, call: SkillCall, ctx: SkillContext) -> None:
        with self.lock:
            self.current, self.ctx, self.skill_started, self.hint_s = call, ctx, time.monotonic(), None

    def end_call(self, estimate_s: float) -> None:
        with self.lock:
            self.skills_done += 1
            self.est_done += estimate_s
            self.current = None

    def finish(self) -> None:
        """Every statement ran: nothing remains (calls of branches not taken included)."""
        with self.lock:
            self.current, self.est_done = None, self.est_total

    def progress(self, estimate: Callable[[SkillCall], float]) -> tuple[int, int, str, float]:
        """(calls finished, calls in the worst case, the running call's name, seconds remaining): the running call's
        time left plus the estimates of the calls the segment can still make (worst case)."""
        now = time.monotonic()
        with self.lock:
            name = self.current.name if self.current is not None else ""
            if not self.est_total:   # no per-skill estimates: the planner's estimate minus the time spent
                left = max(0.0, self.expected_s - (now - (self.started or now)))
                return self.skills_done, len(self.calls), name, left
            current, left = 0.0, 0.0
            if self.current is not None:
                current = estimate(self.current)
                left = self.hint_s if self.hint_s is not None else max(0.0, current - (now - self.skill_started))
            return self.skills_done, len(self.calls), name, left + max(0.0, self.est_total - self.est_done - current)
