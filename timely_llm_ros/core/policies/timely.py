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
takes the engine from them (benchmarks/policy_choices.py late: an aging first segment took it from urgent requests).

Admission is prefill-aware (core/admission.py step_verdict): the most urgent member's WCET counts the prefill work
a candidate adds, and a step carries at most step_prefill_s of prefill work whoever asks, except the first wave of
a crowd of first segments planned by crowd_plan (the summed predicted utility of successive waves,
core/policies/timely_crowd.py). The admission tests are in core/policies/timely_admission.py.

Preemption at any token (option preempt, default on): when the best waiting generation w outranks running ones and
either the batch is full or w would miss its segment deadline next to them, running generations that rank below
w and can afford to wait for w's segment (budget - own WCET > WCET(w)) are left out of the batch, lowest priority
first, until w fits; the scheduler suspends them mid-segment (KV kept) and they resume token-exact later.

Prefill steps alone (option prefill_alone, default on; the preset timely-mixed-steps turns it off): on an engine that
runs a step's decode pass after its prefill forwards (transformers, the simulator; not vLLM's fused steps), a step that
prefills and also decodes makes its new members wait for a decode pass they are not in (t_dec(D), D members already
prefilled, ~t_1: most of a decode step is the fixed part). Ending the step after the prefills and decoding everyone
in the next step gains the new members that pass and costs the D members t_dec(B) - t_dec(D) (B = the whole batch),
a few ms. The chosen batch is checked with this cost model: if its predicted utility (ready_utility, summed) is
higher with the prefills alone, the step prefills alone and the others are suspended for it (KV kept).

Interrupts (option interrupt, default on; the preset timely-nointerrupt turns it off; Policy.interrupts): a request
that arrives while an engine step runs and that Eq. 4 ranks above every member of that step ends the step at the next
decoder layer, on engines that check between layers (transformers, the simulator; not vLLM). Preemption at any
token acts between steps; this acts inside one, so an urgent arrival no longer waits for a normal prefill step (up
to step_prefill_s) or a long decode step in flight. The cut-short forward is lost work for its members.

