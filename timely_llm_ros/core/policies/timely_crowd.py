"""TimelyLLM's crowd plan (option crowd_plan, on with the utility test): a crowd of first segments of one urgency
class waiting together is served in successive waves whose sizes maximise the summed predicted utility (exactly,
over every split), instead of the pairwise utility test (which cannot see that the crowd waiting behind a candidate
also loses when it waits) and the fixed per-step prefill cap."""
from __future__ import annotations

from typing import Sequence

from timely_llm_ros.core.admission import StepCost, batch_prefill_s, decode_steps, prefill_tokens_left, prefill_work_s
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.timely_options import TimelyOptions
from timely_llm_ros.core.policies.timely_priority import TimelyPriority


def _add(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def _better(a: tuple[int, float], b: tuple[int, float]) -> bool:
    """a beats b: more members served with positive utility, or as many and more utility (1e-9 tolerance)."""
    return a[0] > b[0] or (a[0] == b[0] and a[1] > b[1] + 1e-9)


class CrowdPlanner:
    """The crowd plan for TimelyPolicy.select, on the order and estimates of ``rank``."""

    def __init__(self, rank: TimelyPriority, options: TimelyOptions) -> None:
        self.rank = rank
        self.options = options
        self._promised: dict[str, float] = {}   # req_id -> when a plan deferred it to a later wave

    def forget(self, req_id: str) -> None:
        """The request has ended: it keeps no place in a later wave."""
        self._promised.pop(req_id, None)

    def crowd(self, ranked: Sequence[Generation], waiting: Sequence[Generation] = (),
               now: float = 0.0) -> list[Generation]:
        """Option crowd_plan: the waiting first segments (not prefilled) of the top-ranked one's urgency class, in
        rank order, at most 8; empty if fewer than two. Option crowd_promise: the members an earlier plan deferred
        to a later wave (see first_wave) come first, earliest deferred first, wherever they rank, while they can
        still earn utility if generated now."""
        firsts = [g for g in ranked if g.k == 0 and not g.prefilled]
        crowd = [g for g in firsts if firsts and g.req.tuf == firsts[0].req.tuf]
        if self.options.crowd_promise:
            promised = self._promised
            pool = {g.req.req_id: g for g in waiting if g.req.req_id in promised and not g.segments
                    and not g.prefilled} if promised else {}
            self._promised = {r: t for r, t in promised.items() if r in pool}
            kept = sorted((r for r in self._promised if crowd and pool[r].req.tuf == crowd[0].req.tuf
                           and self.rank.utility_if_started(pool[r], now) > 0.0), key=lambda r: self._promised[r])
            crowd = [pool[r] for r in kept] + [g for g in crowd if g.req.req_id not in self._promised]
        crowd = crowd[:8]
        return crowd if len(crowd) >= 2 else []

    def where_its_best_ranks(self, order: list[Generation], crowd: list[Generation], prio: dict[int, float],
                                    now: float) -> list[Generation]:
        """Option crowd_promise: members a split deferred may rank low, so the whole crowd moves, in its own order,
        to where its best-ranked member would stand in ``order`` (``prio`` gains the members it lacked)."""
        prio.update((id(g), self.rank.priority(g, now)) for g in crowd if id(g) not in prio)
        members, top = {id(g) for g in crowd}, max(prio[id(g)] for g in crowd)
        rest = [g for g in order if id(g) not in members]
        at = next((i for i, g in enumerate(rest) if prio[id(g)] < top), len(rest))
        return rest[:at] + list(crowd) + rest[at:]

    def _score(self, utilities: list[float], total: float | None = None) -> tuple[int, float]:
        """What the crowd plan maximises: (members served with positive utility, summed utility) with
        crowd_objective "served" (lexicographic), (0, summed utility) with "utility". utilities are ready_utility's,
        never below 0 (so the served are those not 0); total: their sum when the caller has it."""
        total = sum(utilities) if total is None else total
        return (len(utilities) - utilities.count(0.0) if self.options.crowd_objective == "served" else 0), total

    def first_wave(self, batch: Sequence[Generation], crowd: Sequence[Generation], now: float,
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
        tokens = [max(self.rank.first_segment_tokens(g) - 1, 1) for g in crowd]
        # a crowd member is a first segment still to prefill: its WCET in a wave is the wave's prefill work
        # (batch_prefill_s) plus its decode steps at the wave's decode speed, so the wave's is its longest member's
        waves: dict[tuple[int, int], float] = {}

        def wave_s(i: int, k: int) -> float:     # a later wave of crowd[i:i + k] on its own
            got = waves.get((i, k))
            if got is None:
                pre = batch_prefill_s(crowd[i:i + k], cost)
                got = waves[i, k] = pre + max(tokens[i:i + k]) * cost.decode_s(k)
            return got

        memo: dict[tuple[int, float], tuple[tuple[int, float], int]] = {}
        nobody = (0, 0.0)
        ready = self.rank.ready_utility

        def value(i: int, t: float) -> tuple[int, float]:   # best score of crowd[i:] served in waves from now + t
            key = (i, round(t, 6))
            if i >= n:
                return nobody
            if key not in memo:
                top, top_k = nobody, 0           # serve nobody from i on (they are dropped)
                for k in range(1, n - i + 1):
                    end = t + wave_s(i, k)
                    got = [ready(g, now + end) for g in crowd[i:i + k]]
                    total = sum(got)
                    if total <= 0.0:
                        break
                    score = _add(self._score(got, total), value(i + k, end))
                    if _better(score, top):
                        top, top_k = score, k
                memo[key] = (top, top_k)
            return memo[key][0]

        # the batch's members' WCETs (wcet_in_s) in the step, without and then with the crowd's first k: their
        # decode steps, and the prefill work (batch_prefill_s) of the batch and the first k, summed in that order
        size_b = len(batch)
        own = [self.rank.segment_length(m) for m in batch]
        steps_b = [decode_steps(m, t) for m, t in zip(batch, own)]
        pending, reload_s = sum(prefill_tokens_left(m) for m in batch), sum(m.reload_s for m in batch)
        pre_b, step_b = prefill_work_s(pending, reload_s, cost), cost.decode_s(size_b)
        done = max((pre_b + s * step_b for s in steps_b), default=0.0)
        best_k, best, best_end = 0, (-1, -1.0), done     # with an empty batch the first wave starts now
        if batch:                                # else the crowd waits for the batch's current segments
            best = _add(self._score([self.rank.ready_utility(m, now + (pre_b + s * step_b))
                                     for m, s in zip(batch, steps_b)]), value(0, done))
        longest = 0
        for k in range(1, n + 1):
            joining = crowd[k - 1]
            pending += prefill_tokens_left(joining)
            reload_s += joining.reload_s
            longest = max(longest, tokens[k - 1])
            pre, step = prefill_work_s(pending, reload_s, cost), cost.decode_s(size_b + k)
            end = pre + longest * step           # the crowd's members have not prefilled: their steps are tokens
            got = [ready(g, now + end) for g in crowd[:k]]
            got += [self.rank.ready_utility(m, now + (pre + s * step)) for m, s in zip(batch, steps_b)]
            total = _add(self._score(got), value(k, end))
            if _better(total, best):
                best_k, best, best_end = k, total, end
        if self.options.crowd_promise and best_k:       # a split: the members planned into later waves keep their place
            i, t = best_k, best_end
            while i < n and (i, round(t, 6)) in memo and memo[i, round(t, 6)][1]:
                k = memo[i, round(t, 6)][1]
                t += wave_s(i, k)
                for g in crowd[i:i + k]:
                    if self.rank.ready_utility(g, now + t) > 0.0:
                        self._promised.setdefault(g.req.req_id, now)
                i += k
        return {id(g) for g in crowd[:best_k]}

