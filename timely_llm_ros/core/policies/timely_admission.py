"""TimelyLLM's admission (core/policies/timely.py): the step-time assumptions it costs with, the two tests a
candidate must pass to join a batch (utility, deadline; the paper's decode-only rule), the fixed cap without
latency-guided admission, and the choice to run a step's prefills alone.

Utility test (admission "utility", the default): a candidate joins if the members' and its predicted utilities
together are at least those of the batch without it plus its own after it waits for the members it would delay.
Deadline test ("deadline"): no member's prefill-aware WCET with the candidate may reach its segment deadline, and an
already late member may be delayed by at most late_delay_s.
"""
from __future__ import annotations

from timely_llm_ros.core.admission import (REFUSED, StepCost, batch_prefill_s, decode_steps, kv_need_bytes,
                                           prefill_tokens_left, prefill_work_s, slack_s, step_wcet_s, verdict)
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.timely_options import TimelyOptions
from timely_llm_ros.core.policies.timely_priority import TimelyPriority


class BatchInBuild:
    """The batch one pick is building, members in the order they joined, with what the utility test reads of them
    kept between candidates: each member's decode steps left in its segment (admission's segment length), the
    batch's pending prefill tokens and reload time, and, until the next member joins, each member's WCET in the
    batch and its predicted utility then. A pick tests every candidate against the same members, so these are
    worked out once per member or once per join instead of once per candidate (benchmarks/overhead.py scheduling)."""

    def __init__(self, rank: TimelyPriority, now: float, cost: StepCost) -> None:
        self.rank, self.now, self.cost = rank, now, cost
        self.members: list[Generation] = []
        self.steps: list[int] = []          # decode steps each member has left in its segment
        self.pending_tokens = 0             # prompt tokens the members still have to prefill
        self._reload_s = 0.0                # their KV reloads, summed in join order as batch_prefill_s sums them
        self._now_utilities: tuple[list[float], list[float]] | None = None

    def __len__(self) -> int:
        return len(self.members)

    def add(self, gen: Generation) -> None:
        self.members.append(gen)
        self.steps.append(decode_steps(gen, self.rank.segment_tokens(gen)))
        self.pending_tokens += prefill_tokens_left(gen)
        self._reload_s += gen.reload_s
        self._now_utilities = None

    def prefill_s(self) -> float:
        """batch_prefill_s of the members."""
        return prefill_work_s(self.pending_tokens, self._reload_s, self.cost)

    def utilities_now(self) -> tuple[list[float], list[float]]:
        """Each member's WCET in the batch as it stands (wcet_in_s) and its predicted utility when ready then."""
        if self._now_utilities is None:
            pre, step = self.prefill_s(), self.cost.decode_s(len(self.members))
            wcet = [pre + steps * step for steps in self.steps]
            self._now_utilities = wcet, [self.rank.ready_utility(m, self.now + w)
                                         for m, w in zip(self.members, wcet)]
        return self._now_utilities


