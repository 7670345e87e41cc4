"""Plain dataclasses for plan requests, segments and the scheduler's view of a generation."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from timely_llm_ros.core.tuf import TimeUtility

MAX_PLAN_CALLS = 1000   # default cap on a plan's skill calls with its loops unrolled (core/skills/program.py)


class RequestState(str, Enum):
    """Lifecycle of a plan request, as published in Plan feedback."""

    QUEUED = "queued"          # waiting for its first prefill/decode
    GENERATING = "generating"  # in the engine's running batch
    SUSPENDED = "suspended"    # a segment is out; KV kept, waiting to be resumed
    EXECUTING = "executing"    # generation finished, robot still executing segments
    DONE = "done"
    CANCELLED = "cancelled"
    DROPPED = "dropped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SkillCall:
    """One executable skill call parsed from plan text, e.g. mf(50) -> name='mf', args=(50,)."""

    name: str
    args: tuple[Any, ...] = ()


@dataclass
class PlanRequest:
    """A validated planning request (the core's form of a Plan action goal)."""

    req_id: str
    agent_id: str              # robot namespace, e.g. "drone_3"
    robot_type: str            # skill set name, e.g. "drone" / "arm" / "chat"
    task: str
    tuf: TimeUtility
    arrival: float             # clock time the request was received (s)
    context: str = ""          # scene / world description
    urgency: str = ""          # named class it came from ("" if explicit TUF)
    max_new_tokens: int = 200  # hard cap on plan length (tokens)
    forced_plan: str | None = None  # trace replay: emit exactly this plan (benchmarks)
    constrained: bool = False  # decode under the robot's grammar (core/skills/grammar.py), built from the three below
    skills: tuple[str, ...] = ()    # the skills its robot advertises (() = its skill set's own)
    objects: tuple[str, ...] = ()   # names its object arguments may take (() = free strings)
    hazards: tuple[str, ...] = ()   # those of them its task keeps the robot away from (never an approached object)
    scene_objects: tuple[str, ...] = ()   # those of them its scene lists (() = all): in_scene skills take only these
    hazard_sides: tuple[str, ...] = ()    # the sides its context places a hazard on: no skill moving there is admitted
    fixed_places: tuple[str, ...] = ()    # the fixed places its context lists (a bin): movable skills never take these
    max_calls: int = MAX_PLAN_CALLS   # skill calls the plan may make with its loops unrolled
    task_type: str = ""        # label for metrics (e.g. LRTrace trace id)
    # paper policies (0 = not given; each policy documents its default)
    time_budget_s: float = 0.0   # TimeBill / RT-LM: hard budget for the whole plan, from arrival (s)
    tpot_slo_ms: float = 0.0     # SLICE: time-per-output-token SLO (ms)
    ttft_slo_ms: float = 0.0     # SLICE: time-to-first-token SLO (ms)
    dry_run: bool = False        # only generate: no robot runs it (its segments count as executed when sent)


@dataclass
class Segment:
    """An executable piece of a plan and its timeline (all times on the scheduler clock, s)."""

    index: int
    text: str
    skills: list[SkillCall]
    gen_started: float         # when generation of this segment began (first token step)
    gen_finished: float        # when the segment became executable
    est_exec_s: float          # expected execution time (E and priority use it: core/plan_time.py)
    dispatched: float | None = None   # sent to the executor
    exec_started: float | None = None
    exec_finished: float | None = None
    ok: bool | None = None
    executed_skills: list[SkillCall] = field(default_factory=list)   # what the robot ran (its result says)
    worst_exec_s: float | None = None  # worst-case execution time (every branch taken): the robot's deadline

    @property
    def bound_exec_s(self) -> float:
        """The execution time the robot is held to: the worst case (the expected time when none is known)."""
        return self.est_exec_s if self.worst_exec_s is None else max(self.worst_exec_s, self.est_exec_s)

    @property
    def exec_s(self) -> float | None:
        """Actual execution time, once known."""
        if self.exec_started is None or self.exec_finished is None:
            return None
        return self.exec_finished - self.exec_started


@dataclass
class Generation:
    """The scheduler's mutable view of one request's generation (policies read it, never the engine)."""

    req: PlanRequest
    prompt_ids: list[int]
    state: RequestState = RequestState.QUEUED
    output_ids: list[int] = field(default_factory=list)
    text: str = ""                 # detokenized output so far
    seg_text_start: int = 0        # offset in text where the current segment starts
    seg_token_start: int = 0       # index in output_ids where the current segment starts
    seg_gen_started: float | None = None
    seg_engine_s: float = 0.0      # engine time of the steps the current segment was in (its generation time, G's
                                   # measure: what it waited for while suspended or queued is not in it)
    segments: list[Segment] = field(default_factory=list)
    prefilled: bool = False
    finished_generating: bool = False
    expected_exec_end: float | None = None  # E: expected (then actual) end of the robot's last known segment
    earliest_start: float | None = None     # the robot runs another plan until then (None: free for this one)
    step_times: deque = field(default_factory=lambda: deque(maxlen=8))  # recent per-token step durations
    enqueued_at: float = 0.0       # when it (re)entered the waiting queue
    offloaded: bool = False        # KV lives in host memory
    prefill_left: int | None = None  # prompt tokens still to prefill, as the engine reports (None: unknown)
    reload_s: float = 0.0          # time to bring its offloaded KV back to the device (0 when resident)
    max_new_tokens: int | None = None  # the generation's effective token cap (None: its request's)
    max_segment_tokens: int | None = None  # its robot type's segment length bound (the skill set's)
    open_block: bool = False       # its text ends inside a loop's or conditional's braces: no cut before they close

    @property
    def req_id(self) -> str:
        return self.req.req_id

    @property
    def k(self) -> int:
        """Index of the segment being generated next (0 = first segment, TUF_0 applies)."""
        return len(self.segments)

    @property
    def tokens_in_segment(self) -> int:
        return len(self.output_ids) - self.seg_token_start

    def segment_tokens_left(self, segment_tokens: int) -> int:
        """Tokens left until the current segment is cut (at least one), for a segment of ``segment_tokens``: that
        minus the tokens it has. A loop or conditional cannot be cut before it closes: once an open one has outgrown
        its robot type's max_segment_tokens, only the generation's token cap bounds what is left (the WCET bound
        holds for such blocks)."""
        n = self.tokens_in_segment
        longest = self.max_segment_tokens if self.max_segment_tokens is not None else segment_tokens
        if self.open_block and n >= longest:
            return max(self.token_cap - len(self.output_ids), 1)
        return max(segment_tokens - n, 1)

    @property
    def token_cap(self) -> int:
        """The most tokens this generation may produce (its own cap, else its request's)."""
        return self.max_new_tokens if self.max_new_tokens is not None else self.req.max_new_tokens

    def first_start(self, ready: float) -> float:
        """When the robot can start the plan's first segment if it is there at `ready`: not before the robot is
        free of the plans ahead of this one."""
        return ready if self.earliest_start is None else max(ready, self.earliest_start)

    def token_rate(self) -> float | None:
        """Recent generation speed (tokens/s), None before any step."""
        if not self.step_times:
            return None
        mean = sum(self.step_times) / len(self.step_times)
        return 1.0 / mean if mean > 0 else None
