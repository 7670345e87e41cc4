"""TimeBill: time-budgeted inference. Each request has a hard budget T (PlanRequest.time_budget_s; else its TUF's
zero crossing). After its prefill the policy picks the smallest prompt-KV eviction ratio alpha* that lets the
worst-case response (N_W = min(k N_hat, N_max) tokens, N_hat from the bucketed length predictor) finish within
the remaining budget (core/predictors/ete.py, corrected Eq. 11), with p and q for the current batch size;
alpha* is recomputed from the remaining budget whenever a suspended request resumes.

Requests run earliest-deadline-first. The engine applies the ratio: core/eviction.py calls
evict_prompt_kv(gen_id, alpha) on the wrapped engine before the first decode (the SimEngine models the shorter
context). Option fixed_alpha replaces alpha* by one ratio for every request (the paper's baselines).

Overrun strategies (option overrun): "kill" stops a request at its deadline (DROPPED, plan incomplete);
"skip-next" lets it finish and drops the same agent's next request that has not started yet. Both, and the
eviction, apply only to requests with a hard budget (time_budget_s > 0); one without a budget is served EDF by
its TUF's zero crossing with no eviction and is never killed (TimeBill then behaves like vanilla EDF). A
request whose urgency class serves late plans (``late: serve``) is neither killed nor skipped: it finishes late.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from timely_llm_ros.core.predictors.ete import ExecTimeEstimator, alpha_star, wcet_tokens
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.options import PolicyOptions
from timely_llm_ros.core.policies.predicted import PredictedLengths, hard_deadline


@dataclass(frozen=True)
class TimeBillOptions(PolicyOptions):
    k: float = 5.0                      # worst-case response: min(k N_hat, N_max) tokens
    alpha_max: float = 0.95             # largest prompt-KV eviction ratio
    fixed_alpha: float | None = None    # one ratio for every request instead of alpha* (the paper's baselines)
    overrun: str = "kill"               # "kill" at the deadline, or "skip-next" (the agent's next request)
    ete: Mapping[str, float] = field(default_factory=dict)   # execution-time estimator {a, b, c, p, q} overrides
    q_per_seq: float = 0.0008           # decode-step cost per extra sequence in the batch (s)
    length_predictor: Any = None        # .predict(task, context) -> tokens; None: the bucketed predictor


class TimeBillPolicy(Policy):
    """TimeBill (see module docstring)."""

    name = "timebill"
    Options = TimeBillOptions
    interrupt_default = False   # its paper cuts no step short (option interrupt: true adds it)
    segmented = False

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | TimeBillOptions | None = None) -> None:
        super().__init__(max_batch, options)
        o: TimeBillOptions = self.options
        # defaults: config/latency/llama3-8b-rtx4090.yaml (prefill a, b, c; decode per-KV-token, base)
        ete = {"a": 1.0e-8, "b": 8.0e-5, "c": 0.0141, "p": 2.5e-7, "q": 0.0213, **dict(o.ete or {})}
        self.ete = ExecTimeEstimator(**{k: float(v) for k, v in ete.items()})
        self.q_per_seq = o.q_per_seq
        self.k = o.k
        self.alpha_max = o.alpha_max
        self.fixed_alpha = o.fixed_alpha
        self.overrun = o.overrun
        if self.overrun not in ("kill", "skip-next"):
            raise ValueError(f"timebill: overrun must be 'kill' or 'skip-next', got {self.overrun!r}")
        self._lengths = PredictedLengths(o.length_predictor)
        self.alpha: dict[str, float] = {}        # gen id -> eviction ratio to apply (core/eviction.py reads it)
        self.applied: dict[str, float] = {}      # gen id -> ratio the engine applied
        self._skip_agents: set[str] = set()
        self._overran: set[str] = set()

    def deadline(self, gen: Generation) -> float:
        return hard_deadline(gen.req)

    def forget(self, req_id: str) -> None:
        self.alpha.pop(req_id, None)
        self.applied.pop(req_id, None)
        self._lengths.forget(req_id)

    def n_hat(self, gen: Generation) -> int:
        """Predicted output tokens of gen (bucketed length predictor, cached per request)."""
        return self._lengths(gen)

    def eviction_ratio(self, gen: Generation, now: float, batch: int) -> float:
        """alpha* for gen at now (after its prefill), decode steps costed at this batch size."""
        if gen.req.time_budget_s <= 0:
            return 0.0
        if self.fixed_alpha is not None:
            return self.fixed_alpha
        n_w = wcet_tokens(self.n_hat(gen), gen.req.max_new_tokens, self.k) - len(gen.output_ids) + 1
        q = self.ete.q + self.q_per_seq * max(batch, 1)
        return alpha_star(self.deadline(gen) - now, len(gen.prompt_ids), n_w, self.ete.p, q, self.alpha_max)

    def prompt_kv_eviction(self, gen_id: str) -> float:
        """The eviction ratio decided for gen_id (0 until decided): core/eviction.py's ratios callback."""
        return self.alpha.get(gen_id, 0.0)

    def priority(self, gen: Generation, now: float) -> float:
        return -self.deadline(gen)

    def should_drop(self, gen: Generation, now: float) -> str | None:
        if gen.req.time_budget_s <= 0:
            return None
        if self.overrun == "kill" and now >= self.deadline(gen) and self.may_drop(gen):
            return (f"killed at its deadline ({gen.req.time_budget_s:.2f} s budget) after {len(gen.output_ids)} "
                    "tokens: the plan is incomplete (TimeBill Kill)")
        if self.overrun == "skip-next" and not gen.prefilled and gen.req.agent_id in self._skip_agents:
            self._skip_agents.discard(gen.req.agent_id)   # the agent's next request: skipped unless it serves late
            if self.may_drop(gen):
                return "skipped: this agent's previous plan overran its time budget (TimeBill Skip-Next)"
        return None

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        now = ctx.now
        live = []
        for g in running:   # Kill: a running request past its deadline leaves the batch; should_drop ends it
            if g.req.time_budget_s > 0 and now >= self.deadline(g):
                if self.overrun == "kill" and self.may_drop(g):
                    continue
                if g.req_id not in self._overran:
                    self._overran.add(g.req_id)
                    self._skip_agents.add(g.req.agent_id)
            live.append(g)
        batch = super().select(waiting, live, ctx)
        for g in batch:
            if g.prefilled and (g.req_id not in self.alpha or g.req_id not in running_ids(running)):
                # decided after the prefill; recomputed from the remaining budget on resume
                self.alpha[g.req_id] = max(self.alpha.get(g.req_id, 0.0), self.eviction_ratio(g, now, len(batch)))
        return batch


def running_ids(running: Sequence[Generation]) -> set[str]:
    return {g.req_id for g in running}