Options: TimelyOptions (core/policies/timely_options.py). Eq. 4, its estimators and the drop rule:
core/policies/timely_priority.py. Option order replaces Eq. 4 by EDF or FCFS order; the benchmark presets
that switch one idea off: core/policies/presets.py.
"""
from __future__ import annotations

import heapq
from typing import Any, Mapping, Sequence

from timely_llm_ros.core.admission import StepCost, kv_need_bytes, prefill_tokens_left
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.timely_admission import BatchInBuild, TimelyAdmission
from timely_llm_ros.core.policies.timely_crowd import CrowdPlanner
from timely_llm_ros.core.policies.timely_options import TimelyOptions, options_from_skill_sets
from timely_llm_ros.core.policies.timely_priority import TimelyPriority

__all__ = ["TimelyPolicy", "TimelyOptions", "options_from_skill_sets"]


def _this_step(tokens: int, room: int | None) -> tuple[int, int | None]:
    """(tokens of a prompt that run in this step, chunk room left after them)."""
    if room is None:
        return tokens, None
    n = min(tokens, room)
    return n, room - n


class TimelyPolicy(Policy):
    """TimelyLLM segmented scheduling (see module docstring), composed of its order and estimators (``rank``,
    TimelyPriority), its admission (``admission``, TimelyAdmission) and its crowd plan (``crowds``, CrowdPlanner),
    which share the one ``rank``."""

    name = "timely"
    Options = TimelyOptions

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | TimelyOptions | None = None) -> None:
        super().__init__(max_batch, options)
        self.rank = TimelyPriority(self.options)
        self.admission = TimelyAdmission(self.rank, self.options, max_batch)
        self.crowds = CrowdPlanner(self.rank, self.options)
        self.uses_feedback = self.options.feedback == "closed"
        self.crowd_plan = self.options.effective_crowd_plan
        self.step_prefill_s = self.options.step_prefill_s
        self.prefill_alone = self.options.prefill_alone

    # ------------------------------------------------------------------ the Policy interface, on the parts
    def priority(self, gen: Generation, now: float) -> float:
        return self.rank.priority(gen, now)

    def should_drop(self, gen: Generation, now: float) -> str | None:
        return self.rank.should_drop(gen, now)

    def observe_segment(self, robot_type: str, gen_time_s: float) -> None:
        self.rank.observe_segment(robot_type, gen_time_s)

    def observe_segment_tokens(self, robot_type: str, tokens: int, first: bool = False, urgency: str = "") -> None:
        self.rank.observe_segment_tokens(robot_type, tokens, first, urgency)

    def forget(self, req_id: str) -> None:
        self.crowds.forget(req_id)

    # ------------------------------------------------------------------ the estimates, as composers and tests read them
    @property
    def gen_time_s(self) -> dict[str, float]:
        """G per robot type now (the configured profile, followed online with option online_gen_time)."""
        return self.rank.gen_time_s

    @property
    def token_time_s(self) -> float:
        return self.rank.token_time_s

    @property
    def network_delay_s(self) -> float:
        return self.rank.network_delay_s

    def segment_time(self, robot_type: str) -> float:
        return self.rank.segment_time(robot_type)

    def segment_tokens(self, gen: Generation) -> int:
        return self.rank.segment_tokens(gen)

    def first_segment_tokens(self, gen: Generation) -> int:
        return self.rank.first_segment_tokens(gen)

    def utility_if_started(self, gen: Generation, now: float, gen_time_s: float | None = None) -> float:
        return self.rank.utility_if_started(gen, now, gen_time_s)

    def step_cost(self, ctx: SchedulingContext) -> StepCost:
        return self.admission.step_cost(ctx)

    def _prefills_alone_if_better(self, batch: list[Generation], now: float, cost: StepCost) -> list[Generation]:
        return self.admission.prefills_alone_if_better(batch, now, cost)

    @property
    def preempts_running(self) -> bool:
        """Preemption at any token: the latency-guided pick leaves running generations out (not the fixed cap)."""
        return self.options.preempt and self.options.adaptive

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        now = ctx.now
        if not waiting:
            return list(running)
        waiting_prio = self.rank.priorities(waiting, now)
        # the max_batch best, ties in queue order (a stable sort's)
        top = heapq.nlargest(self.max_batch, range(len(waiting)), key=waiting_prio.__getitem__)
        ranked = [waiting[i] for i in top]
        o = self.options
        if not o.adaptive:
            return self.admission.fixed(list(running), ranked, ctx)
        cost = self.admission.step_cost(ctx)
        prio = dict(zip(map(id, running), self.rank.priorities(running, now)))
        prio.update((id(waiting[i]), waiting_prio[i]) for i in top)
        live = {id(g) for g in running}
        if o.preempt:   # everyone competes by priority: a running generation that does not fit is left out
            order = sorted([*running, *ranked], key=lambda g: -prio[id(g)])
        else:
            order = [*running, *ranked]
        building = BatchInBuild(self.rank, now, cost)
        batch = building.members
        kv_free = ctx.kv_free_bytes
        room = None if cost.step_token_budget is None else max(
            cost.step_token_budget - sum(1 for g in order if g.prefilled and id(g) in live), 0)
        work, prefills = 0.0, 0
        cap, wave, crowd = o.step_prefill_s, None, self.crowds.crowd(ranked, waiting, now) if self.crowd_plan else []
        if crowd and o.crowd_promise:
            order = self.crowds.where_its_best_ranks(order, crowd, prio, now)
        for gen in order:
            if wave is None and crowd and gen is crowd[0]:   # the plan weighs the members admitted so far
                wave = self.crowds.first_wave(batch, crowd, now, cost)
                cap = max(cap, sum(prefill_tokens_left(g) * cost.prefill_token_s + g.reload_s
                                   for g in crowd if id(g) in wave))
            running_now = id(gen) in live
            kept = running_now and not o.preempt
            if not kept:
                if len(batch) >= self.max_batch:
                    continue
                need = kv_need_bytes(gen, ctx.kv_bytes_per_token)
                if batch and need > kv_free:
                    continue
                if batch and not (wave and id(gen) in wave) and not self.admission.admissible(building, gen, now, cost):
                    continue
            n, left = 0, room
            # the step's prefill and KV-reload work stays short whoever asks (a crowd sharing one deadline, or
            # arms coming back from host memory together), so that a request arriving meanwhile waits at most
            # one short step; a KV reload is as unpreemptible as a prefill (option step_reloads)
            extra = gen.reload_s if (o.step_reloads and not running_now) else 0.0
            if not gen.prefilled:
                n, left = _this_step(prefill_tokens_left(gen), room)
                extra += n * cost.prefill_token_s
            if not kept and (
                    (not gen.prefilled and n == 0 and prefill_tokens_left(gen) > 0)
                    or (extra > 0.0 and work > 0 and work + extra > cap)
                    or (not gen.prefilled and 0 < o.admit_per_step <= prefills)):
                continue
            work += extra
            prefills += 0 if gen.prefilled else 1
            if not running_now:
                kv_free -= kv_need_bytes(gen, ctx.kv_bytes_per_token)
            room = left
            building.add(gen)
        if self.prefill_alone and o.preempt and room is None and not ctx.fused_steps:
            batch = self.admission.prefills_alone_if_better(batch, now, cost)
        # a chunked engine spends its prefill budget in batch order: the most urgent prompt first
        return [g for g in batch if g.prefilled] + sorted((g for g in batch if not g.prefilled),
                                                          key=lambda g: -prio[id(g)])

