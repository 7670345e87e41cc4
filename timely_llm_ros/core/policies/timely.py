"""TimelyLLM: PUD priority (Eq. 4) recomputed at every pick, latency-guided admission, hopeless-request drop.

    Pri(s_k, t) = U / (G * L)
    U = TUF_0(max(t + G + d, S) - arrival)   for k = 0   (d = network delay to the robot)
        TUF_1(t + G + d - E)                 for k > 0   (E = expected, then actual, end of the previous execution)
    L = deadline - t,  deadline = max(arrival + ERT, S) (k = 0) or E (k > 0)
    G = profiled mean generation time of one segment of this robot type
    S = the earliest start of the plan on its robot: the expected end of the plans ahead of it there (a robot runs
        one plan at a time, core/execution); no bound while the robot is free for it

Well-definedness (the paper is silent): L is floored at G (a segment cannot be ready sooner than G, so every
late segment counts as "due now"), and U at utility_floor * beta (> 0) so that segments that can no longer earn
utility keep a finite, small, positive priority, ordered by their slack; they are still served, after those that
can. A later segment (never dropped: its robot is mid-plan) ages past the floor instead: L keeps shrinking as
G^2 / (G + tau), tau = time since its TUF_1 reached the floor, so it outranks every fresh segment of its class after
tau = G (1 / utility_floor - 1) and cannot starve behind new arrivals. A first segment whose TUF_0 would be <= 0
even if generated now is dropped (option drop="hopeless", the default; "never" keeps it); the scheduler reports it
as DROPPED. Later segments are never dropped: the robot is mid-plan. A request whose urgency class serves late
plans (``late: serve``) is never dropped either: its first segment keeps the floor priority (it does not age), so
it is planned with what the engine has left once the requests that can still earn utility are served, and never
takes the engine from them (benchmarks/late_or_drop.py: an aging first segment took it from urgent requests).

Admission is prefill-aware (core/admission.py step_verdict): the most urgent member's WCET counts the prefill work
a candidate adds, and a step carries at most step_prefill_s of prefill work whoever asks, except the first wave of
a crowd of first segments planned by crowd_plan (the summed predicted utility of successive waves, see _first_wave).

Preemption at any token (option preempt, default on): when the best waiting generation w outranks running ones and
either the batch is full or w would miss its segment deadline next to them, running generations that rank below
w and can afford to wait for w's segment (budget - own WCET > WCET(w)) are left out of the batch, lowest priority
first, until w fits; the scheduler suspends them mid-segment (KV kept) and they resume token-exact later.

Prefill steps alone (option prefill_alone, default on; the ablation timely-mixed-steps turns it off): on an engine that
runs a step's decode pass after its prefill forwards (transformers, the simulator; not vLLM's fused steps), a step that
prefills and also decodes makes its new members wait for a decode pass they are not in (t_dec(D), D members already
prefilled, ~t_1: most of a decode step is the fixed part). Ending the step after the prefills and decoding everyone
in the next step gains the new members that pass and costs the D members t_dec(B) - t_dec(D) (B = the whole batch),
a few ms. The chosen batch is checked with this cost model: if its predicted utility (ready_utility, summed) is
higher with the prefills alone, the step prefills alone and the others are suspended for it (KV kept). On by default
since it passed a check planned before it ran (held-out seeds 31-60); its measurements on the 4090 profile and
through the ROS server on the embedded planner are in docs/record.md ("Prefill steps alone on the embedded planner").

Interrupts (option interrupt, default on; the ablation timely-nointerrupt turns it off; Policy.interrupts): a request
that arrives while an engine step runs and that Eq. 4 ranks above every member of that step ends the step at the next
decoder layer, on engines that check between layers (transformers, the simulator; not vLLM). Preemption at any
token acts between steps; this acts inside one, so an urgent arrival no longer waits for a normal prefill step (up
to step_prefill_s) or a long decode step in flight. The cut-short forward is lost work for its members.

Options: segment_gen_time_s {robot_type: s}, online_gen_time (G tracks measured segments), max_segment_tokens
{robot_type: n}, network_delay_s, token_time_s (batch-1 decode step assumed before one is measured), decode_seq_ratio
(r: a decode step of B sequences takes t_1 * (1 + r (B - 1))), prefill_token_s and prefill_step_s (used always
when given, unless fixed_prefill is false: then assumed until a prefill is measured; the server's hardware fit,
core/fit.py, gives these, G and expected_segment_tokens / expected_first_segment_tokens {robot_type: n}, the
segment lengths assumed before any is seen),
adaptive (latency-guided admission on top of max_batch; False = fixed cap only), prefill_aware (False: the paper's
decode-only WCET), preempt, admit_when_late, step_prefill_s (prefill work a step may carry, at least one prompt or
chunk: 0.1 s = half the urgent class's 0.2 s ERT, so an arrival that waits one whole step keeps half its ERT),
admit_per_step (prefills joining per step; 0 = no count limit), step_reloads (KV reloads of generations coming back from
host memory count in that per-step work too; default on), segment_estimate ("mean": admission assumes the expected
segment length, the default with the utility test; "max": the worst case, the default with the deadline test),
crowd_plan (plan crowds of first segments in waves; default on with the utility test), interrupt, crowd_objective ("utility";
"served": most members served with positive utility first), crowd_promise (a split's deferred members keep their place;
both off by default: ablations), prefill_alone, utility_floor, drop.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any, Mapping, Sequence

from ..admission import (REFUSED, StepCost, batch_prefill_s, budget_s, kv_need_bytes, segment_deadline, wcet_in_s, prefill_tokens_left, slack_s, step_wcet_s,
                         verdict)
from ..request import Generation
from .base import Policy, SchedulingContext
from .registry import register

DEFAULT_SEGMENT_GEN_TIME_S = {"drone": 0.09, "arm": 0.16, "chat": 0.16}
DEFAULT_MAX_SEGMENT_TOKENS = {"drone": 10, "arm": 20, "chat": 20}


def _this_step(tokens: int, room: int | None) -> tuple[int, int | None]:
    """(tokens of a prompt that run in this step, chunk room left after them)."""
    if room is None:
        return tokens, None
    n = min(tokens, room)
    return n, room - n


def _add(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def _better(a: tuple[int, float], b: tuple[int, float]) -> bool:
    """a beats b: more members served with positive utility, or as many and more utility (1e-9 tolerance)."""
    return a[0] > b[0] or (a[0] == b[0] and a[1] > b[1] + 1e-9)


def _per_type(value: Any, defaults: Mapping[str, float]) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {**defaults, **{str(k): float(v) for k, v in value.items()}}
    if value is None:
        return dict(defaults)
    return {k: float(value) for k in defaults} | {"*": float(value)}


def options_from_skill_sets(skill_sets: Mapping[str, Any]) -> dict[str, Any]:
    """Per-robot-type timely options taken from loaded SkillSets: max_segment_tokens, and segment_gen_time_s
    where a skill set carries one (else the defaults above). Merge with other options before make_policy."""
    tokens = {name: int(ss.max_segment_tokens) for name, ss in skill_sets.items()}
    times = {name: float(ss.segment_gen_time_s) for name, ss in skill_sets.items()
             if getattr(ss, "segment_gen_time_s", None)}
    return {"max_segment_tokens": tokens, **({"segment_gen_time_s": times} if times else {})}


@register
class TimelyPolicy(Policy):
    """TimelyLLM segmented scheduling (see module docstring)."""

    name = "timely"

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(max_batch, options)
        o = self.options
        self.gen_time_s = _per_type(o.get("segment_gen_time_s"), DEFAULT_SEGMENT_GEN_TIME_S)
        self.max_segment_tokens = {k: int(v) for k, v in
                                   _per_type(o.get("max_segment_tokens"), DEFAULT_MAX_SEGMENT_TOKENS).items()}
        self.network_delay_s = float(o.get("network_delay_s", 0.008))
        self.token_time_s = float(o.get("token_time_s", 0.022))  # decode s/token before one is measured
        self.adaptive = bool(o.get("adaptive", True))
        self.online_gen_time = bool(o.get("online_gen_time", False))
        self._configured_gen_time = dict(self.gen_time_s)
        self.prefill_aware = bool(o.get("prefill_aware", True))
        self.preempt = bool(o.get("preempt", True))
        self.online_segment_tokens = bool(o.get("online_segment_tokens", True))
        self.admit_pressing = bool(o.get("admit_pressing", False))
        self.admission = str(o.get("admission", "utility"))
        self.remaining_g = bool(o.get("remaining_g", True))
        self.step_reloads = bool(o.get("step_reloads", True))
        feedback = str(o.get("feedback", "closed"))
        if feedback not in ("closed", "open"):
            raise ValueError(f"timely: feedback must be 'closed' or 'open', got {feedback!r}")
        self.uses_feedback = feedback == "closed"
        if self.admission not in ("utility", "deadline"):
            raise ValueError(f"timely: admission must be 'utility' or 'deadline', got {self.admission!r}")
        # given prefill figures are used always (a latency model's), unless fixed_prefill is false: then they are
        # what admission assumes until the scheduler has measured a prefill (the server's hardware fit)
        self._fixed_prefill = bool(o.get("fixed_prefill", "prefill_token_s" in o))
        self.prefill_step_s = float(o.get("prefill_step_s", 0.0141 if self._fixed_prefill else 0.0))
        # segment lengths assumed before any is seen, per robot type (the hardware fit: its worked examples')
        self.expected_segment_tokens = {str(k): int(v) for k, v in (o.get("expected_segment_tokens") or {}).items()}
        self.expected_first_segment_tokens = {str(k): int(v) for k, v in
                                              (o.get("expected_first_segment_tokens") or {}).items()}
        self._seg_tokens: dict[str, deque] = {}
        self._first_tokens: dict[str, deque] = {}
        # the utility test weighs predicted utilities: expected segment lengths; the deadline test is a WCET bound
        self.segment_estimate = str(o.get("segment_estimate", "mean" if self.admission == "utility" else "max"))
        if self.segment_estimate not in ("mean", "max"):
            raise ValueError(f"timely: segment_estimate must be 'mean' or 'max', got {self.segment_estimate!r}")
        self.late_delay_s = float(o.get("late_delay_s", 0.01))  # delay a join may add to a late member
        self.decode_seq_ratio = float(o.get("decode_seq_ratio", 0.07))
        self.prefill_token_s = float(o.get("prefill_token_s", 1.6e-4))  # measured one (c amortised) used if unset
        self.admit_when_late = bool(o.get("admit_when_late", True))
        self.admit_per_step = int(o.get("admit_per_step", 0))  # prefills joining per step (0: no count limit)
        self.step_prefill_s = float(o.get("step_prefill_s", 0.1))  # prefill work per step (at least one prompt)
        self.crowd_plan = bool(o.get("crowd_plan", self.admission == "utility"))  # crowds: waves planned by utility
        # "utility": the plan maximises summed predicted utility; "served": first the number of members served with
        # positive predicted utility, then summed utility (a drop only when no plan serves the member)
        self.crowd_objective = str(o.get("crowd_objective", "utility"))
        if self.crowd_objective not in ("utility", "served"):
            raise ValueError(f"timely: crowd_objective must be 'utility' or 'served', got {self.crowd_objective!r}")
        self.crowd_promise = bool(o.get("crowd_promise", False))  # members a split deferred keep their place
        self.prefill_alone = bool(o.get("prefill_alone", True))     # a prefill step may leave the decode pass out
        self._promised: dict[str, float] = {}   # req_id -> when a plan deferred it to a later wave
        self.utility_floor = float(o.get("utility_floor", 0.05))
        self.drop = str(o.get("drop", "hopeless"))
        if self.drop not in ("hopeless", "never"):
            raise ValueError(f"timely: drop must be 'hopeless' or 'never', got {self.drop!r}")
        if not 0.0 < self.utility_floor < 1.0:
            raise ValueError(f"timely: utility_floor must be in (0, 1), got {self.utility_floor}")

    def forget(self, req_id: str) -> None:
        self._promised.pop(req_id, None)

    @property
    def preempts_running(self) -> bool:
        """Preemption at any token: the latency-guided pick leaves running generations out (not the fixed cap)."""
        return self.preempt and self.adaptive

    def observe_segment(self, robot_type: str, gen_time_s: float) -> None:
        """Option online_gen_time: G follows the measured segment generation time (EMA, weight 0.2), so the
        priorities fit whatever engine and model serve them instead of a profile made elsewhere."""
        if self.online_gen_time and gen_time_s > 0:
            old = self.segment_time(robot_type)
            self.gen_time_s[robot_type] = 0.8 * old + 0.2 * gen_time_s

    def segment_time(self, robot_type: str) -> float:
        """G: profiled mean generation time of one segment."""
        return self.gen_time_s.get(robot_type, self.gen_time_s.get("*", 0.1))

    def segment_tokens(self, gen: Generation) -> int:
        """Tokens of one segment of gen's robot type that admission assumes, never above the configured maximum.
        Option segment_estimate "mean" (default with admission "utility"): the expected length, the mean of the
        last 32 segments of that type seen, before any is seen the profiled segment time G over the batch-1 token
        time (G is the mean time of a segment, so this is its mean token count); "max" (default with admission
        "deadline"): the longest of the last 32 seen (a worst case, the earlier rule), the maximum before any.
        online_segment_tokens False: always the maximum."""
        rt = gen.req.robot_type
        cap = self.max_segment_tokens.get(rt, self.max_segment_tokens.get("*", 20))
        if not self.online_segment_tokens:
            return cap
        recent = self._seg_tokens.get(rt)
        if self.segment_estimate == "max":
            return min(cap, max(recent)) if recent else cap
        if recent:
            mean = sum(recent) / len(recent)
        elif rt in self.expected_segment_tokens:
            mean = self.expected_segment_tokens[rt]
        else:
            mean = self._configured_gen_time.get(rt, self._configured_gen_time.get("*", 0.1)) / self.token_time_s
        return max(1, min(cap, math.ceil(mean)))

    def observe_segment_tokens(self, robot_type: str, tokens: int, first: bool = False, urgency: str = "") -> None:
        if tokens > 0:
            self._seg_tokens.setdefault(robot_type, deque(maxlen=32)).append(tokens)
            if first:
                self._first_tokens.setdefault((robot_type, urgency), deque(maxlen=32)).append(tokens)

    def first_segment_tokens(self, gen: Generation) -> int:
        """Expected token count of gen's first segment (the crowd plan's estimate): the mean of the last 32 first
        segments of its robot type and urgency class (a plan's first step depends on both: an urgent first reaction is
        short, a routine plan's opening step longer, and later segments differ again); before any is seen option
        expected_first_segment_tokens of its robot type, else segment_tokens. Never above the configured maximum."""
        rt = gen.req.robot_type
        recent = self._first_tokens.get((rt, gen.req.urgency))
        if not recent and rt not in self.expected_first_segment_tokens:
            return self.segment_tokens(gen)
        mean = sum(recent) / len(recent) if recent else self.expected_first_segment_tokens[rt]
        cap = self.max_segment_tokens.get(rt, self.max_segment_tokens.get("*", 20))
        return max(1, min(cap, math.ceil(mean)))

    def _segment_length(self, gen: Generation) -> int:
        """Tokens the plans assume for gen's current segment: a first segment's own mean, else any segment's."""
        return self.first_segment_tokens(gen) if gen.k == 0 else self.segment_tokens(gen)

    def utility_if_started(self, gen: Generation, now: float, gen_time_s: float | None = None) -> float:
        """TUF_0 / TUF_1 of the current segment if its generation starts now (unclamped)."""
        req = gen.req
        g = self.segment_time(req.robot_type) if gen_time_s is None else gen_time_s
        ready = now + g + self.network_delay_s
        if gen.k == 0 or gen.expected_exec_end is None:
            return req.tuf(gen.first_start(ready) - req.arrival)
        return req.tuf.resumed(ready - gen.expected_exec_end)

    def remaining_time(self, gen: Generation) -> float:
        """G(s_k) of the part of the segment still to generate: G for a segment not started, else the share of
        its (assumed) tokens left, so a half-generated segment is not ranked like a fresh one."""
        g = self.segment_time(gen.req.robot_type)
        done = gen.tokens_in_segment if gen.prefilled else 0
        if done <= 0 or not self.remaining_g:
            return g
        tokens = self.segment_tokens(gen)
        return g * max(tokens - done, 1) / max(tokens, done + 1)

    def priority(self, gen: Generation, now: float) -> float:
        req = gen.req
        g = self.remaining_time(gen)
        if gen.k == 0 or gen.expected_exec_end is None:
            # the robot cannot start it before it is free of the plans ahead of this one (earliest_start)
            u = req.tuf(gen.first_start(now + g + self.network_delay_s) - req.arrival)
            slack = gen.first_start(req.arrival + req.tuf.ert) - now
        else:
            e = gen.expected_exec_end
            u = req.tuf.resumed(now + g + self.network_delay_s - e)
            slack = e - now
        floor = self.utility_floor * req.tuf.beta
        if u >= floor:
            return u / (g * max(slack, g))
        if gen.k > 0 and req.tuf.alpha < 0:
            # A later segment is never dropped (its robot is mid-plan) but once TUF_1 hits the floor its rank
            # would stop rising, below every fresh request, which starved it under load. Past the floor it
            # ages: its slack keeps shrinking (L = G^2 / (G + tau), tau = time past the floor), so its
            # priority rises with waiting like a fresh request's does, and it outranks any fresh segment of
            # its class (at most beta / G^2) once tau >= G (1 / utility_floor - 1).
            tau = (now + g + self.network_delay_s - gen.expected_exec_end) - (req.tuf.beta - floor) / -req.tuf.alpha
            return floor * (1.0 + max(tau, 0.0) / g) / (g * g)
        return floor / (g * max(slack, g))

    def should_drop(self, gen: Generation, now: float) -> str | None:
        if self.drop == "never" or gen.k > 0 or not self.may_drop(gen):
            return None
        # optimistic G (the configured profile, or less if measured faster): an online G inflated by a burst
        # must not drop a request that could still make it
        rt = gen.req.robot_type
        g = min(self.segment_time(rt), self._configured_gen_time.get(rt, self.segment_time(rt)))
        u = self.utility_if_started(gen, now, g)
        if u <= 0:
            waited = now - gen.req.arrival
            return (f"dropped after waiting {waited:.2f} s: its first segment could no longer earn positive "
                    f"time utility (utility {u:.2f} if generated now)")
        return None

    def step_cost(self, ctx: SchedulingContext) -> StepCost:
        """Step-time assumptions for admission: measured on the engine where the scheduler has measured them."""
        t1 = self.token_time_s
        if ctx.decode_step_s is not None and ctx.decode_batch > 0:
            t1 = ctx.decode_step_s / (1.0 + self.decode_seq_ratio * (ctx.decode_batch - 1))
        if self._fixed_prefill or ctx.prefill_token_s is None:
            return StepCost(t1, self.decode_seq_ratio, self.prefill_token_s, ctx.step_token_budget, self.prefill_step_s)
        return StepCost(t1, self.decode_seq_ratio, ctx.prefill_token_s, ctx.step_token_budget)

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        now = ctx.now
        if not waiting:
            return list(running)
        scored = heapq.nlargest(self.max_batch, ((self.priority(g, now), -i, g) for i, g in enumerate(waiting)))
        ranked = [g for _, _, g in scored]
        if not self.adaptive:
            return self._fixed(list(running), ranked, ctx)
        cost = self.step_cost(ctx)
        prio = {id(g): self.priority(g, now) for g in running}
        prio.update((id(g), p) for p, _, g in scored)
        live = {id(g) for g in running}
        if self.preempt:   # everyone competes by priority: a running generation that does not fit is left out
            order = sorted([*running, *ranked], key=lambda g: -prio[id(g)])
        else:
            order = [*running, *ranked]
        batch: list[Generation] = []
        kv_free = ctx.kv_free_bytes
        room = None if cost.step_token_budget is None else max(
            cost.step_token_budget - sum(1 for g in order if g.prefilled and id(g) in live), 0)
        work, prefills = 0.0, 0
        cap, wave, crowd = self.step_prefill_s, None, self._crowd(ranked, waiting, now) if self.crowd_plan else []
        if crowd and self.crowd_promise:
            order = self._crowd_where_its_best_ranks(order, crowd, prio, now)
        for gen in order:
            if wave is None and crowd and gen is crowd[0]:   # the plan weighs the members admitted so far
                wave = self._first_wave(batch, crowd, now, cost)
                cap = max(cap, sum(prefill_tokens_left(g) * cost.prefill_token_s + g.reload_s
                                   for g in crowd if id(g) in wave))
            running_now = id(gen) in live
            kept = running_now and not self.preempt
            if not kept:
                if len(batch) >= self.max_batch:
                    continue
                need = kv_need_bytes(gen, ctx.kv_bytes_per_token)
                if batch and need > kv_free:
                    continue
                if batch and not (wave and id(gen) in wave) and not self._admissible(batch, gen, now, cost):
                    continue
            n, left = 0, room
            # the step's prefill and KV-reload work stays short whoever asks (a crowd sharing one deadline, or
            # arms coming back from host memory together), so that a request arriving meanwhile waits at most
            # one short step; a KV reload is as unpreemptible as a prefill (option step_reloads)
            extra = gen.reload_s if (self.step_reloads and not running_now) else 0.0
            if not gen.prefilled:
                n, left = _this_step(prefill_tokens_left(gen), room)
                extra += n * cost.prefill_token_s
            if not kept and (
                    (not gen.prefilled and n == 0 and prefill_tokens_left(gen) > 0)
                    or (extra > 0.0 and work > 0 and work + extra > cap)
                    or (not gen.prefilled and 0 < self.admit_per_step <= prefills)):
                continue
            work += extra
            prefills += 0 if gen.prefilled else 1
            if not running_now:
                kv_free -= kv_need_bytes(gen, ctx.kv_bytes_per_token)
            room = left
            batch.append(gen)
        if self.prefill_alone and self.preempt and room is None and not ctx.fused_steps:
            batch = self._prefills_alone_if_better(batch, now, cost)
        # a chunked engine spends its prefill budget in batch order: the most urgent prompt first
        return [g for g in batch if g.prefilled] + sorted((g for g in batch if not g.prefilled),
                                                          key=lambda g: -prio[id(g)])

    def _prefills_alone_if_better(self, batch: list[Generation], now: float, cost: StepCost) -> list[Generation]:
        """Option prefill_alone: the batch's members still to prefill alone if that earns more predicted utility
        than the step with its decode pass (see the module docstring); else the batch. A waiting generation
        already prefilled (one coming back from suspension) leaves its reload work out too."""
        new = [g for g in batch if not g.prefilled]
        others = [g for g in batch if g.prefilled]
        if not new or not others:
            return batch
        size = len(batch)
        t_b = cost.decode_s(size)
        mixed_step = batch_prefill_s(batch, cost) + cost.decode_s(len(others))
        alone_step = batch_prefill_s(new, cost)

        def tokens_left(g: Generation) -> int:
            n = self._segment_length(g)
            return n if not g.prefilled else max(n - g.tokens_in_segment, 1)

        mixed = sum(self.ready_utility(g, now + mixed_step + (tokens_left(g) - 1) * t_b) for g in batch)
        alone = (sum(self.ready_utility(g, now + alone_step + (tokens_left(g) - 1) * t_b) for g in new)
                 + sum(self.ready_utility(g, now + alone_step + tokens_left(g) * t_b) for g in others))
        return new if alone > mixed + 1e-9 else batch

    def _crowd(self, ranked: Sequence[Generation], waiting: Sequence[Generation] = (),
               now: float = 0.0) -> list[Generation]:
        """Option crowd_plan: the waiting first segments (not prefilled) of the top-ranked one's urgency class, in
        rank order, at most 8; empty if fewer than two. Option crowd_promise: the members an earlier plan deferred
        to a later wave (see _first_wave) come first, earliest deferred first, wherever they rank, while they can
        still earn utility if generated now."""
        firsts = [g for g in ranked if g.k == 0 and not g.prefilled]
        crowd = [g for g in firsts if firsts and g.req.tuf == firsts[0].req.tuf]
        if self.crowd_promise:
            pool = {g.req.req_id: g for g in waiting if g.k == 0 and not g.prefilled}
            self._promised = {r: t for r, t in self._promised.items() if r in pool}
            kept = sorted((r for r in self._promised if crowd and pool[r].req.tuf == crowd[0].req.tuf
                           and self.utility_if_started(pool[r], now) > 0.0), key=lambda r: self._promised[r])
            crowd = [pool[r] for r in kept] + [g for g in crowd if g.req.req_id not in self._promised]
        crowd = crowd[:8]
        return crowd if len(crowd) >= 2 else []

    def _crowd_where_its_best_ranks(self, order: list[Generation], crowd: list[Generation], prio: dict[int, float],
                                    now: float) -> list[Generation]:
        """Option crowd_promise: members a split deferred may rank low, so the whole crowd moves, in its own order,
        to where its best-ranked member would stand in ``order`` (``prio`` gains the members it lacked)."""
        prio.update((id(g), self.priority(g, now)) for g in crowd if id(g) not in prio)
        members, top = {id(g) for g in crowd}, max(prio[id(g)] for g in crowd)
        rest = [g for g in order if id(g) not in members]
        at = next((i for i, g in enumerate(rest) if prio[id(g)] < top), len(rest))
        return rest[:at] + list(crowd) + rest[at:]

    def _score(self, utilities: Sequence[float]) -> tuple[int, float]:
        """What the crowd plan maximises: (members served with positive utility, summed utility) with
        crowd_objective "served" (lexicographic), (0, summed utility) with "utility"."""
        served = sum(1 for u in utilities if u > 0.0) if self.crowd_objective == "served" else 0
        return served, sum(utilities)

    def _first_wave(self, batch: Sequence[Generation], crowd: Sequence[Generation], now: float,
                    cost: StepCost) -> set[int]:
        """Option crowd_plan: ids of the crowd's members (rank order) this step should prefill, joining batch (the
        members admitted so far, all ranked above). The crowd is served in successive waves: a wave prefills its
        prompts in one step, then decodes its first segments (the step completing a prompt yields the first
        token, first_segment_tokens - 1 decode steps follow), the next wave starts when it is done, and whoever
        no wave reaches is dropped. The first wave shares its step with batch, whose members' predicted
        utilities count with the delay it causes them (without a first wave, the crowd starts when their
        current segments are done). The plan maximises the summed predicted utility (ready_utility, the
        admission's cost model; with crowd_objective "served" first the number served with positive utility) exactly
        over the wave sizes. This replaces, for the planned members, the
        pairwise utility test (which cannot see that the crowd waiting behind a candidate also loses when it
        waits) and the fixed per-step prefill cap."""
        n = len(crowd)
        tokens = [max(self.first_segment_tokens(g) - 1, 1) for g in crowd]

        def wave_s(i: int, k: int) -> float:     # a later wave of crowd[i:i + k] on its own
            pre = batch_prefill_s(crowd[i:i + k], cost)
            return max(wcet_in_s(g, t, pre, k, cost) for g, t in zip(crowd[i:i + k], tokens[i:i + k]))

        memo: dict[tuple[int, float], tuple[tuple[int, float], int]] = {}
        nobody = (0, 0.0)

        def value(i: int, t: float) -> tuple[int, float]:   # best score of crowd[i:] served in waves from now + t
            key = (i, round(t, 6))
            if i >= n:
                return nobody
            if key not in memo:
                top, top_k = nobody, 0           # serve nobody from i on (they are dropped)
                for k in range(1, n - i + 1):
                    end = t + wave_s(i, k)
                    got = [self.ready_utility(g, now + end) for g in crowd[i:i + k]]
                    if sum(got) <= 0.0:
                        break
                    score = _add(self._score(got), value(i + k, end))
                    if _better(score, top):
                        top, top_k = score, k
                memo[key] = (top, top_k)
            return memo[key][0]

        pre_b, size_b = batch_prefill_s(batch, cost), len(batch)
        own = [self._segment_length(m) for m in batch]
        done = max((wcet_in_s(m, t, pre_b, size_b, cost) for m, t in zip(batch, own)), default=0.0)
        best_k, best, best_end = 0, (-1, -1.0), done     # with an empty batch the first wave starts now
        if batch:                                # else the crowd waits for the batch's current segments
            best = _add(self._score([self.ready_utility(m, now + wcet_in_s(m, t, pre_b, size_b, cost))
                                     for m, t in zip(batch, own)]), value(0, done))
        for k in range(1, n + 1):
            pre = batch_prefill_s([*batch, *crowd[:k]], cost)
            end = max(wcet_in_s(g, t, pre, size_b + k, cost) for g, t in zip(crowd[:k], tokens[:k]))
            got = [self.ready_utility(g, now + end) for g in crowd[:k]]
            got += [self.ready_utility(m, now + wcet_in_s(m, t, pre, size_b + k, cost)) for m, t in zip(batch, own)]
            total = _add(self._score(got), value(k, end))
            if _better(total, best):
                best_k, best, best_end = k, total, end
        if self.crowd_promise and best_k:       # a split: the members planned into later waves keep their place
            i, t = best_k, best_end
            while i < n and (i, round(t, 6)) in memo and memo[i, round(t, 6)][1]:
                k = memo[i, round(t, 6)][1]
                t += wave_s(i, k)
                for g in crowd[i:i + k]:
                    if self.ready_utility(g, now + t) > 0.0:
                        self._promised.setdefault(g.req.req_id, now)
                i += k
        return {id(g) for g in crowd[:best_k]}

    def _admissible(self, batch: list[Generation], gen: Generation, now: float, cost: StepCost) -> bool:
        """gen may join batch (all higher in priority) unless a member's prefill-aware WCET with gen reaches its
        segment deadline, or makes an already late member's WCET exceed its WCET alone by
        more than late_delay_s; the paper's decode-only rule if not
        prefill_aware."""
        if not self.prefill_aware:
            return verdict(batch, gen, now, self.segment_tokens, self.token_time_s, self.admit_when_late) != REFUSED
        joined = [*batch, gen]
        if self.admission == "utility":
            return self._worth_joining(batch, gen, now, cost)
        if self.admit_pressing:
            own = budget_s(gen, now)
            if all(own < budget_s(m, now) + step_wcet_s(gen, [gen], self.segment_tokens(gen), cost) for m in batch):
                return True        # as urgent as every member: holding it back trades one miss for another
        for m in batch:
            tokens = self.segment_tokens(m)
            after = step_wcet_s(m, joined, tokens, cost)
            slack = slack_s(m, now)
            if slack > 0:
                if after >= slack:
                    return False   # gen would make it (or keep it) miss its deadline
            elif after - step_wcet_s(m, [m], tokens, cost) > self.late_delay_s:
                return False       # late: every delay costs it utility (below 0 too): batch mates may add
                                   # at most late_delay_s in all (resumes that need no prefill, a few at most)
        return True

    def ready_utility(self, gen: Generation, ready: float) -> float:
        """Utility (TUF_0 or TUF_1) of gen's current segment if it is ready at time ready, at least 0: a first
        segment that would earn less is better dropped, which counts about 0."""
        req = gen.req
        t = ready + self.network_delay_s
        if gen.k == 0 or gen.expected_exec_end is None:
            return max(req.tuf(gen.first_start(t) - req.arrival), 0.0)
        return max(req.tuf.resumed(t - gen.expected_exec_end), 0.0)

    def _worth_joining(self, batch: list[Generation], gen: Generation, now: float, cost: StepCost) -> bool:
        """Utility test: join if the members' and gen's predicted utilities together are at least those of the
        batch without gen plus gen's after it waits for the members it would delay (then runs on its own)."""
        pre, size = batch_prefill_s(batch, cost), len(batch)
        own = prefill_tokens_left(gen)
        first = own and not any(prefill_tokens_left(m) for m in batch)   # the step's fixed prefill cost is new
        pre_joined = pre + own * cost.prefill_token_s + gen.reload_s + (cost.prefill_step_s if first else 0.0)
        with_gen = self.ready_utility(gen, now + wcet_in_s(gen, self.segment_tokens(gen), pre_joined, size + 1, cost))
        if with_gen <= 0.0 and gen.k == 0 and self.drop != "never" and self.may_drop(gen):
            return False           # it would be served at a loss: leave it to the drop rule
        without, wait = 0.0, 0.0
        for m in batch:
            tokens = self.segment_tokens(m)
            before = wcet_in_s(m, tokens, pre, size, cost)
            u_before = self.ready_utility(m, now + before)
            u_after = self.ready_utility(m, now + wcet_in_s(m, tokens, pre_joined, size + 1, cost))
            with_gen += u_after
            without += u_before
            if u_after < u_before:
                wait = max(wait, before)
        if wait == 0.0:
            return True            # nobody loses anything
        alone = step_wcet_s(gen, [gen], self.segment_tokens(gen), cost)
        return with_gen >= without + self.ready_utility(gen, now + wait + alone)

    def _fixed(self, batch: list[Generation], ranked: list[Generation], ctx: SchedulingContext) -> list[Generation]:
        budget = ctx.kv_free_bytes
        for gen in ranked:
            if len(batch) >= self.max_batch:
                break
            need = kv_need_bytes(gen, ctx.kv_bytes_per_token)
            if batch and need > budget:
                break
            budget -= need
            batch.append(gen)
        return batch


@register
class TimelyOpenLoop(TimelyPolicy):
    """Ablation: timely with E from execution-time estimates only (the executor's start/finish reports ignored)."""

    name = "timely-open-loop"

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(max_batch, {**(options or {}), "feedback": "open"})


@register
class TimelyMixedSteps(TimelyPolicy):
    """Ablation: timely with option prefill_alone off: a step that prefills always carries the decode pass too."""

    name = "timely-mixed-steps"

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(max_batch, {**(options or {}), "prefill_alone": False})


@register
class TimelyNoInterrupt(TimelyPolicy):
    """Ablation: timely with option interrupt off: a request that arrives during an engine step waits for its end."""

    name = "timely-nointerrupt"

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(max_batch, {**(options or {}), "interrupt": False})


@register
class EdfAdmit(TimelyPolicy):
    """Ablation: timely's admission, preemption and drop rule with EDF order (segment deadline) instead of Eq. 4."""

    name = "edf-admit"

    def priority(self, gen: Generation, now: float) -> float:
        return -segment_deadline(gen)


@register
class FcfsAdmit(TimelyPolicy):
    """Ablation: timely's admission, preemption and drop rule with FCFS order (request arrival) instead of Eq. 4."""

    name = "fcfs-admit"

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival
