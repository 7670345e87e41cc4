"""EngineLoop: the generation side of the PlanScheduler (core/scheduler.py), one batched engine step at a time.

Each step drops hopeless waiting generations (the policy's rule), lets the policy pick a batch, runs it, measures
the step (decode time, prefill cost per token, the loop's own time per step) and takes each member's token: text,
executable segments (its robot type's segmenter), suspension after a segment (segmented policies), completion.
What a new segment, a finished or invalid plan and a drop mean for the request is the scheduler's (the hooks
below).
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from timely_llm_ros.core.engine import Engine, EngineError
from timely_llm_ros.core.engine import TextStream
from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState
from timely_llm_ros.core.step_trace import StepRecord

Clock = Callable[[], float]
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


class EngineLoop:
    """Generations waiting and running, and the engine steps that advance them."""

    def __init__(self, engine: Engine, policy: Policy, clock: Clock) -> None:
        self.engine = engine
        self.policy = policy
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

    # ----------------------------------------------------------------- hooks (the scheduler's)
    def _new_segment(self, track: Track, parsed, t: float) -> bool:
        raise NotImplementedError

    def _invalid_plan(self, track: Track, t: float) -> None:
        raise NotImplementedError

    def _generation_done(self, track: Track, t: float, capped: bool) -> None:
        raise NotImplementedError

    def _finish(self, track: Track, state: RequestState, code: ErrorCode, message: str,
                t: float | None = None) -> None:
        raise NotImplementedError

    def _set_state(self, gen: Generation, state: RequestState) -> None:
        raise NotImplementedError

    def _drain(self) -> list:
        raise NotImplementedError

    # ----------------------------------------------------------------- queries
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

    # ----------------------------------------------------------------- the loop
    def step(self) -> list:
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
        if not batch:
            return self._drain()
        self._apply_batch(batch, now)
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
        return self._drain()

    # ----------------------------------------------------------------- internals
    def _prefill_left(self, req_id: str, default: int) -> int:
        left = self.engine.prefill_left(req_id)
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

    def _absorb(self, track: Track, token: int | None, finished: bool, elapsed: float, t: float) -> None:
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
