"""Latency-guided batch admission (TimelyLLM section 4.4).

Before a waiting generation joins the batch, take the most urgent generation already in it (smallest slack)
and bound the time it still needs for its current segment:

    WCET = (max_segment_tokens - tokens generated in its current segment) * seconds per token

(a loop or conditional that has outgrown max_segment_tokens cannot be cut before it closes: its tokens left are
then bounded by the generation's token cap instead, Generation.segment_tokens_left, so the bound still holds)

(seconds per token: the median of its recent decode steps, its prefill step excluded; before it has any, a
configured guess). The newcomer is admitted if WCET < that slack (the paper's rule; once the deadline has passed, the
time left until the segment's utility reaches zero stands in for the slack), or if the newcomer itself
is pressing: its own budget < the most urgent one's budget + its own WCET, i.e. it is about as urgent (holding it
back would trade one missed deadline for another), and in both cases only if its KV fits in the free device budget.
A step is not preemptible: TimelyPolicy also limits how many generations that need a prefill join per step
(admit_per_step) unless they are pressing, so that an urgent arrival never waits behind a long burst of prefills.

Prefill-aware form (StepCost, step_wcet_s, used by TimelyPolicy): a prefill is paid inside the steps of every
generation in the batch, so the WCET of the most urgent member u counts the prefill work of the whole batch:

    WCET(u | batch) = p * (prompt tokens the batch still has to prefill) + c + (KV reloads of members coming back
                      from host memory) + n_u * t_dec(|batch|)
    t_dec(B) = t_1 * (1 + r * (B - 1))         (decode step time grows with the batch)

n_u = decode steps left in u's segment (max segment tokens - tokens in it; a whole segment if u is not
prefilled), p = seconds per prefill token, c = a prefilling step's fixed cost, t_1 = batch-1 decode step, r = the share one more sequence adds. A
candidate FITS if WCET(u | batch + candidate) < budget(u); a pressing or late candidate that needs a prefill
joins only while the step's prefill count is below admit_per_step: a crowd sharing one deadline is pressing as a
whole, and without that limit it would turn into one long unpreemptible prefill step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from timely_llm_ros.core.request import Generation


def segment_deadline(gen: Generation) -> float:
    """When the segment being generated must be ready: arrival + ERT for s0 (or later, when the robot runs another
    plan until then: earliest_start), else E (end of the previous execution)."""
    if gen.k == 0 or gen.expected_exec_end is None:
        return gen.first_start(gen.req.arrival + gen.req.tuf.ert)
    return gen.expected_exec_end


def slack_s(gen: Generation, now: float) -> float:
    """Time left until the current segment's deadline (negative when late)."""
    return segment_deadline(gen) - now


def budget_s(gen: Generation, now: float) -> float:
    """Admission's time budget: the slack while it is positive; once the deadline has passed, the time left until
    the segment's utility reaches zero (negative when even that has passed)."""
    slack = slack_s(gen, now)
    if slack > 0:
        return slack
    tuf = gen.req.tuf
    return slack + (tuf.beta / -tuf.alpha if tuf.alpha < 0 else float("inf"))


