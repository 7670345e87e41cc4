"""Semantic scheduling: urgency from the request TEXT, then the shortest predicted remaining time within a level.

Key (urgency level asc, f_t asc), rank 0 = most urgent (5 ESI levels, core/predictors/urgency.py). A request whose
urgency class is empty (text-only urgency) is classified by the all-MiniLM-L6-v2 urgency classifier; a named class
maps to a level (urgent -> 1, normal -> 3; option class_levels). Strict urgency preemption: every step re-ranks the
running and the waiting generations together, so a more urgent arrival takes a running one's slot at once (the
left-out one is suspended with its KV kept).

    f_t = T_pre(n) [if not prefilled] + sum_{m' = m+1..N_hat} g1 (n + m' - 1) + g2  [+ reload/recompute if evicted]
    T_pre(n) = a1 n^2 + a2 n       (n prompt tokens, m generated so far, N_hat from the bucketed length predictor)

Stage-aware batch selection (Alg. 2): take the top max_batch by key; if the best is decoding, run only the
decoding ones of them (waiting prefills go back: a low-priority prefill must not stall a high-priority decode);
if the best needs its prefill, run the top ones as they are.

Priority eviction (Alg. 3/4) when the device KV budget is short: victims are the least urgent, then the longest
remaining. Keep-vs-recompute of a victim's prompt KV (the paper's sentence states it backwards; this is the
minimiser of its own cost): offload (keep) if b < a1 n + a2, i.e. reloading n tokens (b per token) is cheaper than
recomputing them, else discard and recompute. Decoded-token KV is always kept (printed Eq. 6 is not the minimiser
of its cost: recompute token i only if g1 i + g2 < b, which never holds for realistic b). The decision is priced
into the victim's f_t; the engines here always keep suspended KV (offload to host), so "recompute" is not executed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from timely_llm_ros.core.admission import kv_need_bytes
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.options import PolicyOptions
from timely_llm_ros.core.policies.predicted import PredictedLengths

DEFAULT_CLASS_LEVELS = {"urgent": 1, "normal": 3}


@dataclass(frozen=True)
class SemanticOptions(PolicyOptions):
    a1: float = 1.0e-8                  # prefill time model a1 n^2 + a2 n (defaults: config/latency/llama3-8b-
    a2: float = 8.0e-5                  # rtx4090.yaml)
    g1: float = 2.5e-7                  # decode step time model g1 * KV tokens + g2
    g2: float = 0.0213
    b: float = 131072 / 1.8e10          # seconds per token of KV reload (128 KiB per token at 18 GB/s)
    class_levels: Mapping[str, int] = field(default_factory=dict)   # urgency class -> level, over the defaults
    classifier: Any = None              # .level(text) for requests without a known class (the composition
                                        # root offers engine/sentence_encoder.py's MiniLM one)
    length_predictor: Any = None        # .predict(task, context) -> tokens; None: the bucketed predictor


class SemanticPolicy(Policy):
    """Semantic scheduling (see module docstring)."""

    name = "semantic"
    Options = SemanticOptions
    interrupt_default = False   # its paper cuts no step short (option interrupt: true adds it)
    segmented = False

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | PolicyOptions | None = None) -> None:
        super().__init__(max_batch, options)
        o: SemanticOptions = self.options
        self.a1, self.a2, self.g1, self.g2, self.b = o.a1, o.a2, o.g1, o.g2, o.b
        self.class_levels = {**DEFAULT_CLASS_LEVELS, **dict(o.class_levels or {})}
        self._classifier = o.classifier
        self._lengths = PredictedLengths(o.length_predictor)
        self._level: dict[str, int] = {}
        self.evicted: dict[str, str] = {}    # gen id -> "offload" | "recompute" (priced into f_t)

    # ---- predictors
    def forget(self, req_id: str) -> None:
        self._level.pop(req_id, None)
        self.evicted.pop(req_id, None)
        self._lengths.forget(req_id)

    def level(self, gen: Generation) -> int:
        lv = self._level.get(gen.req_id)
        if lv is None:
            req = gen.req
            if req.urgency in self.class_levels:
                lv = int(self.class_levels[req.urgency])
            else:
                if self._classifier is None:
                    raise ValueError(f"semantic: request {req.req_id!r} names no urgency class of class_levels "
                                     f"({', '.join(sorted(self.class_levels))}) and the policy has no text "
                                     "classifier: give option classifier (timely_llm_ros/stack.py and the server "
                                     "offer engine/sentence_encoder.py's)")
                lv = int(self._classifier.level(req.task))
            self._level[gen.req_id] = lv
        return lv

    def n_hat(self, gen: Generation) -> int:
        """Predicted output tokens of gen (bucketed length predictor, cached per request)."""
        return self._lengths(gen)

    # ---- cost model
    def prefill_s(self, n: int) -> float:
        return self.a1 * n * n + self.a2 * n

    def keep_prompt_kv(self, n: int) -> bool:
        """Corrected rule: keep (offload) the prompt KV iff reloading is cheaper than recomputing: b < a1 n + a2."""
        return self.b < self.a1 * n + self.a2

    def remaining_s(self, gen: Generation) -> float:
        """f_t: predicted remaining compute time of gen."""
        n, m = len(gen.prompt_ids), len(gen.output_ids)
        left = max(self.n_hat(gen) - m, 1)
        # sum_{m'=m+1}^{m+left} g1 (n + m' - 1) + g2, in closed form
        decode = self.g1 * (left * (n + m) + left * (left - 1) / 2) + self.g2 * left
        f = decode if gen.prefilled else self.prefill_s(n) + decode
        how = self.evicted.get(gen.req_id)
        if how == "offload":
            f += self.b * (n + m)
        elif how == "recompute":
            f += self.prefill_s(n)
        return f

    def key(self, gen: Generation) -> tuple[int, float, float]:
        return self.level(gen), self.remaining_s(gen), gen.req.arrival

    def priority(self, gen: Generation, now: float) -> float:
        lv, f, _ = self.key(gen)
        return -(lv * 1e6 + f)

    # ---- selection
    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        ranked = sorted([*running, *waiting], key=self.key)
        top = ranked[:self.max_batch]
        if not top:
            return []
        if top[0].prefilled:                       # stage-aware: a decode batch, prefills wait
            top = [g for g in top if g.prefilled]
        batch: list[Generation] = []
        budget = ctx.kv_free_bytes + sum(kv_need_bytes(g, ctx.kv_bytes_per_token) for g in running)
        for g in top:                              # priority order: the least urgent / longest are evicted
            need = kv_need_bytes(g, ctx.kv_bytes_per_token)
            if batch and need > budget:
                continue
            budget -= need
            batch.append(g)
        for g in running:
            if g not in batch and g.req_id not in self.evicted:
                n = len(g.prompt_ids)
                self.evicted[g.req_id] = "offload" if self.keep_prompt_kv(n) else "recompute"
        for g in batch:
            self.evicted.pop(g.req_id, None)
        return batch
