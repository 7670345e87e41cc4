"""PlanScheduler: the ROS-free loop that turns plan requests into executed segments.

It couples a Policy (which generations run in the next engine step), an Engine (one batched
step at a time), each robot type's skill-set Segmenter (when is the text so far executable) and
its execution-time model (when will the robot need the next segment). The ROS server node and
the discrete-event simulator both drive it, through the same four calls:

    submit(request)                  a validated request arrives
    step()                           one scheduling iteration (pick, engine step, segmentation)
    on_execution_started/finished()  the robot's executor reports real progress
    cancel(request id)

Every call returns the events it produced (SegmentReady: send this segment to the robot now — a robot
runs its segments in order, queueing one that arrives while it is busy; StateChanged; RequestFinished
with the measured outcome). Single-threaded: callers serialise calls.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, Union

from ..engine.base import Engine, EngineError
from ..engine.detokenize import TextStream
from .errors import ErrorCode, RequestError
from .policies.base import Policy, SchedulingContext
from .prompting import PromptEncoder, RawPrompts
from .request import Generation, PlanRequest, RequestState, Segment, SkillCall
from .step_trace import StepRecord

Clock = Callable[[], float]


@dataclass
class SchedulerConfig:
    """Scheduler tunables (the server node exposes them as ROS parameters)."""

    network_delay_s: float = 0.0      # server -> robot latency added to expected execution starts
    max_prompt_tokens: int = 4096     # longer prompts are rejected (INVALID_TASK)
    max_waiting: int = 10_000         # queue bound; beyond it new requests are rejected
    replan_on_failure: int = 0        # replans per request after a failed segment (0: the request ends FAILED)
    max_plan_tokens: int | None = None  # plan length cap for every robot type (None: each skill set's own)
    keep_outcomes: int = 0            # finished outcomes kept in .outcomes (0: all, as the simulator needs; a
                                      # long-running server keeps the latest N so its memory stays flat)


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
class SegmentReady:
    """Dispatch this segment to the request's robot now (segments come in order; the robot queues them)."""

    req_id: str
    segment: Segment


@dataclass(frozen=True)
class StateChanged:
    req_id: str
    state: RequestState


@dataclass(frozen=True)
class RequestFinished:
    req_id: str
    outcome: RequestOutcome


@dataclass(frozen=True)
class SegmentsWithdrawn:
    """Segments already dispatched that must not run any more: one before them failed and the request is being
    planned again (its robot's executor drops them; cancel any it still holds)."""

    req_id: str
    indices: tuple[int, ...]


Event = Union[SegmentReady, StateChanged, RequestFinished, SegmentsWithdrawn]


@dataclass
class _Track:
    """Per-request bookkeeping beyond the policy-visible Generation."""

    gen: Generation
    segmenter: object
    exec_model: object
    text: TextStream                                    # the output's text, token by token
    to_dispatch: deque = field(default_factory=deque)   # generated segments not yet sent
    in_flight: deque = field(default_factory=deque)     # sent, not yet finished (the robot runs them in order)
    max_new: int = 200                                  # effective plan-length cap (tokens)
    error: tuple[ErrorCode, str] | None = None          # error to report at the end (plan kept)
    engine_held: bool = True
    replans: int = 0                                    # generations started over after a failed segment
    discarded: set = field(default_factory=set)         # indices of segments dropped by a failure (never run)
    engine_suspended: bool = False                      # suspended in the engine (resume before its next step)
    return_value: str | None = None                     # set when a segment's return ended the plan


