"""TimelyLLM's Eq. 4 priority, the estimators it rests on and the drop rule (see core/policies/timely.py).

    Pri(s_k, t) = U / (G * L)
    U = TUF_0(max(t + G + d, S) - arrival)   for k = 0   (d = network delay to the robot)
        TUF_1(t + G + d - E)                 for k > 0   (E = expected, then actual, end of the previous execution)
    L = deadline - t,  deadline = max(arrival + ERT, S) (k = 0) or E (k > 0)
    G = profiled mean generation time of one segment of this robot type (option segment_gen_time_s; online_gen_time:
        the measured segments' EMA; a first segment the drop rule may end: the smaller of that and the configured
        one, as the drop rule)
    S = the earliest start of the plan on its robot: the expected end of the plans ahead of it there

The estimators: G of the part of a segment still to generate, the segment lengths admission and the crowd plan
assume (the mean or the longest of the last 32 seen, per robot type; first segments per robot type and urgency
class), and the predicted utility of a segment ready at a given time.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Sequence

from timely_llm_ros.core.admission import segment_deadline
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy
from timely_llm_ros.core.policies.timely_options import (DEFAULT_MAX_SEGMENT_TOKENS, DEFAULT_PREFILL_STEP_S, DEFAULT_PREFILL_TOKEN_S,
                             DEFAULT_SEGMENT_GEN_TIME_S, TimelyOptions, per_type)


class TimelyPriority:
    """Eq. 4, its estimators and the drop rule: the order TimelyPolicy ranks by and the estimates its admission and
    crowd plan assume. Holds the segment lengths and times seen so far."""

    def __init__(self, options: TimelyOptions) -> None:
        self.options = o = options
        self.gen_time_s = per_type(o.segment_gen_time_s, DEFAULT_SEGMENT_GEN_TIME_S)
        self._configured_gen_time = dict(self.gen_time_s)
        self.max_segment_tokens = {k: int(v) for k, v in per_type(o.max_segment_tokens,
                                                                   DEFAULT_MAX_SEGMENT_TOKENS).items()}
        self.expected_segment_tokens = {str(k): int(v) for k, v in (o.expected_segment_tokens or {}).items()}
        self.expected_first_segment_tokens = {str(k): int(v) for k, v in
                                              (o.expected_first_segment_tokens or {}).items()}
        self.segment_estimate = o.effective_segment_estimate
        self.network_delay_s = o.network_delay_s
        self.token_time_s = o.token_time_s
        self.decode_seq_ratio = o.decode_seq_ratio
        self._fixed_prefill = o.effective_fixed_prefill
        self.prefill_token_s = DEFAULT_PREFILL_TOKEN_S if o.prefill_token_s is None else o.prefill_token_s
        self.prefill_step_s = (o.prefill_step_s if o.prefill_step_s is not None
                               else DEFAULT_PREFILL_STEP_S if self._fixed_prefill else 0.0)
        self.utility_floor = o.utility_floor
        self.drop = o.drop
        self.order = o.order
        self._seg_tokens: dict[str, deque] = {}
        self._first_tokens: dict[tuple[str, str], deque] = {}
        # the estimates below per robot type (and urgency class), as they stand until the next segment is observed:
        # admission and the crowd plan read them for every candidate of every pick
        self._seg_estimate: dict[str, int] = {}
        self._first_estimate: dict[tuple[str, str], int] = {}

    def observe_segment(self, robot_type: str, gen_time_s: float) -> None:
        """Option online_gen_time: G follows the measured segment generation time (EMA, weight 0.2), so the
        priorities fit whatever engine and model serve them instead of a profile made elsewhere. The measure is
        the engine time of the steps the segment was in, never the time it waited: Eq. 4 counts waiting through t,
        and a G that also counted it made the queue it ranks look slower the longer it got (an urgent request
        arriving behind long plans then looked hopeless before it was ever tried)."""
        if self.options.online_gen_time and gen_time_s > 0:
            old = self.segment_time(robot_type)
            self.gen_time_s[robot_type] = 0.8 * old + 0.2 * gen_time_s

    def segment_time(self, robot_type: str) -> float:
        """G: profiled mean generation time of one segment."""
        return self.gen_time_s.get(robot_type, self.gen_time_s.get("*", 0.1))

    def first_segment_time(self, robot_type: str) -> float:
        """G of a first segment the drop rule may end: the smaller of G now and the configured (fitted) G, the
        drop rule's optimistic G. Eq. 4 must agree with the drop rule, or a request kept because it can still be
        in time is ranked as if it could not, at the utility floor behind every running plan, until it is dropped
        (make demo on SmolLM2, 2 cores: an urgent drone goal ranked U < 0 at arrival with the online G, 0.47 s
        under load against its 0.2 s ERT, fitted 0.13 s). A class that serves late plans is never dropped and
        keeps the online G (the ROS burst: with the optimistic G for every first segment, normal first segments
        took the engine from urgent ones)."""
        g = self.segment_time(robot_type)
        return min(g, self._configured_gen_time.get(robot_type, g))

    def segment_tokens(self, gen: Generation) -> int:
        """Tokens of one segment of gen's robot type that admission assumes, never above the configured maximum.
        Option segment_estimate "mean" (default with admission "utility"): the expected length, the mean of the
        last 32 segments of that type seen, before any is seen the profiled segment time G over the batch-1 token
        time (G is the mean time of a segment, so this is its mean token count); "max" (default with admission
        "deadline"): the longest of the last 32 seen (a worst case, the earlier rule), the maximum before any.
        online_segment_tokens False: always the maximum."""
        rt = gen.req.robot_type
        n = self._seg_estimate.get(rt)
        if n is None:
            n = self._seg_estimate[rt] = self._segment_tokens_of(rt)
        return n

    def _segment_tokens_of(self, rt: str) -> int:
        cap = self.max_segment_tokens.get(rt, self.max_segment_tokens.get("*", 20))
        if not self.options.online_segment_tokens:
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
            self._seg_estimate.clear()
            self._first_estimate.clear()
            self._seg_tokens.setdefault(robot_type, deque(maxlen=32)).append(tokens)
            if first:
                self._first_tokens.setdefault((robot_type, urgency), deque(maxlen=32)).append(tokens)

    def first_segment_tokens(self, gen: Generation) -> int:
        """Expected token count of gen's first segment (the crowd plan's estimate): the mean of the last 32 first
        segments of its robot type and urgency class (a plan's first step depends on both: an urgent first reaction is
        short, a routine plan's opening step longer, and later segments differ again); before any is seen option
        expected_first_segment_tokens of its robot type, else segment_tokens. Never above the configured maximum."""
        key = (gen.req.robot_type, gen.req.urgency)
        n = self._first_estimate.get(key)
        if n is None:
            n = self._first_estimate[key] = self._first_segment_tokens_of(*key)
        return n

    def _first_segment_tokens_of(self, rt: str, urgency: str) -> int:
        recent = self._first_tokens.get((rt, urgency))
        if not recent and rt not in self.expected_first_segment_tokens:
            return self._segment_tokens_of(rt)
        mean = sum(recent) / len(recent) if recent else self.expected_first_segment_tokens[rt]
        cap = self.max_segment_tokens.get(rt, self.max_segment_tokens.get("*", 20))
        return max(1, min(cap, math.ceil(mean)))

    def segment_length(self, gen: Generation) -> int:
        """Tokens the plans assume for gen's current segment: a first segment's own mean, else any segment's."""
        return self.first_segment_tokens(gen) if gen.k == 0 else self.segment_tokens(gen)

    def utility_if_started(self, gen: Generation, now: float, gen_time_s: float | None = None) -> float:
        """TUF_0 / TUF_1 of the current segment if its generation starts now (unclamped)."""
        req = gen.req
        if gen_time_s is not None:
            g = gen_time_s
        elif gen.k == 0 and self.drop != "never" and not req.tuf.serves_late:   # as eq4
            g = self.first_segment_time(req.robot_type)
        else:
            g = self.segment_time(req.robot_type)
        ready = now + g + self.network_delay_s
        if gen.k == 0 or gen.expected_exec_end is None:
            return req.tuf(gen.first_start(ready) - req.arrival)
        return req.tuf.resumed(ready - gen.expected_exec_end)

    def priority(self, gen: Generation, now: float) -> float:
        """Eq. 4 (option order "utility"), or the segment deadline ("deadline") or request arrival ("arrival")
        order under timely's admission, preemption and drop rule."""
        return self.priorities((gen,), now)[0]

    def priorities(self, gens: Sequence[Generation], now: float) -> list[float]:
        """priority() of each of gens at now, in one pass (the pick ranks every waiting generation at every step)."""
        if self.order == "utility":
            return self.eq4(gens, now)
        if self.order == "deadline":
            return [-segment_deadline(g) for g in gens]
        return [-g.req.arrival for g in gens]

    def eq4(self, gens: Sequence[Generation], now: float) -> list[float]:
        """Pri(s_k, t) = U / (G * L) of each of gens, with the floors and the aging of the module docstring.

        One loop with the per-robot-type estimates looked up once per type: the pick ranks every waiting
        generation at every engine step, so this is the scheduler's hot path with a long queue
        (benchmarks/overhead.py scheduling). G is that of the part of the segment still to generate: G for a
        segment not started, else the share of its (assumed) tokens left, so that a half-generated segment is not
        ranked like a fresh one."""
        d, floor_share = self.network_delay_s, self.utility_floor
        g_of: dict[tuple[str, bool], float] = {}
        out: list[float] = []
        for gen in gens:
            req = gen.req
            tuf = req.tuf
            rt = req.robot_type
            droppable = gen.k == 0 and self.drop != "never" and not tuf.serves_late
            g = g_of.get((rt, droppable))
            if g is None:
                g = g_of[rt, droppable] = self.first_segment_time(rt) if droppable else self.segment_time(rt)
            if gen.prefilled:
                done = len(gen.output_ids) - gen.seg_token_start
                if done > 0:
                    tokens = self.segment_tokens(gen)
                    g = g * max(tokens - done, 1) / max(tokens, done + 1)
            e = gen.expected_exec_end
            start = gen.earliest_start
            if not gen.segments or e is None:
                # the robot cannot start it before it is free of the plans ahead of this one (earliest_start)
                ready = now + g + d
                if start is not None and start > ready:
                    ready = start
                u = tuf.alpha * (ready - req.arrival - tuf.ert) + tuf.beta       # TUF_0, below beta
                deadline = req.arrival + tuf.ert
                if start is not None and start > deadline:
                    deadline = start
                slack = deadline - now
            else:
                late = now + g + d - e
                u = tuf.alpha * late + tuf.beta if late > 0.0 else tuf.beta        # TUF_1
                slack = e - now
            beta = tuf.beta
            if u > beta:
                u = beta
            floor = floor_share * beta
            if u >= floor:
                out.append(u / (g * (slack if slack > g else g)))
            elif gen.segments and e is not None and tuf.alpha < 0:
                # A later segment is never dropped (its robot is mid-plan) but once TUF_1 hits the floor its rank
                # would stop rising, below every fresh request, which starved it under load. Past the floor it
                # ages: its slack keeps shrinking (L = G^2 / (G + tau), tau = time past the floor), so its
                # priority rises with waiting like a fresh request's does, and it outranks any fresh segment of
                # its class (at most beta / G^2) once tau >= G (1 / utility_floor - 1).
                tau = (now + g + d - e) - (beta - floor) / -tuf.alpha
                out.append(floor * (1.0 + (tau if tau > 0.0 else 0.0) / g) / (g * g))
            else:
                out.append(floor / (g * (slack if slack > g else g)))
        return out

    def should_drop(self, gen: Generation, now: float) -> str | None:
        if self.drop == "never" or gen.k > 0 or not Policy.may_drop(gen):
            return None
        # optimistic G (the configured profile, or less if measured faster): an online G inflated by a burst
        # must not drop a request that could still make it
        u = self.utility_if_started(gen, now, self.first_segment_time(gen.req.robot_type))
        if u <= 0:
            waited = now - gen.req.arrival
            return (f"dropped after waiting {waited:.2f} s: its first segment could no longer earn positive "
                    f"time utility (it would earn {u:.2f} even if its generation started at once, with the "
                    "engine's measured time per segment)")
        return None

    def ready_utility(self, gen: Generation, ready: float) -> float:
        """Utility (TUF_0 or TUF_1) of gen's current segment if it is ready at time ready, at least 0: a first
        segment that would earn less is better dropped, which counts about 0. (Admission and the crowd plan ask
        this for every member at every pick: TUF_0 and TUF_1 are written out here.)"""
        req = gen.req
        tuf = req.tuf
        t = ready + self.network_delay_s
        e = gen.expected_exec_end
        if not gen.segments or e is None:
            start = gen.earliest_start
            if start is not None and start > t:
                t = start
            u = tuf.alpha * (t - req.arrival - tuf.ert) + tuf.beta
        else:
            late = t - e
            u = tuf.alpha * late + tuf.beta if late > 0.0 else tuf.beta
        if u > tuf.beta:
            u = tuf.beta
        return u if u > 0.0 else 0.0
