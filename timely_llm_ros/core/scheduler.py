"""PlanScheduler: the ROS-free loop that turns plan requests into executed segments.

It couples a Policy (which generations run in the next engine step), an Engine (one batched step at a time), each
robot type's skill-set Segmenter (when is the text so far executable), its execution-time model (when will the
robot need the next segment) and the ExecutionTracker (core/execution: each robot's plans, one at a time, and every
segment out, with its deadlines). The ROS server node and the discrete-event simulator both drive it, through the
same calls; data goes in, events come out:

    submit(request)                  a validated request arrives
    step()                           one scheduling iteration: drop hopeless waiting generations (the policy's
                                     rule), let the policy pick a batch, run one engine step, measure it (decode
                                     time, prefill cost per token, the loop's own time per step) and take each
                                     member's token (text, executable segments, suspension after a segment,
                                     completion)
    on_execution_accepted/started/finished()   the robot's executor reports real progress
    on_executor_lost(robot), check_deadlines() its executor left, or did not answer in time
    cancel(request id)

Every call returns the events it produced (core/events.py: StateChanged, QUEUED included; SegmentGenerated;
SegmentReady: send this segment to the robot now; SegmentsWithdrawn: cancel these at the robot; RequestFinished
with the measured outcome). What the engine can do (chunked prefill, fused steps, reload estimates, prompt left to
prefill) is read from its declared capabilities (core/engine.py EngineCapabilities). Single-threaded: callers
serialise calls.
"""
from __future__ import annotations

import logging
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from timely_llm_ros.core.engine import Engine, EngineError, StepResult, TextStream
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.events import (Event, RequestFinished, SegmentGenerated, SegmentReady, SegmentsWithdrawn,  # noqa: F401
                     StateChanged)
from timely_llm_ros.core.execution import ExecutionTracker, PlanPreempted, SegmentStatus
from timely_llm_ros.core.execution.plan import OUT
from timely_llm_ros.core.outcome import Progress, RequestOutcome, measure_outcome, progress_of  # noqa: F401  (re-exported)
from timely_llm_ros.core.plan_time import PlanTimeEstimator, SegmentTime
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.prompting import PromptEncoder, RawPrompts
from timely_llm_ros.core.request import MAX_PLAN_CALLS, Generation, PlanRequest, RequestState, Segment, SkillCall
from timely_llm_ros.core.scheduler_config import SchedulerConfig
from timely_llm_ros.core.skills.grammar import GrammarSpec, grammar_text
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.core.step_trace import StepRecord

Clock = Callable[[], float]
GRAMMAR_TEXTS = 1024   # grammar texts the scheduler keeps, by robot type, skill list, object list and cap
log = logging.getLogger(__name__)


@dataclass
class Track:
    """Per-request bookkeeping beyond the policy-visible Generation."""

    gen: Generation
    segmenter: object
    exec_model: object
    text: TextStream                                    # the output's text, token by token
    max_new: int = 200                                  # effective plan-length cap (tokens)
    error: tuple[ErrorCode, str] | None = None          # error to report at the end (plan kept)
    engine_held: bool = True
    replans: int = 0                                    # generations started over after a failed segment
    engine_suspended: bool = False                      # suspended in the engine (resume before its next step)
    return_value: str | None = None                     # set when a segment's return ended the plan
    preempted: bool = False                             # its robot stops it for a more urgent plan
    generation_cut: bool = False                        # ... before its generation had ended
    variables: dict = field(default_factory=dict)       # the plan's variables -> the query that set each (estimates)
    programs: dict = field(default_factory=dict)        # segment index -> (its statements, the variables before it)