def seconds_per_token(gen: Generation, fallback_s: float) -> float:
    """Recent decode speed of gen as s/token (median of recent steps, prefill excluded), else fallback_s."""
    times = list(gen.step_times)
    if times and len(times) >= len(gen.output_ids):  # the first entry is still the prefill step
        times = times[1:]
    if not times:
        return fallback_s
    times.sort()
    return times[len(times) // 2]


def wcet_s(gen: Generation, max_segment_tokens: int, token_s: float) -> float:
    """Worst-case time to finish gen's current segment (at least one more token)."""
    return gen.segment_tokens_left(max_segment_tokens) * seconds_per_token(gen, token_s)


def kv_need_bytes(gen: Generation, kv_bytes_per_token: float) -> float:
    """KV bytes gen adds to the device when it joins (0 if its KV is already resident)."""
    if gen.prefilled and not gen.offloaded:
        return 0.0
    return (len(gen.prompt_ids) + len(gen.output_ids) + 1) * kv_bytes_per_token


EMPTY, FITS, PRESSING, LATE, REFUSED = "empty", "fits", "pressing", "late", "refused"


@dataclass(frozen=True)
class StepCost:
    """What prefill-aware admission assumes about engine step times (seconds)."""

    decode_1_s: float = 0.022          # t_1: one decode step of a single sequence
    seq_ratio: float = 0.07            # r: each extra sequence adds r * t_1 to a decode step
    prefill_token_s: float = 1.1e-4    # p: one prompt token of prefill
    step_token_budget: int | None = None  # chunked prefill: tokens per step (None: whole prompts per step)
    prefill_step_s: float = 0.0        # c: paid once by a step that prefills anything

    def decode_s(self, batch: int) -> float:
        """t_dec(B): one decode step of a batch of B sequences."""
        return self.decode_1_s * (1.0 + self.seq_ratio * max(batch - 1, 0))


def prefill_tokens_left(gen: Generation) -> int:
    """Prompt tokens gen still has to prefill (0 once prefilled; the engine's count when it reported one)."""
    if gen.prefilled:
        return 0
    return gen.prefill_left if gen.prefill_left is not None else len(gen.prompt_ids)


def prefill_work_s(pending_tokens: int, reload_s: float, cost: StepCost) -> float:
    """A step's prefill work: its pending prompt tokens (and the fixed cost of a step that prefills any) plus the
    KV reloads of its members."""
    return pending_tokens * cost.prefill_token_s + (cost.prefill_step_s if pending_tokens else 0.0) + reload_s


def batch_prefill_s(members: Sequence[Generation], cost: StepCost) -> float:
    """Prefill work (and KV reloads) a batch still has to do: the part of every member's WCET it shares."""
    return prefill_work_s(sum(prefill_tokens_left(m) for m in members), sum(m.reload_s for m in members), cost)


def decode_steps(gen: Generation, max_segment_tokens: int) -> int:
    """Decode steps gen has left in its current segment of (at most) max_segment_tokens."""
    return max_segment_tokens if not gen.prefilled else gen.segment_tokens_left(max_segment_tokens)


def wcet_in_s(gen: Generation, max_segment_tokens: int, prefill_s: float, size: int, cost: StepCost) -> float:
    """gen's WCET in a batch of `size` members whose shared prefill work is prefill_s (see step_wcet_s)."""
    return prefill_s + decode_steps(gen, max_segment_tokens) * cost.decode_s(size)


def step_wcet_s(gen: Generation, batch: Sequence[Generation], max_segment_tokens: int, cost: StepCost) -> float:
    """Worst-case time until gen's current segment is ready when it runs with batch (gen included or not):
    the batch's pending prefill work plus gen's remaining decode steps at the batch's decode speed."""
    members = list(batch) if any(m is gen for m in batch) else [*batch, gen]
    return wcet_in_s(gen, max_segment_tokens, batch_prefill_s(members, cost), len(members), cost)


def admits(batch: Sequence[Generation], candidate: Generation, now: float,
           max_segment_tokens: Callable[[Generation], int], token_s: float, admit_when_late: bool = True) -> bool:
    """True if candidate may join batch (KV aside) by the paper's decode-only rule (see verdict)."""
    return verdict(batch, candidate, now, max_segment_tokens, token_s, admit_when_late) != REFUSED


def verdict(batch: Sequence[Generation], candidate: Generation, now: float,
            max_segment_tokens: Callable[[Generation], int], token_s: float, admit_when_late: bool = True) -> str:
    """The paper's decode-only rule (prefill cost ignored): EMPTY, FITS, PRESSING, LATE or REFUSED.

    An empty batch always admits. Budgets are budget_s (slack, then time to zero utility). When the most urgent
    member's budget is gone, holding others back cannot save it; admit_when_late then admits rather than
    serialising the engine.
    """
    if not batch:
        return EMPTY
    urgent = min(batch, key=lambda g: budget_s(g, now))
    budget = budget_s(urgent, now)
    wcet = wcet_s(urgent, max_segment_tokens(urgent), token_s)
    if budget_s(candidate, now) < budget + wcet_s(candidate, max_segment_tokens(candidate), token_s):
        return PRESSING
    if wcet < budget:
        return FITS
    if budget <= 0 and admit_when_late:
        return LATE
    return REFUSED