class PlanScheduler:
    """Segmented plan generation under a pluggable policy (see module docstring)."""

    def __init__(self, engine: Engine, policy: Policy, skill_sets: Mapping[str, object],
                 exec_models: Mapping[str, object], clock: Clock,
                 config: SchedulerConfig | None = None, prompts: PromptEncoder | None = None) -> None:
        self.engine = engine
        # the model's prompt format (core/prompting.py; engine/model_setup.py builds it): the raw planner format
        # unless the composer says otherwise
        self.prompts: PromptEncoder = prompts if prompts is not None else RawPrompts(engine.encode)
        self.policy = policy
        self.skill_sets = dict(skill_sets)
        self.exec_models = dict(exec_models)
        self.clock = clock
        self.config = config or SchedulerConfig()
        self.outcomes: dict[str, RequestOutcome] = {}
        self.last_step_time: float | None = None
        self.decode_step_s: float | None = None     # last step that only decoded, and its batch size
        self.decode_batch = 0
        self.prefill_token_s: float | None = None   # measured s per prefill token (EMA)
        # the loop's own time per step (the gap between back-to-back engine steps beyond the engine's time: the
        # policy, events, goal intake; a child engine's round trip): median of the last 16 gaps
        self.loop_s: deque = deque(maxlen=16)
        self._last_run: tuple[float, float] | None = None   # (start, engine time) of a step that left work
        self.preemptions = 0                         # generations the policy suspended mid-segment
        self.interrupted_steps = 0                   # engine steps an arrival cut short (interrupts_step)
        self._stepping: tuple[Generation, ...] = ()  # the members of the engine step in flight
        self.steps = 0
        self.last_step: StepRecord | None = None    # what the last engine step did and took (step traces)
        self._tracks: dict[str, _Track] = {}
        self._waiting: dict[str, Generation] = {}   # insertion-ordered: queued and suspended
        self._running: dict[str, Generation] = {}
        self._events: list[Event] = []

    # ----------------------------------------------------------------- queries
    def busy(self) -> bool:
        """True when there is something to generate right now."""
        return bool(self._waiting or self._running)

    def active(self) -> int:
        """Requests accepted and not finished (generating, waiting or executing)."""
        return len(self._tracks)

    def generations(self) -> list[Generation]:
        """Every unfinished request's generation (for state publishing)."""
        return [t.gen for t in self._tracks.values()]

    def generation(self, req_id: str) -> Generation | None:
        """An unfinished request's generation, or None (a lookup, not a scan: feedback asks for every event)."""
        track = self._tracks.get(req_id)
        return None if track is None else track.gen

    def is_running(self, req_id: str) -> bool:
        return req_id in self._running

    def interrupts_step(self, req: PlanRequest, now: float) -> bool:
        """Whether `req`, arriving at `now` while an engine step runs, should cut that step short: it is new to
        this scheduler (a request it already holds was weighed when the step was picked) and the policy says so
        (Policy.interrupts: by default, it outranks every member of the step). The engine asks this through its
        interrupt_check between decoder layers, on the thread that runs the step."""
        if not self._stepping or req.req_id in self._tracks:
            return False
        return self.policy.interrupts(Generation(req=req, prompt_ids=[], enqueued_at=now), self._stepping, now)

    # ----------------------------------------------------------------- inputs
    def submit(self, req: PlanRequest) -> list[Event]:
        """Accept a validated request; raises RequestError if the scheduler cannot take it."""
        if req.req_id in self._tracks or req.req_id in self.outcomes:
            raise RequestError(ErrorCode.INVALID_TASK, f"duplicate request id {req.req_id!r}")
        skill_set = self.skill_sets.get(req.robot_type)
        if skill_set is None:
            raise RequestError(ErrorCode.UNKNOWN_ROBOT_TYPE,
                               f"unknown robot type {req.robot_type!r}; known: {', '.join(sorted(self.skill_sets))}")
        if len(self._waiting) >= self.config.max_waiting:
            raise RequestError(ErrorCode.INVALID_LIMITS, f"queue full ({self.config.max_waiting} waiting); retry later")
        prompt_ids = self.prompts(skill_set, req.task, req.context)
        if len(prompt_ids) > self.config.max_prompt_tokens:
            raise RequestError(ErrorCode.INVALID_TASK,
                               f"prompt is {len(prompt_ids)} tokens, over the limit of {self.config.max_prompt_tokens};"
                               " shorten the task or context")
        cap = self.config.max_plan_tokens or skill_set.max_plan_tokens
        max_new = min(req.max_new_tokens, cap) if req.max_new_tokens else cap
        room = self.engine.max_context
        if room is not None:
            if len(prompt_ids) + min(max_new, skill_set.max_segment_tokens) > room:
                raise RequestError(ErrorCode.INVALID_TASK,
                                   f"prompt is {len(prompt_ids)} tokens; the model attends over {room} tokens in all,"
                                   " which leaves no room for a plan: shorten the task or context")
            max_new = min(max_new, room - len(prompt_ids))
        forced = self.engine.encode(" " + req.forced_plan) if req.forced_plan is not None else None
        self.engine.add(req.req_id, prompt_ids, max_new, forced_ids=forced)
        gen = Generation(req=req, prompt_ids=list(prompt_ids), enqueued_at=self.clock())
        gen.prefill_left = self._prefill_left(req.req_id, len(prompt_ids))
        exec_profile = getattr(skill_set, "exec_profile", req.robot_type)
        self._tracks[req.req_id] = _Track(gen, skill_set.segmenter(), self.exec_models[exec_profile],
                                        self.engine.text_stream(), max_new=max_new)
        self._waiting[req.req_id] = gen
        self._set_state(gen, RequestState.QUEUED)
        return self._drain()

    def cancel(self, req_id: str, code: ErrorCode = ErrorCode.CANCELLED, message: str = "cancelled by the client") -> list[Event]:
        """Stop a request wherever it is; its engine state is freed. Unknown ids are ignored."""
        track = self._tracks.get(req_id)
        if track is not None:
            state = RequestState.CANCELLED if code == ErrorCode.CANCELLED else RequestState.FAILED
            self._finish(track, state, code, message)
        return self._drain()

    def on_execution_started(self, req_id: str, index: int, t: float) -> list[Event]:
        """The robot began executing segment `index` at time t: E is recomputed from that real start."""
        seg = self._segment(req_id, index)
        if seg is not None:
            seg.exec_started = t
            self._update_expected_end(self._tracks[req_id])
        return self._drain()

    def on_execution_finished(self, req_id: str, index: int, t: float, ok: bool = True, error: str = "",
                              code: ErrorCode = ErrorCode.EXECUTION_FAILED, executed: Sequence[SkillCall] = (),
                              returned: bool = False, return_value: str = "") -> list[Event]:
        """The robot finished segment `index` at time t: the real completion replaces the estimate. `executed`: the
        calls it ran; `returned`: a return statement ran in it, which ends the request DONE with `return_value`
        (the robot does not run the plan's later segments; the generation stops)."""
        track = self._tracks.get(req_id)
        seg = self._segment(req_id, index)
        if track is None or seg is None:
            return self._drain()
        seg.exec_finished = t
        seg.ok = ok
        seg.executed_skills = list(executed)
        if seg.exec_started is None:
            seg.exec_started = seg.dispatched if seg.dispatched is not None else t
        if seg in track.in_flight:
            track.in_flight.remove(seg)
        if track.in_flight and track.in_flight[0].exec_started is None:
            track.in_flight[0].exec_started = t  # provisional: the robot moves on to the next queued segment
        if not ok:
            why = f"segment {index} failed: {error or 'executor reported failure'}"
            if track.replans < self.config.replan_on_failure:
                self._replan(track, seg, why, t)
            else:
                self._finish(track, RequestState.FAILED, code, why)
            return self._drain()
        if returned:
            track.return_value = return_value
            self._finish(track, RequestState.DONE, ErrorCode.NONE, "", t)
            return self._drain()
        self._update_expected_end(track, actual_end=t)
        self._dispatch(track, t)
        self._maybe_complete(track, t)
        return self._drain()

    # ----------------------------------------------------------------- the loop
    def step(self) -> list[Event]:
        """One iteration: drop hopeless requests, let the policy pick a batch, run one engine step."""
        now = self.clock()
        if self._last_run is not None:      # back to back with the last step: the gap is the loop's own time
            start, engine_s = self._last_run
            self.loop_s.append(max(now - start - engine_s, 0.0))
            self._last_run = None
        for gen in list(self._waiting.values()):
            reason = self.policy.should_drop(gen, now)
            if reason:
                self._finish(self._tracks[gen.req_id], RequestState.DROPPED, ErrorCode.DROPPED, reason)
        if not self.busy():
            return self._drain()
        reload = getattr(self.engine, "reload_s", None)
        if callable(reload):
            for gen in self._waiting.values():
                gen.reload_s = reload(gen.req_id) if gen.prefilled else 0.0
        for gen in self._running.values():
            gen.reload_s = 0.0   # resident: its reload was paid when it rejoined (a stale figure made admission
                                 # count it again in every later step and push urgent members out)
        mem = self.engine.memory()
        ctx = SchedulingContext(now=now, kv_free_bytes=max(0.0, mem.kv_budget_bytes - mem.kv_device_bytes),
                                kv_bytes_per_token=mem.kv_bytes_per_token, step_time_s=self.last_step_time,
                                decode_step_s=self.step_period_s(), decode_batch=self.decode_batch,
                                prefill_token_s=self.prefill_token_s,
                                step_token_budget=getattr(self.engine, "step_token_budget", None),
                                fused_steps=bool(getattr(self.engine, "fused_steps", False)))
        batch = self.policy.select(list(self._waiting.values()), list(self._running.values()), ctx)
        if not batch:
            return self._drain()
        self._apply_batch(batch, now)
        ids = [g.req_id for g in batch]
        decode_batch = sum(1 for g in batch if g.prefilled)
        decode_kv = sum(len(g.prompt_ids) + len(g.output_ids) for g in batch if g.prefilled)
        self._stepping = tuple(batch)
        try:
            result = self.engine.step(ids)
        except EngineError as exc:
            for gen in batch:
                self._finish(self._tracks[gen.req_id], RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                             f"engine step failed: {exc}")
            return self._drain()
        finally:
            self._stepping = ()
        t = self.clock()
        self.steps += 1
        if result.interrupted:
            # a partial step measures nothing: neither the decode speed nor the prefill cost
            self.interrupted_steps += 1
            prefills = ()
            for gen in batch:
                if not gen.prefilled and gen.req_id not in result.tokens:   # its prompt's forward was cut short
                    gen.prefill_left = self._prefill_left(gen.req_id, len(gen.prompt_ids))
        else:
            self.last_step_time = result.elapsed_s
            prefills = self._measure(batch, result)
        self.last_step = StepRecord(t=now, engine_s=result.elapsed_s, prefills=prefills, decode_batch=decode_batch,
                                    decode_kv_tokens=decode_kv, reload_s=sum(g.reload_s for g in batch),
                                    interrupted=result.interrupted)
        for gen in batch:
            self._absorb(self._tracks[gen.req_id], result.tokens.get(gen.req_id),
                         gen.req_id in result.finished, result.elapsed_s, t)
        if self.busy():
            self._last_run = (now, result.elapsed_s)
        return self._drain()

    def step_period_s(self) -> float | None:
        """What the policy plans a decode-only step with: the engine's time for the last one plus the loop's own
        time per step (median of recent back-to-back gaps), so a segment's predicted ready time counts every
        iteration it takes, not its forwards alone."""
        if self.decode_step_s is None:
            return None
        loop = sorted(self.loop_s)[len(self.loop_s) // 2] if self.loop_s else 0.0
        return self.decode_step_s + loop

    # ----------------------------------------------------------------- internals
    def _prefill_left(self, req_id: str, default: int) -> int:
        left = self.engine.prefill_left(req_id) if hasattr(self.engine, "prefill_left") else None
        return default if left is None else left

    def _measure(self, batch: Sequence[Generation], result) -> tuple[tuple[int, int], ...]:
        """Step-time facts for admission: the last decode-only step (and its batch size), and seconds per
        prefill token (EMA of what a step took beyond that decode time, per prompt token it prefilled).
        Returns the step's prefills as (tokens prefilled, context after them) per prompt."""
        tokens = 0
        decodes = 0
        prefills: list[tuple[int, int]] = []
        # KV reloads of generations that rejoined are paid in this step but are no decode or prefill cost:
        # counting them made a step of resumed arms read as a 2x slower decode, and admission then judged
        # urgent first segments hopeless
        elapsed = max(result.elapsed_s - sum(g.reload_s for g in batch), 0.0)
        for gen in batch:
            if gen.prefilled:
                decodes += 1
                continue
            before = gen.prefill_left if gen.prefill_left is not None else len(gen.prompt_ids)
            after = 0 if gen.req_id in result.prefilled else self._prefill_left(gen.req_id, before)
            gen.prefill_left = after
            tokens += max(before - after, 0)
            if before > after:
                prefills.append((before - after, len(gen.prompt_ids) - after))
        if tokens == 0:
            if decodes:
                self.decode_step_s, self.decode_batch = elapsed, decodes
            return ()
        decode_part = 0.0
        if decodes and self.decode_step_s is not None:
            decode_part = self.decode_step_s * decodes / max(self.decode_batch, 1) if decodes < self.decode_batch \
                else self.decode_step_s
        per_token = max(elapsed - decode_part, 0.0) / tokens
        self.prefill_token_s = per_token if self.prefill_token_s is None else \
            0.7 * self.prefill_token_s + 0.3 * per_token
        return tuple(prefills)

    def _apply_batch(self, batch: Sequence[Generation], now: float) -> None:
        chosen = {g.req_id for g in batch}
        for req_id, gen in list(self._running.items()):
            if req_id not in chosen:  # preempted by the policy mid-segment (or mid-prefill)
                self.engine.suspend(req_id)
                self._tracks[req_id].engine_suspended = True
                self.preemptions += 1
                del self._running[req_id]
                gen.enqueued_at = now
                self._waiting[req_id] = gen
                self._set_state(gen, RequestState.SUSPENDED if gen.prefilled else RequestState.QUEUED)
        # resident members resume first: resuming one from host memory makes the engine evict the least recently
        # suspended KV, which must not be a member of this very batch (it would be reloaded in the same step)
        for gen in sorted(batch, key=lambda g: g.reload_s > 0.0):
            if gen.req_id in self._running:
                continue
            del self._waiting[gen.req_id]
            track = self._tracks[gen.req_id]
            if track.engine_suspended:
                self.engine.resume(gen.req_id)
                track.engine_suspended = False
            self._running[gen.req_id] = gen
            if gen.seg_gen_started is None:
                gen.seg_gen_started = now
            self._set_state(gen, RequestState.GENERATING)

    def _absorb(self, track: _Track, token: int | None, finished: bool, elapsed: float, t: float) -> None:
        """Take one step's output for one generation: text, segments, suspension, completion."""
        gen = track.gen
        req_id = gen.req_id
        if token is None and not finished:
            return         # no progress: a chunked prompt not complete yet, or a forward an interrupt cut short
        if gen.prefilled:  # decode speed only: a prefill step says nothing about the time per token
            gen.step_times.append(elapsed)
        gen.prefilled = True
        gen.prefill_left = 0
        n_segments = len(gen.segments)
        eos = self.engine.eos_token_id
        if token is not None and token != eos:
            gen.output_ids.append(token)
            delta = track.text.push(token)
            if delta:
                gen.text += delta
                for parsed in track.segmenter.feed(delta):
                    if not self._new_segment(track, parsed, t):
                        return
                if getattr(track.segmenter, "error", None):
                    self._invalid_plan(track, t)
                    return
        capped = len(gen.output_ids) >= track.max_new and token != eos
        if finished or capped:
            tail = track.segmenter.finish()
            if tail is not None and not self._new_segment(track, tail, t):
                return
            if getattr(track.segmenter, "error", None) and not capped:
                self._invalid_plan(track, t)
                return
            self._generation_done(track, t, capped)
        elif self.policy.segmented and len(gen.segments) > n_segments:
            self.engine.suspend(req_id)
            track.engine_suspended = True
            del self._running[req_id]
            gen.enqueued_at = t
            self._waiting[req_id] = gen
            self._set_state(gen, RequestState.SUSPENDED)

    def _invalid_plan(self, track: _Track, t: float) -> None:
        """The text can no longer be a valid plan: stop generating now instead of at the length cap.
        Segments already sent keep executing; the request then ends with GENERATION_FAILED."""
        gen = track.gen
        track.error = (ErrorCode.GENERATION_FAILED,
                       f"the model's plan stopped parsing as {gen.req.robot_type} skills: {track.segmenter.error}"
                       f" (after {len(gen.segments)} executable segment(s))")
        gen.finished_generating = True
        self._running.pop(gen.req_id, None)
        self._waiting.pop(gen.req_id, None)
        if track.engine_held:
            self.engine.release(gen.req_id)
            track.engine_held = False
        self._set_state(gen, RequestState.EXECUTING)
        self._dispatch(track, t)  # a whole-plan policy sends the complete segments now
        self._maybe_complete(track, t)

    def _new_segment(self, track: _Track, parsed, t: float) -> bool:
        """Record an executable segment and dispatch it if the robot is free; False if the request failed."""
        gen = track.gen
        try:
            est = track.exec_model.min_time(parsed.skills)
        except KeyError as exc:
            self._finish(track, RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                         f"the plan uses a skill the {gen.req.robot_type} robot does not have: {exc}", t)
            return False
        seg = Segment(index=len(gen.segments), text=parsed.text, skills=list(parsed.skills),
                      gen_started=gen.seg_gen_started if gen.seg_gen_started is not None else t,
                      gen_finished=t, est_exec_s=est)
        gen.segments.append(seg)
        seg_tokens = len(gen.output_ids) - gen.seg_token_start
        gen.seg_token_start = len(gen.output_ids)
        gen.seg_text_start = len(gen.text)
        gen.seg_gen_started = None if self.policy.segmented else t  # a suspended one restarts the clock on resume
        self.policy.observe_segment(gen.req.robot_type, seg.gen_finished - seg.gen_started)
        self.policy.observe_segment_tokens(gen.req.robot_type, seg_tokens, first=seg.index == 0,
                                         urgency=gen.req.urgency)
        track.to_dispatch.append(seg)
        self._update_expected_end(track)
        if self.policy.stream_segments:
            self._dispatch(track, t)
        return True

    def _update_expected_end(self, track: _Track, actual_end: float | None = None) -> None:
        """E = expected end of the robot's last known segment. The actual completion, when reported, replaces the
        estimate; every segment still executing, queued at the robot or not yet sent adds its minimum estimate."""
        gen = track.gen
        if not getattr(self.policy, "uses_feedback", True):   # ablation: estimates only, reports ignored
            end = -math.inf
            for seg in gen.segments:
                if seg.index not in track.discarded:
                    sent = seg.dispatched if seg.dispatched is not None else seg.gen_finished
                    end = max(end, sent + self.config.network_delay_s) + seg.est_exec_s
            gen.expected_exec_end = end if math.isfinite(end) else None
            return
        end = actual_end
        if end is None:
            done = [s.exec_finished for s in gen.segments if s.exec_finished is not None]
            end = done[-1] if done else -math.inf
        for seg in track.in_flight:
            sent = seg.dispatched if seg.dispatched is not None else seg.gen_finished
            start = max(end, seg.exec_started if seg.exec_started is not None else sent + self.config.network_delay_s)
            end = start + seg.est_exec_s
        for seg in track.to_dispatch:
            end = max(end, seg.gen_finished + self.config.network_delay_s) + seg.est_exec_s
        gen.expected_exec_end = end if math.isfinite(end) else None

    def _dispatch(self, track: _Track, t: float) -> None:
        """Send every generated segment now: the robot queues them, so the next one starts without a network
        round trip (the vllm baseline sends nothing until the whole plan is generated)."""
        gen = track.gen
        if not self.policy.stream_segments and not gen.finished_generating:
            return
        while track.to_dispatch:
            seg = track.to_dispatch.popleft()
            seg.dispatched = t
            track.in_flight.append(seg)
            self._events.append(SegmentReady(gen.req_id, seg))

    def _generation_done(self, track: _Track, t: float, capped: bool) -> None:
        gen = track.gen
        gen.finished_generating = True
        self._running.pop(gen.req_id, None)
        self._waiting.pop(gen.req_id, None)
        self.engine.release(gen.req_id)
        track.engine_held = False
        if not gen.segments:
            self._finish(track, RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                         f"the model produced no executable {gen.req.robot_type} skill: {gen.text.strip()[:120]!r}")
            return
        tail = getattr(track.segmenter, "pending", "")
        if tail.strip() and not capped and not getattr(track.segmenter, "error", None):
            # Complete trailing statements without an action (a return such as ->'found';, or a query only it
            # uses) are in no segment (the segmenter cuts on actions). They go to the robot as the plan's last
            # segment, which evaluates them (the return value comes from there); the result's segments are the
            # texts the robot received and cover the whole plan text.
            calls = self.skill_sets[gen.req.robot_type].parse_skills(tail)
            gen.segments.append(Segment(index=len(gen.segments), text=tail, skills=calls, gen_started=t,
                                        gen_finished=t, est_exec_s=track.exec_model.min_time(calls)))
            track.to_dispatch.append(gen.segments[-1])
        if capped and track.error is None:
            track.error = (ErrorCode.PLAN_TOO_LONG,
                           f"plan hit the {gen.req.max_new_tokens}-token cap before it ended; executed what was complete")
        self._set_state(gen, RequestState.EXECUTING)
        self._dispatch(track, t)
        self._maybe_complete(track, t)

    def _maybe_complete(self, track: _Track, t: float) -> None:
        gen = track.gen
        if gen.finished_generating and not track.in_flight and not track.to_dispatch:
            code, msg = track.error or (ErrorCode.NONE, "")
            self._finish(track, RequestState.DONE if code == ErrorCode.NONE else RequestState.FAILED, code, msg, t)

    def _finish(self, track: _Track, state: RequestState, code: ErrorCode, message: str, t: float | None = None) -> None:
        gen = track.gen
        req_id = gen.req_id
        if track.engine_held:
            self.engine.release(req_id)
            track.engine_held = False
        self._running.pop(req_id, None)
        self._waiting.pop(req_id, None)
        del self._tracks[req_id]
        gen.state = state
        outcome = measure_outcome(gen, state, code, message, self.clock() if t is None else t)
        outcome.replans = track.replans
        if track.return_value is not None:
            outcome.returned, outcome.return_value = True, track.return_value
        self.outcomes[req_id] = outcome
        keep = self.config.keep_outcomes
        while keep and len(self.outcomes) > keep:
            del self.outcomes[next(iter(self.outcomes))]   # oldest first (dicts keep insertion order)
        self.policy.forget(req_id)
        self._events.append(StateChanged(req_id, state))
        self._events.append(RequestFinished(req_id, outcome))

    def _segment(self, req_id: str, index: int) -> Segment | None:
        track = self._tracks.get(req_id)
        if track is None or not 0 <= index < len(track.gen.segments) or index in track.discarded:
            return None
        return track.gen.segments[index]

    def _replan(self, track: _Track, failed: Segment, why: str, t: float) -> None:
        """Start a new generation for the request after `failed` failed: its context names the failed skill,
        segments queued behind it are discarded (the robot stops), the old generation's engine state is freed.
        The new plan's segments continue the request's numbering; its first one waits from t (TUF_1)."""
        gen = track.gen
        req = gen.req
        withdrawn = tuple(seg.index for seg in track.in_flight)
        for seg in list(track.in_flight) + list(track.to_dispatch):
            track.discarded.add(seg.index)
        if withdrawn:
            self._events.append(SegmentsWithdrawn(req.req_id, withdrawn))
        track.in_flight.clear()
        track.to_dispatch.clear()
        if track.engine_held:
            self.engine.release(req.req_id)
        self._running.pop(req.req_id, None)
        self._waiting.pop(req.req_id, None)
        skill = failed.skills[0].name if failed.skills else "?"
        note = f" The previous plan failed at skill {skill} ({failed.text.strip()}): {why}. Plan again from here."
        skill_set = self.skill_sets[req.robot_type]
        prompt_ids = self.prompts(skill_set, req.task, (req.context + note).strip())
        forced = None
        if req.forced_plan is not None:   # trace replay: the rest of the recorded plan, failed segment included
            done = "".join(s.text for s in gen.segments if s.ok).strip()
            plan = req.forced_plan.strip()
            rest = plan[len(done):] if plan.startswith(done) else plan
            forced = self.engine.encode(" " + rest.strip()) if rest.strip() else None
        max_new = max(track.max_new - len(gen.output_ids), skill_set.max_segment_tokens)
        self.engine.add(req.req_id, prompt_ids, max_new, forced_ids=forced)
        track.engine_held, track.engine_suspended, track.error = True, False, None
        track.max_new = max_new
        track.replans += 1
        track.segmenter, track.text = skill_set.segmenter(), self.engine.text_stream()
        gen.prompt_ids, gen.output_ids, gen.text = list(prompt_ids), [], ""
        gen.seg_token_start = gen.seg_text_start = 0
        gen.seg_gen_started, gen.prefilled, gen.finished_generating = None, False, False
        gen.prefill_left = self._prefill_left(req.req_id, len(prompt_ids))
        gen.step_times.clear()
        gen.expected_exec_end, gen.enqueued_at = t, t
        self._waiting[req.req_id] = gen
        self._set_state(gen, RequestState.QUEUED)

    def _set_state(self, gen: Generation, state: RequestState) -> None:
        if gen.state != state:
            gen.state = state
            self._events.append(StateChanged(gen.req_id, state))

    def _drain(self) -> list[Event]:
        events, self._events = self._events, []
        return events


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