class PlanScheduler:
    """Segmented plan generation under a pluggable policy (see module docstring)."""

    def __init__(self, engine: Engine, policy: Policy, skill_sets: Mapping[str, object],
                 exec_models: Mapping[str, object], clock: Clock, config: SchedulerConfig | None = None,
                 plan_rule: Callable[[str], str] = lambda robot: "queue", prompts: PromptEncoder | None = None) -> None:
        """plan_rule: each robot's rule for a second plan (queue | urgent_preempts), by agent id. prompts: the
        model's prompt format (core/prompting.py; engine/model_setup.py builds it), the raw planner format unless
        the composer says otherwise."""
        self.engine = engine
        self._policy = policy
        self.clock = clock
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
        self._tracks: dict[str, Track] = {}
        self._waiting: dict[str, Generation] = {}   # insertion-ordered: queued and suspended
        self._running: dict[str, Generation] = {}
        self.prompts: PromptEncoder = prompts if prompts is not None else RawPrompts(engine.encode)
        self.skill_sets = dict(skill_sets)
        self.exec_models = dict(exec_models)
        self.config = config or SchedulerConfig()
        self.outcomes: dict[str, RequestOutcome] = {}
        self.execution = ExecutionTracker(clock, self.config.network_delay_s, self.config.ack_timeout_s,
                                          self.config.exec_timeout_s, plan_rule,
                                          getattr(policy, "uses_feedback", True))
        self._grammars: OrderedDict[GrammarSpec, str] = OrderedDict()   # recent grammar texts by what they admit
        self.plan_time = PlanTimeEstimator(branch_aware=self.config.branch_aware)   # segments' execution times
        self._events: list[Event] = []
        # the skills each robot's executor has (its advertised status), by agent id; None: not known. A plan that
        # calls another skill stops at that statement, before it is sent (UNKNOWN_SKILL). The server sets it.
        self.robot_skills: Callable[[str], AbstractSet[str] | None] = lambda agent: None

    @property
    def policy(self) -> Policy:
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        """A policy may be replaced while the scheduler runs (the server's parameter): E follows its feedback rule."""
        self._policy = policy
        self.execution.uses_feedback = getattr(policy, "uses_feedback", True)

    # ----------------------------------------------------------------- queries
    def active(self) -> int:
        """Requests accepted and not finished (generating, waiting or executing)."""
        return len(self._tracks)

    def generations(self) -> list[Generation]:
        """Every unfinished request's generation (for state publishing)."""
        return [t.gen for t in self._tracks.values()]

    def is_running(self, req_id: str) -> bool:
        return req_id in self._running

    def busy(self) -> bool:
        """True when there is something to generate right now."""
        return bool(self._waiting or self._running)

    def interrupts_step(self, req: PlanRequest, now: float) -> bool:
        """Whether `req`, arriving at `now` while an engine step runs, should cut that step short: it is new to
        this scheduler (a request it already holds was weighed when the step was picked) and the policy says so
        (Policy.interrupts: by default, it outranks every member of the step). The engine asks this through its
        interrupt_check between decoder layers, on the thread that runs the step."""
        if not self._stepping or req.req_id in self._tracks:
            return False
        return self.policy.interrupts(Generation(req=req, prompt_ids=[], enqueued_at=now), self._stepping, now)

    def step_period_s(self) -> float | None:
        """What the policy plans a decode-only step with: the engine's time for the last one plus the loop's own
        time per step (median of recent back-to-back gaps), so a segment's predicted ready time counts every
        iteration it takes, not its forwards alone."""
        if self.decode_step_s is None:
            return None
        loop = sorted(self.loop_s)[len(self.loop_s) // 2] if self.loop_s else 0.0
        return self.decode_step_s + loop

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
        grammar = self._grammar(req)     # INVALID_TASK here, before anything of the request is held
        gen = Generation(req=req, prompt_ids=list(prompt_ids), enqueued_at=self.clock(), max_new_tokens=max_new,
                         max_segment_tokens=skill_set.max_segment_tokens)
        exec_profile = getattr(skill_set, "exec_profile", req.robot_type)
        track = Track(gen, self._segmenter(req), self.exec_models[exec_profile], self.engine.text_stream(),
                      max_new=max_new)
        forced = self.engine.encode(" " + req.forced_plan) if req.forced_plan is not None else None
        try:
            self.execution.add_plan(req.req_id, None if req.dry_run else req.agent_id, req.tuf.ert, gen,
                                    self.policy.stream_segments)
        except ValueError as exc:   # the robot's plan rule is none the tracker knows
            raise RequestError(ErrorCode.EXECUTOR_UNAVAILABLE, f"{exc}: fix the robot's plan rule") from None
        added = False
        try:
            self.engine.add(req.req_id, prompt_ids, max_new, forced_ids=forced, grammar=grammar)
            added = True
            gen.prefill_left = self._prefill_left(req.req_id, len(prompt_ids))
        except Exception as exc:    # nothing of it stays: no plan holds its robot, no engine state is left
            self._emit(self.execution.end_plan(req.req_id))
            if added:
                self.engine.release(req.req_id)
            raise RequestError(ErrorCode.GENERATION_FAILED, f"the engine could not take the request: "
                                                            f"{type(exc).__name__}: {exc}") from exc
        self._tracks[req.req_id] = track
        self._waiting[req.req_id] = gen
        self._events.append(StateChanged(req.req_id, RequestState.QUEUED, self._progress(gen)))
        return self._drain()

    def cancel(self, req_id: str, code: ErrorCode = ErrorCode.CANCELLED, message: str = "cancelled by the client") -> list[Event]:
        """Stop a request wherever it is; its engine state is freed, its segments at the robot withdrawn. Unknown
        ids are ignored."""
        track = self._tracks.get(req_id)
        if track is not None:
            state = RequestState.CANCELLED if code == ErrorCode.CANCELLED else RequestState.FAILED
            self._finish(track, state, code, message)
        return self._drain()

    def on_execution_accepted(self, req_id: str, index: int, t: float) -> list[Event]:
        """The robot accepted segment `index` at time t (its ack deadline is met)."""
        self.execution.accepted(req_id, index, t)
        return self._drain()

    def on_execution_started(self, req_id: str, index: int, t: float) -> list[Event]:
        """The robot began executing segment `index` at time t: E is recomputed from that real start."""
        self.execution.started(req_id, index, t)
        return self._drain()

    def on_execution_finished(self, req_id: str, index: int, t: float, ok: bool = True, error: str = "",
                              code: ErrorCode = ErrorCode.EXECUTION_FAILED, executed: Sequence[SkillCall] = (),
                              returned: bool = False, return_value: str = "", ended: SegmentStatus | None = None,
                              exec_time_s: float | None = None) -> list[Event]:
        """The robot finished segment `index` at time t: the real completion replaces the estimate. `executed`: the
        calls it ran; `returned`: a return statement ran in it, which ends the request DONE with `return_value`
        (the robot does not run the plan's later segments; the generation stops). `ended`: NOT_RUN or PREEMPTED when
        the robot ended it for that reason (`error` says why); `exec_time_s`: the robot's own measure of the run."""
        track = self._tracks.get(req_id)
        tracked = self.execution.segment(req_id, index)
        if track is None or tracked is None or tracked.status not in OUT:
            return self._drain()
        if not ok and ended is None and code == ErrorCode.EXECUTION_FAILED and not executed \
                and self.execution.earlier_out(req_id, index):
            # a robot runs a plan's segments in order, so one that fails having run nothing while an earlier one is
            # still out never started (an executor ending what waited, e.g. as it shuts down): the earlier one's
            # result decides, as for NOT_RUN, and the plan's failure is not blamed on this one
            ended = SegmentStatus.NOT_RUN
        if ended == SegmentStatus.NOT_RUN:
            if not self.execution.not_run(req_id, index, t, error) and not track.preempted:
                self._failed(track, tracked.seg, error or "the robot did not run it", code, t)
            self._maybe_complete(track, t)
            return self._drain()
        status = SegmentStatus.FINISHED if ok else ended if ended == SegmentStatus.PREEMPTED else SegmentStatus.FAILED
        tracked.seg.executed_skills = list(executed)
        if ok and executed and index in track.programs:    # which branches it took, how long its skills take
            program, variables = track.programs.pop(index)
            self.plan_time.observe(track.gen.req.robot_type, track.exec_model, program, variables, executed)
        self._emit(self.execution.finished(req_id, index, t, status, exec_time_s))
        if status == SegmentStatus.PREEMPTED and not track.preempted:   # stopped by a plan another server sent
            self._preempt(track, error or "the robot stopped this plan for a more urgent one", t)
        elif status == SegmentStatus.FAILED and not track.preempted:
            self._failed(track, tracked.seg, error or "executor reported failure", code, t)
        elif ok and returned:
            track.return_value = return_value
            self._finish(track, RequestState.DONE, ErrorCode.NONE, "", t)
        elif ok and not track.preempted:
            refused = self.execution.refusal_after(req_id)
            if refused is not None:
                self._failed(track, self.execution.segment(req_id, refused[0]).seg, refused[1], code, t)
        self._maybe_complete(track, t)
        return self._drain()

    def on_executor_lost(self, robot: str, t: float, message: str) -> list[Event]:
        """The robot's executor left (e.g. its process died): every segment out at it fails EXECUTOR_UNAVAILABLE."""
        self._expired(self.execution.executor_lost(robot, t, message), t)
        return self._drain()

    def check_deadlines(self) -> list[Event]:
        """Fail the segments a robot did not accept, or did not finish, in time (a pass over the due deadlines)."""
        now = self.clock()
        self._expired(self.execution.expired(now), now)
        return self._drain()

    # ----------------------------------------------------------------- the engine step
    def step(self) -> list[Event]:
        """One iteration: schedule (drop hopeless requests, let the policy pick a batch), run that batch as one
        engine step, and update every member from the step's output."""
        now = self.clock()
        batch = self._schedule(now)
        if batch:
            self._run_step(batch, now)
        return self._drain()

    def _schedule(self, now: float) -> list[Generation]:
        """Drop what the policy calls hopeless, refresh the facts admission weighs (reload cost, memory, step
        times) and put the batch the policy picks in place: preempted members suspended, chosen ones resumed. The
        batch is empty when there is nothing to run."""
        if self._last_run is not None:      # back to back with the last step: the gap is the loop's own time
            start, engine_s = self._last_run
            self.loop_s.append(max(now - start - engine_s, 0.0))
            self._last_run = None
        for gen in list(self._waiting.values()):
            reason = self.policy.should_drop(gen, now)
            if reason:
                self._finish(self._tracks[gen.req_id], RequestState.DROPPED, ErrorCode.DROPPED, reason)
        if not self.busy():
            return []
        if self.engine.capabilities.reload:
            for gen in self._waiting.values():
                gen.reload_s = self.engine.reload_s(gen.req_id) if gen.prefilled else 0.0
        for gen in self._running.values():
            gen.reload_s = 0.0   # resident: its reload was paid when it rejoined (a stale figure made admission
                                 # count it again in every later step and push urgent members out)
        mem = self.engine.memory()
        ctx = SchedulingContext(now=now, kv_free_bytes=max(0.0, mem.kv_budget_bytes - mem.kv_device_bytes),
                                kv_bytes_per_token=mem.kv_bytes_per_token, step_time_s=self.last_step_time,
                                decode_step_s=self.step_period_s(), decode_batch=self.decode_batch,
                                prefill_token_s=self.prefill_token_s,
                                step_token_budget=self.engine.capabilities.step_token_budget,
                                fused_steps=self.engine.capabilities.fused_steps)
        batch = self.policy.select(list(self._waiting.values()), list(self._running.values()), ctx)
        if batch:
            self._apply_batch(batch, now)
        return list(batch)

    def _run_step(self, batch: Sequence[Generation], now: float) -> None:
        """Run `batch` as one engine step and update every member from its output (_update_from_output); a failed
        step ends its members GENERATION_FAILED."""
        ids = [g.req_id for g in batch]
        decode_batch = sum(1 for g in batch if g.prefilled)
        decode_kv = sum(len(g.prompt_ids) + len(g.output_ids) for g in batch if g.prefilled)
        self._stepping = tuple(batch)
        try:
            result = self.engine.step(ids)
        except Exception as exc:   # EngineError, or a bug: the step's requests end, their engine state freed
            why = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, EngineError):
                log.exception("engine step failed unexpectedly")
            for gen in batch:
                self._finish(self._tracks[gen.req_id], RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                             f"engine step failed: {why}")
            return
        finally:
            self._stepping = ()
        self._update_from_output(batch, result, now, decode_batch, decode_kv)

    def _update_from_output(self, batch: Sequence[Generation], result: StepResult, now: float, decode_batch: int,
                            decode_kv: int) -> None:
        """What the step that started at `now` did: its measurements (unless an interrupt cut it short), its
        record, and each member's token taken (_absorb)."""
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
            if gen.req_id in self._running:   # an earlier member's new segment may have preempted this plan
                track = self._tracks[gen.req_id]
                try:
                    self._absorb(track, result.tokens.get(gen.req_id), gen.req_id in result.finished,
                                 result.elapsed_s, t)
                except Exception as exc:   # a bug in one request's text, segments or events ends that request only
                    log.exception(f"[{gen.req_id}] taking its token failed")
                    if gen.req_id in self._tracks:
                        self._finish(track, RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                                     f"internal error while its output was taken: {type(exc).__name__}: {exc}", t)
        if self.busy():
            self._last_run = (now, result.elapsed_s)

    def _prefill_left(self, req_id: str, default: int) -> int:
        left = self.engine.prefill_left(req_id)
        return default if left is None else left

    def _measure(self, batch: Sequence[Generation], result: StepResult) -> tuple[tuple[int, int], ...]:
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

    def _absorb(self, track: Track, token: int | None, finished: bool, elapsed: float, t: float) -> None:
        """Take one step's output for one generation: text, segments, suspension, completion."""
        gen = track.gen
        req_id = gen.req_id
        gen.seg_engine_s += elapsed
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
                gen.open_block = bool(getattr(track.segmenter, "in_block", False))
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

    # ----------------------------------------------------------------- robot side
    def _expired(self, expired: Iterable, t: float) -> None:
        for ex in expired:
            self._events.append(SegmentsWithdrawn(ex.req_id, (ex.index, *ex.later), ex.code))
            track = self._tracks.get(ex.req_id)
            if track is not None:
                if not track.preempted:
                    self._failed(track, self.execution.segment(ex.req_id, ex.index).seg, ex.message, ex.code, t)
                self._maybe_complete(track, t)

    def _emit(self, outs: Iterable) -> None:
        """The tracker's outputs: sends and withdrawals go to the caller, a preemption stops the plan's generation."""
        for out in outs:
            if isinstance(out, PlanPreempted):
                track = self._tracks.get(out.req_id)
                if track is not None:
                    self._preempt(track, out.message, self.clock())
            else:
                self._events.append(out)

    def _preempt(self, track: Track, message: str, t: float) -> None:
        """The robot stops this plan for a more urgent one: its generation stops; the request ends PREEMPTED once its
        segments at the robot have ended (DONE if nothing of it was cut: it had been generated and ran to its end)."""
        gen = track.gen
        track.preempted = True
        track.error = (ErrorCode.PREEMPTED, message)
        if not gen.finished_generating:
            track.generation_cut = True
            self._stop_generation(track)
            self._executing_if_out(track)
        self._maybe_complete(track, t)

    def _failed(self, track: Track, seg: Segment, error: str, code: ErrorCode, t: float) -> None:
        why = f"segment {seg.index} failed: {error}"
        if track.replans < self.config.replan_on_failure:
            self._replan(track, seg, why, t)
        else:
            self._finish(track, RequestState.FAILED, code, why, t)

    # ----------------------------------------------------------------- generation side: segments and plans
    def _new_segment(self, track: Track, parsed, t: float) -> bool:
        """Record an executable segment and send it if its robot may run it now; False if the request failed."""
        gen = track.gen
        try:
            times = self._segment_time(track, len(gen.segments), parsed.program, parsed.skills)
        except KeyError as exc:
            self._finish(track, RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                         f"the plan uses a skill the {gen.req.robot_type} robot does not have: {exc}", t)
            return False
        seg = Segment(index=len(gen.segments), text=parsed.text, skills=list(parsed.skills),
                      gen_started=gen.seg_gen_started if gen.seg_gen_started is not None else t,
                      gen_finished=t, est_exec_s=times.expected, worst_exec_s=times.worst)
        seg_tokens = len(gen.output_ids) - gen.seg_token_start
        gen.seg_token_start = len(gen.output_ids)
        gen.seg_text_start = len(gen.text)
        gen.seg_gen_started = None if self.policy.segmented else t  # a suspended one restarts the clock on resume
        self.policy.observe_segment(gen.req.robot_type, gen.seg_engine_s)
        gen.seg_engine_s = 0.0
        self.policy.observe_segment_tokens(gen.req.robot_type, seg_tokens, first=seg.index == 0,
                                           urgency=gen.req.urgency)
        self._add_segment(track, seg)
        return True

    def _segment_time(self, track: Track, index: int, program, calls) -> SegmentTime:
        """Segment ``index``'s expected and worst-case execution times (its statements kept to learn from its run);
        a prose segment: its calls' minimum times."""
        if not program:
            est = track.exec_model.min_time(calls)
            return SegmentTime(est, est)
        track.programs[index] = (tuple(program), dict(track.variables))
        return self.plan_time.estimate(track.gen.req.robot_type, track.exec_model, program, track.variables)

    def _add_segment(self, track: Track, seg: Segment) -> None:
        gen = track.gen
        gen.segments.append(seg)
        self._events.append(SegmentGenerated(gen.req_id, seg, self._progress(gen)))
        self._emit(self.execution.add_segment(gen.req_id, seg))

    def _segmenter(self, req: PlanRequest):
        """A fresh segmenter for one generation of ``req``: its robot type's language, the plan-call cap, and the
        skills its robot's executor has (a dry run's robot runs nothing: any skill of the set)."""
        robot_skills = None if req.dry_run else self.robot_skills(req.agent_id)
        return self.skill_sets[req.robot_type].segmenter(self.config.max_plan_calls, robot_skills)

    def prepare_grammars(self) -> None:
        """Have the engine compile each robot type's grammar for a goal that lists no objects to a robot with every
        skill of its set now (the server does at configure when it constrains decoding), not at its first goal."""
        for robot_type, skill_set in self.skill_sets.items():
            if getattr(skill_set, "mode", "") == "statements":
                cap = self.config.max_plan_calls or MAX_PLAN_CALLS
                self.engine.prepare_grammar(self._grammar_text(robot_type, (), (), cap))

    def _grammar(self, req: PlanRequest) -> str | None:
        """The grammar a request decodes under (None: unconstrained, or a prose skill set): its robot's skills, its
        objects and its call cap (core/skills/grammar.py); RequestError INVALID_TASK when no plan could be written."""
        if not req.constrained or getattr(self.skill_sets[req.robot_type], "mode", "") != "statements":
            return None
        try:
            return self._grammar_text(req.robot_type, req.skills, req.objects, req.max_calls, req.hazards,
                                      req.scene_objects, req.hazard_sides, req.fixed_places)
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_TASK, f"no {req.robot_type} plan can be written for this goal: {exc}")

    def _grammar_text(self, robot_type: str, skills: tuple[str, ...], objects: tuple[str, ...], max_calls: int,
                      hazards: tuple[str, ...] = (), scene: tuple[str, ...] = (),
                      hazard_sides: tuple[str, ...] = (), fixed: tuple[str, ...] = ()) -> str:
        """The grammar text of a plan for a robot of a statements skill set (skills: those it advertises, () = all),
        made once per distinct spec while it is among the GRAMMAR_TEXTS most recent."""
        skill_set = self.skill_sets[robot_type]
        spec = GrammarSpec.of(skill_set, skills or None, objects,
                              self.config.max_plan_tokens or skill_set.max_plan_tokens, max_calls, hazards, scene,
                              hazard_sides, fixed)
        text = self._grammars.get(spec)
        if text is None:
            text = self._grammars[spec] = grammar_text(skill_set, spec)
            while len(self._grammars) > GRAMMAR_TEXTS:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(spec)
        return text

    def _invalid_plan(self, track: Track, t: float) -> None:
        """The text can no longer be a valid plan: stop generating now instead of at the length cap, and send no
        further segment (held ones never go out; a whole-plan policy sends none). Segments already sent keep
        executing; the request then ends with INVALID_PLAN."""
        gen = track.gen
        held = self.execution.discard_held(gen.req_id)
        sent = f" (after {len(gen.segments) - held} segment(s) sent; {held} complete one(s) not sent)"
        if getattr(track.segmenter, "unknown_skills", None):
            track.error = (ErrorCode.UNKNOWN_SKILL, f"{gen.req.agent_id}: {track.segmenter.error}; the plan stopped "
                           f"before that statement{sent}: give the robot the skill, or plan with a skill set that "
                           "matches it (skills_dir)")
        else:
            track.error = (ErrorCode.INVALID_PLAN, f"the model's plan stopped parsing as {gen.req.robot_type} "
                           f"skills: {track.segmenter.error}{sent}")
        self._stop_generation(track)
        self._executing_if_out(track)
        self._maybe_complete(track, t)

    def _executing_if_out(self, track: Track) -> None:
        """Its generation stopped early: EXECUTING while segments of it are at the robot; with none out the request
        ends now (_maybe_complete), and its feedback never says executing."""
        if self.execution.outstanding(track.gen.req_id):
            self._set_state(track.gen, RequestState.EXECUTING)

    def _generation_done(self, track: Track, t: float, capped: bool) -> None:
        gen = track.gen
        self._stop_generation(track)
        if not gen.segments:
            why = (f" within the plan's {gen.token_cap}-token cap (its text stopped inside a statement or an open "
                   "block; raise the goal's max_new_tokens, or use a model that plans this robot type)") if capped \
                else ""
            self._finish(track, RequestState.FAILED, ErrorCode.GENERATION_FAILED,
                         f"the model produced no executable {gen.req.robot_type} skill{why}: "
                         f"{gen.text.strip()[:120]!r}")
            return
        tail = getattr(track.segmenter, "pending", "")
        if tail.strip() and not capped and not getattr(track.segmenter, "error", None):
            # Complete trailing statements without an action (a return such as ->'found';, or a query only it
            # uses) are in no segment (the segmenter cuts on actions). They go to the robot as the plan's last
            # segment, which evaluates them (the return value comes from there); the result's segments are the
            # texts the robot received and cover the whole plan text.
            skill_set = self.skill_sets[gen.req.robot_type]
            parsed = parse(tail, skill_set.skills, skill_set.statement_forms, max_calls=None)
            times = self._segment_time(track, len(gen.segments), parsed.program, parsed.skills)
            self._add_segment(track, Segment(index=len(gen.segments), text=tail, skills=parsed.skills, gen_started=t,
                                             gen_finished=t, est_exec_s=times.expected, worst_exec_s=times.worst))
        if capped and track.error is None:
            track.error = (ErrorCode.PLAN_TOO_LONG,
                           f"plan hit the {gen.token_cap}-token cap before it ended; executed what was complete")
        self._set_state(gen, RequestState.EXECUTING)
        self._emit(self.execution.generation_done(gen.req_id))
        self._maybe_complete(track, t)

    def _stop_generation(self, track: Track) -> None:
        """The generation ends here: out of the waiting and running sets, its engine state freed."""
        gen = track.gen
        gen.finished_generating = True
        self._running.pop(gen.req_id, None)
        self._waiting.pop(gen.req_id, None)
        if track.engine_held:
            track.engine_held = False
            try:
                self.engine.release(gen.req_id)
            except Exception:   # the request ends all the same: its goal must be answered
                log.exception(f"[{gen.req_id}] the engine could not release its generation")

    # ----------------------------------------------------------------- the end
    def _maybe_complete(self, track: Track, t: float) -> None:
        gen = track.gen
        if gen.req_id in self._tracks and gen.finished_generating and not self.execution.outstanding(gen.req_id):
            code, msg = track.error or (ErrorCode.NONE, "")
            plan = self.execution.plan(gen.req_id)
            if code == ErrorCode.PREEMPTED and not track.generation_cut and not (plan is not None and plan.cut):
                code, msg = ErrorCode.NONE, ""      # preempted after it had been generated and had run to its end
            self._finish(track, RequestState.DONE if code == ErrorCode.NONE else RequestState.FAILED, code, msg, t)

    def _finish(self, track: Track, state: RequestState, code: ErrorCode, message: str, t: float | None = None) -> None:
        gen = track.gen
        req_id = gen.req_id
        self._stop_generation(track)
        del self._tracks[req_id]
        self._emit(self.execution.end_plan(req_id))
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
        self._events.append(StateChanged(req_id, state, self._progress(gen)))
        self._events.append(RequestFinished(req_id, outcome))

    def _replan(self, track: Track, failed: Segment, why: str, t: float) -> None:
        """Start a new generation for the request after `failed` failed: its context names the failed skill (the
        tracker has withdrawn the segments behind it), the old generation's engine state is freed. The new plan's
        segments continue the request's numbering; its first one waits from t (TUF_1)."""
        gen = track.gen
        req = gen.req
        self._stop_generation(track)
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
        self.engine.add(req.req_id, prompt_ids, max_new, forced_ids=forced, grammar=self._grammar(req))
        track.engine_held, track.engine_suspended, track.error = True, False, None
        track.max_new = gen.max_new_tokens = max_new
        gen.open_block = False
        track.replans += 1
        track.segmenter, track.text = self._segmenter(req), self.engine.text_stream()
        track.variables = {}
        gen.prompt_ids, gen.output_ids, gen.text = list(prompt_ids), [], ""
        gen.seg_token_start = gen.seg_text_start = 0
        gen.seg_gen_started, gen.prefilled, gen.finished_generating = None, False, False
        gen.prefill_left = self._prefill_left(req.req_id, len(prompt_ids))
        gen.step_times.clear()
        gen.enqueued_at = t
        self.execution.regenerating(req.req_id, self.policy.stream_segments)
        self._waiting[req.req_id] = gen
        self._set_state(gen, RequestState.QUEUED)

    def _progress(self, gen: Generation) -> Progress:
        return progress_of(gen, self.clock())

    def _set_state(self, gen: Generation, state: RequestState) -> None:
        if gen.state != state:
            gen.state = state
            self._events.append(StateChanged(gen.req_id, state, self._progress(gen)))

    def _drain(self) -> list[Event]:
        events, self._events = self._events, []
        return events