class TimelyAdmission:
    """Admission for TimelyPolicy.select: the step costs and the tests, on the estimates of ``rank``."""

    def __init__(self, rank: TimelyPriority, options: TimelyOptions, max_batch: int) -> None:
        self.rank = rank
        self.options = options
        self.max_batch = max_batch

    def step_cost(self, ctx: SchedulingContext) -> StepCost:
        """Step-time assumptions for admission: measured on the engine where the scheduler has measured them."""
        t1 = self.rank.token_time_s
        if ctx.decode_step_s is not None and ctx.decode_batch > 0:
            t1 = ctx.decode_step_s / (1.0 + self.rank.decode_seq_ratio * (ctx.decode_batch - 1))
        if self.rank._fixed_prefill or ctx.prefill_token_s is None:
            return StepCost(t1, self.rank.decode_seq_ratio, self.rank.prefill_token_s, ctx.step_token_budget, self.rank.prefill_step_s)
        return StepCost(t1, self.rank.decode_seq_ratio, ctx.prefill_token_s, ctx.step_token_budget)

    def admissible(self, building: BatchInBuild, gen: Generation, now: float, cost: StepCost) -> bool:
        """gen may join batch (all higher in priority): option admission "utility", the utility test
        (worth_joining); "deadline", unless a member's prefill-aware WCET with gen reaches its segment deadline, or
        makes an already late member's WCET exceed its WCET alone by more than late_delay_s; the paper's decode-only
        rule if not prefill_aware."""
        o = self.options
        if o.prefill_aware and o.admission == "utility":
            return self.worth_joining(building, gen, now, cost)
        batch = building.members
        if not o.prefill_aware:
            return verdict(batch, gen, now, self.rank.segment_tokens, self.rank.token_time_s, o.admit_when_late) != REFUSED
        joined = [*batch, gen]
        for m in batch:
            tokens = self.rank.segment_tokens(m)
            after = step_wcet_s(m, joined, tokens, cost)
            slack = slack_s(m, now)
            if slack > 0:
                if after >= slack:
                    return False   # gen would make it (or keep it) miss its deadline
            elif after - step_wcet_s(m, [m], tokens, cost) > o.late_delay_s:
                return False       # late: every delay costs it utility (below 0 too): batch mates may add
                                   # at most late_delay_s in all (resumes that need no prefill, a few at most)
        return True

    def worth_joining(self, batch: "BatchInBuild", gen: Generation, now: float, cost: StepCost) -> bool:
        """Utility test: join if the members' and gen's predicted utilities together are at least those of the
        batch without gen plus gen's after it waits for the members it would delay (then runs on its own)."""
        rank = self.rank
        pre, size = batch.prefill_s(), len(batch.members)
        own = prefill_tokens_left(gen)
        first = own and not batch.pending_tokens   # the step's fixed prefill cost is new
        pre_joined = pre + own * cost.prefill_token_s + gen.reload_s + (cost.prefill_step_s if first else 0.0)
        step_joined = cost.decode_s(size + 1)
        gen_tokens = rank.segment_tokens(gen)
        gen_steps = decode_steps(gen, gen_tokens)
        with_gen = rank.ready_utility(gen, now + (pre_joined + gen_steps * step_joined))
        if with_gen <= 0.0 and gen.k == 0 and rank.drop != "never" and Policy.may_drop(gen):
            return False           # it would be served at a loss: leave it to the drop rule
        without, wait = 0.0, 0.0
        for m, steps, before, u_before in zip(batch.members, batch.steps, *batch.utilities_now()):
            u_after = rank.ready_utility(m, now + (pre_joined + steps * step_joined))
            with_gen += u_after
            without += u_before
            if u_after < u_before:
                wait = max(wait, before)
        if wait == 0.0:
            return True            # nobody loses anything
        # step_wcet_s of gen alone
        alone = prefill_work_s(own, gen.reload_s, cost) + gen_steps * cost.decode_s(1)
        return with_gen >= without + rank.ready_utility(gen, now + wait + alone)

    def fixed(self, batch: list[Generation], ranked: list[Generation], ctx: SchedulingContext) -> list[Generation]:
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

    def prefills_alone_if_better(self, batch: list[Generation], now: float, cost: StepCost) -> list[Generation]:
        """Option prefill_alone: the batch's members still to prefill alone if that earns more predicted utility
        than the step with its decode pass (see core/policies/timely.py); else the batch. A waiting generation
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
            n = self.rank.segment_length(g)
            return n if not g.prefilled else max(n - g.tokens_in_segment, 1)

        mixed = sum(self.rank.ready_utility(g, now + mixed_step + (tokens_left(g) - 1) * t_b) for g in batch)
        alone = (sum(self.rank.ready_utility(g, now + alone_step + (tokens_left(g) - 1) * t_b) for g in new)
                 + sum(self.rank.ready_utility(g, now + alone_step + tokens_left(g) * t_b) for g in others))
        return new if alone > mixed + 1e-9 else batch

