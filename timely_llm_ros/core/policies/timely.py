"""TimelyLLM: PUD priority (Eq. 4) recomputed at every pick, latency-guided admission, hopeless-request drop.

    Pri(s_k, t) = U / (G * L)
    U = TUF_0(t + G + d - arrival)   for k = 0          (d = network delay to the robot)
        TUF_1(t + G + d - E)         for k > 0          (E = expected, then actual, end of the previous execution)
    L = deadline - t,  deadline = arrival + ERT (k = 0) or E (k > 0)
    G = profiled mean generation time of one segment of this robot type

Well-definedness (the paper is silent): L is floored at G (a segment cannot be ready sooner than G, so every
late segment counts as "due now"), and U at utility_floor * beta (> 0) so that segments that can no longer earn
utility keep a finite, small, positive priority, ordered by their slack; they are still served, after those that
can. A first segment whose TUF_0 would be <= 0 even if generated now is dropped (option drop="hopeless", the
default; "never" keeps it); the scheduler reports it as DROPPED. Later segments are never dropped: the robot is
mid-plan.

Options: segment_gen_time_s {robot_type: s}, online_gen_time (G tracks measured segments), max_segment_tokens {robot_type: n}, network_delay_s, token_time_s
(decode s/token assumed before a generation has been measured), adaptive (latency-guided admission, core/admission.py,
on top of max_batch; False = fixed cap only), admit_when_late, admit_per_step (generations needing a prefill that
join per step unless pressing; 0 = no limit), utility_floor, drop.
"""
from __future__ import annotations

import heapq
from typing import Any, Mapping, Sequence

from ..admission import PRESSING, REFUSED, kv_need_bytes, verdict
from ..request import Generation
from .base import Policy, SchedulingContext
from .registry import register

DEFAULT_SEGMENT_GEN_TIME_S = {"drone": 0.09, "arm": 0.16, "chat": 0.16}
DEFAULT_MAX_SEGMENT_TOKENS = {"drone": 10, "arm": 20, "chat": 20}


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
        self.admit_when_late = bool(o.get("admit_when_late", True))
        self.admit_per_step = int(o.get("admit_per_step", 1))  # new prefills per step unless pressing (0: no limit)
        self.utility_floor = float(o.get("utility_floor", 0.05))
        self.drop = str(o.get("drop", "hopeless"))
        if self.drop not in ("hopeless", "never"):
            raise ValueError(f"timely: drop must be 'hopeless' or 'never', got {self.drop!r}")
        if not 0.0 < self.utility_floor < 1.0:
            raise ValueError(f"timely: utility_floor must be in (0, 1), got {self.utility_floor}")

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
        """Maximum tokens of one segment of gen's robot type (admission's WCET bound)."""
        rt = gen.req.robot_type
        return self.max_segment_tokens.get(rt, self.max_segment_tokens.get("*", 20))

    def utility_if_started(self, gen: Generation, now: float, gen_time_s: float | None = None) -> float:
        """TUF_0 / TUF_1 of the current segment if its generation starts now (unclamped)."""
        req = gen.req
        g = self.segment_time(req.robot_type) if gen_time_s is None else gen_time_s
        ready = now + g + self.network_delay_s
        if gen.k == 0 or gen.expected_exec_end is None:
            return req.tuf(ready - req.arrival)
        return req.tuf.resumed(ready - gen.expected_exec_end)

    def priority(self, gen: Generation, now: float) -> float:
        req = gen.req
        g = self.segment_time(req.robot_type)
        if gen.k == 0 or gen.expected_exec_end is None:
            u = req.tuf(now + g + self.network_delay_s - req.arrival)
            slack = req.arrival + req.tuf.ert - now
        else:
            e = gen.expected_exec_end
            u = req.tuf.resumed(now + g + self.network_delay_s - e)
            slack = e - now
        u = max(u, self.utility_floor * req.tuf.beta)
        return u / (g * max(slack, g))

    def should_drop(self, gen: Generation, now: float) -> str | None:
        if self.drop == "never" or gen.k > 0:
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

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        batch = list(running)
        room = self.max_batch - len(batch)
        if room <= 0 or not waiting:
            return batch
        now = ctx.now
        ranked = heapq.nlargest(room, waiting, key=lambda g: self.priority(g, now))
        budget = ctx.kv_free_bytes
        prefills = 0
        for gen in ranked:
            need = kv_need_bytes(gen, ctx.kv_bytes_per_token)
            if batch and need > budget:
                break
            if self.adaptive:
                why = verdict(batch, gen, now, self.segment_tokens, self.token_time_s, self.admit_when_late)
                if why == REFUSED:
                    break
                if (not gen.prefilled and why != PRESSING and batch
                        and 0 < self.admit_per_step <= prefills):
                    continue
            prefills += not gen.prefilled
            budget -= need
            batch.append(gen)
        return batch
