"""SLICE (SLO-driven edge scheduling): utility-rate task selection and a decode mask that gives each task its rate.

Each task i wants v_i = ceil(1000 / TPOT_i) tokens per second and has utility U_i (here its TUF's beta).
Selection: greedy by utility rate r_i = U_i * TPOT_i (utility per unit of rate), a task joins the selected set S
if one 1-second cycle still fits:  T_period(S) = sum_c l(|{j in S runs in column c}|) < cycle_ms,  where l(b)
is the decode-step latency at batch b: measured online on the engine (EMA per batch size of decode-only steps),
before that from the options (step_latency_ms table, or l_base_ms + l_per_seq_ms * b). Re-plan on arrival/finish.

The paper's open points, decided here:
- Spreading: task i runs in column c iff floor((c+1) v_i / v_max) > floor(c v_i / v_max) (evenly spaced tokens)
  instead of the first v_i columns; the period is the same for a linear l(b), the token gaps are even.
- Cycle: work-conserving; the next cycle starts as soon as one ends (no idling to the second's edge), so tasks
  get at least their rate. The column pointer is kept across re-plans (no restart of a half-done cycle); no
  further per-task credit is carried (at most one token per re-plan is lost or gained).
- TTFT: a newly selected task joins the next step whatever its column (its prefill is its first token); the
  period check covers steady decoding only (a prefill stretches one step once). Ties in r go to the earlier
  TTFT deadline.
- Deadline -> rate: a task with no TPOT SLO but a time budget gets TPOT = budget / N_hat (N_hat from the
  TimeBill length predictor); with neither, TPOT = default_tpot_ms (100 ms).
- Starvation: as in the paper, unselected tasks wait until a re-plan selects them; if not even one task fits
  a cycle, the best one runs alone (never idle).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.options import PolicyOptions


@dataclass(frozen=True)
class SliceOptions(PolicyOptions):
    cycle_ms: float = 1000.0            # length of one scheduling cycle
    default_tpot_ms: float = 100.0      # time-per-output-token SLO of a request that states none
    step_latency_ms: Mapping[int, float] = field(default_factory=dict)   # l(b) by batch size b (a prior)
    l_base_ms: float = 20.5             # l(b) = l_base_ms + l_per_seq_ms * b where the table has no b
    l_per_seq_ms: float = 1.5           # (defaults: config/latency/llama3-8b-rtx4090.yaml decode)
    measure: bool = True                # l(b) measured online replaces the prior


class SlicePolicy(Policy):
    """SLICE (see module docstring)."""

    name = "slice"
    Options = SliceOptions
    interrupt_default = False   # its paper cuts no step short (option interrupt: true adds it)
    segmented = False

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | PolicyOptions | None = None) -> None:
        super().__init__(max_batch, options)
        o: SliceOptions = self.options
        self.cycle_ms = o.cycle_ms
        self.default_tpot_ms = o.default_tpot_ms
        self.table = {int(b): float(ms) for b, ms in (o.step_latency_ms or {}).items()}
        self.l_base_ms = o.l_base_ms
        self.l_per_seq_ms = o.l_per_seq_ms
        self.measure = o.measure
        if self.cycle_ms <= 0 or self.default_tpot_ms <= 0:
            raise ValueError("slice: cycle_ms and default_tpot_ms must be > 0")
        self.measured: dict[int, float] = {}
        self._col = 0
        self._plan_key: frozenset[str] = frozenset()
        self._selected: list[str] = []
        self._rate: dict[str, int] = {}
        self._last_decode_batch = 0

    # ---- the model of the device
    def step_ms(self, b: int) -> float:
        """l(b): decode-step latency at batch b (measured if seen, else the configured prior)."""
        if b <= 0:
            return 0.0
        if b in self.measured:
            return self.measured[b]
        if b in self.table:
            return self.table[b]
        return self.l_base_ms + self.l_per_seq_ms * b

    def tpot_ms(self, gen: Generation) -> float:
        req = gen.req
        if req.tpot_slo_ms > 0:
            return req.tpot_slo_ms
        if req.time_budget_s > 0:
            from timely_llm_ros.core.predictors.length import default_bucket_predictor

            n_hat = default_bucket_predictor().predict(req.task, req.context)
            return max(1.0, 1000.0 * req.time_budget_s / max(n_hat, 1))
        return self.default_tpot_ms

    def rate(self, gen: Generation) -> int:
        """v = ceil(1000 / TPOT) tokens per second (per cycle)."""
        return max(1, math.ceil(self.cycle_ms / self.tpot_ms(gen) - 1e-9))

    def priority(self, gen: Generation, now: float) -> float:
        """Utility rate r = U * TPOT."""
        return gen.req.tuf.beta * self.tpot_ms(gen)

    @staticmethod
    def runs(v: int, v_max: int, col: int) -> bool:
        """Spread mask: does a task of rate v decode in column col of a v_max-column cycle?"""
        return (col + 1) * v // v_max > col * v // v_max

    def period_ms(self, rates: Sequence[int]) -> float:
        """T_period: the time of one cycle of the decode mask for tasks of these rates."""
        if not rates:
            return 0.0
        v_max = max(rates)
        return sum(self.step_ms(sum(self.runs(v, v_max, c) for v in rates)) for c in range(v_max))

    # ---- planning
    def _replan(self, gens: Sequence[Generation]) -> None:
        order = sorted(gens, key=lambda g: (-self.priority(g, 0.0), g.req.arrival + g.req.ttft_slo_ms / 1000.0,
                                            g.req.arrival))
        chosen: list[Generation] = []
        rates: list[int] = []
        for g in order:
            if len(chosen) >= self.max_batch:
                break
            v = self.rate(g)
            if self.period_ms([*rates, v]) < self.cycle_ms:
                chosen.append(g)
                rates.append(v)
        if not chosen and order:
            chosen, rates = [order[0]], [self.rate(order[0])]
        self._selected = [g.req_id for g in chosen]
        self._rate = {g.req_id: v for g, v in zip(chosen, rates)}

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        if self.measure and self._last_decode_batch and ctx.step_time_s:
            b, ms = self._last_decode_batch, ctx.step_time_s * 1000.0
            self.measured[b] = ms if b not in self.measured else 0.7 * self.measured[b] + 0.3 * ms
        gens = {g.req_id: g for g in (*running, *waiting)}
        key = frozenset(gens)
        if key != self._plan_key:
            self._plan_key = key
            self._replan(list(gens.values()))
        if not self._selected:
            self._last_decode_batch = 0
            return []
        v_max = max(self._rate.values())
        col = self._col % v_max
        self._col = col + 1
        batch = [gens[i] for i in self._selected
                 if not gens[i].prefilled or self.runs(self._rate[i], v_max, col)]
        self._last_decode_batch = len(batch) if all(g.prefilled for g in batch) else 0
        return batch
