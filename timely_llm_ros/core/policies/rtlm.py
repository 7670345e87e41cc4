"""RT-LM (uncertainty-aware real-time LM serving): UP priority from a predicted output length, consolidation of
similar lengths, offload of very long requests to a second engine instance.

    u   = predicted output tokens (MLP on six rule features of the text, core/predictors/length.py)
    u_n = u / tau, capped below 1  (tau = 90th percentile of the training u; the paper writes u, but with raw u
          the numerator 1 - alpha*u is negative and the priority order inverts: we normalise, as its text says)
    p   = (1 - alpha * u_n) / (d - t - eta * u)       alpha = 1.0, eta = seconds per output token (measured)
    slack d - t - eta*u <= 0: most urgent (ordered by the most negative slack first)

d is arrival + time_budget_s when the request has a budget, else the zero crossing of its TUF (when the plan
stops earning anything). Consolidation: the top C_f waiting tasks by p are sorted by u and cut where u jumps by
more than lambda = 1.5x (option lam); the group holding the highest-p task joins the batch (running tasks stay:
RT-LM does not preempt). Offload: a task with u > tau is flagged for the second engine instance (engine/routed.py
routes it; its own batch slots, max_batch_secondary). With offload=False (both instances would be the same CPU),
long tasks stay on the one engine and simply rank low through u_n.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.options import PolicyOptions
from timely_llm_ros.core.policies.predicted import hard_deadline


@dataclass(frozen=True)
class RtlmOptions(PolicyOptions):
    predictor: Any = None               # output-length predictor (.predict, .tau); None: the rule-feature MLP
    alpha: float = 1.0                  # weight of the normalised predicted length in the priority
    eta_s: float = 0.022                # seconds per output token
    lam: float = 1.5                    # consolidation: cut the top c_f where u jumps by more than this ratio (> 1)
    c_f: int | None = None              # tasks considered for consolidation (None: max_batch)
    tau: float | None = None            # length normalising u and marking offload (None: the predictor's)
    offload: bool = True                # predicted lengths above tau go to the second engine instance
    max_batch_secondary: int = 4        # the second instance's batch slots
    static: bool = False                # the paper's batch-level serving: a batch runs to its end


class RtlmPolicy(Policy):
    """RT-LM (see module docstring)."""

    name = "rtlm"
    Options = RtlmOptions
    interrupt_default = False   # its paper cuts no step short (option interrupt: true adds it)
    segmented = False

    def __init__(self, max_batch: int = 16, options: Mapping[str, Any] | RtlmOptions | None = None) -> None:
        super().__init__(max_batch, options)
        from timely_llm_ros.core.predictors.length import default_rule_predictor

        o: RtlmOptions = self.options
        self.predictor = o.predictor or default_rule_predictor()
        self.alpha = o.alpha
        self.eta_s = o.eta_s
        self.lam = o.lam
        self.c_f = max_batch if o.c_f is None else o.c_f
        self.tau = float(self.predictor.tau if o.tau is None else o.tau)
        self.offload = o.offload
        self.max_batch_secondary = o.max_batch_secondary
        self.static = o.static
        if self.lam <= 1.0 or self.tau <= 0 or self.c_f < 1:
            raise ValueError("rtlm: need lam > 1, tau > 0, c_f >= 1")
        self._u: dict[str, float] = {}
        self._secondary: set[str] = set()

    def forget(self, req_id: str) -> None:
        self._u.pop(req_id, None)
        self._secondary.discard(req_id)

    def u(self, gen: Generation) -> float:
        """Predicted output tokens of gen (cached per request)."""
        u = self._u.get(gen.req_id)
        if u is None:
            u = self._u[gen.req_id] = float(self.predictor.predict(gen.req.task, gen.req.context))
            if self.offload and u > self.tau:
                self._secondary.add(gen.req_id)
        return u

    def routes_to_secondary(self, gen_id: str) -> bool:
        """Routing flag for engine/routed.py: is this generation offloaded to the second instance?"""
        return gen_id in self._secondary

    def side(self, gen: Generation) -> bool:
        """True when gen runs on the second instance (decided at first sight, from u)."""
        self.u(gen)
        return gen.req_id in self._secondary

    def deadline(self, gen: Generation) -> float:
        return hard_deadline(gen.req)

    def priority(self, gen: Generation, now: float) -> float:
        u = self.u(gen)
        u_n = min(u / self.tau, 0.99)
        slack = self.deadline(gen) - now - self.eta_s * u
        if slack <= 0:
            return 1e6 - slack  # already late: most urgent, the latest first
        return (1.0 - self.alpha * u_n) / slack

    def consolidate(self, popped: Sequence[Generation]) -> list[list[Generation]]:
        """Sort by u and cut into groups where u jumps by more than lambda or a group reaches C_f."""
        groups: list[list[Generation]] = []
        for g in sorted(popped, key=self.u):
            if groups and len(groups[-1]) < self.c_f and self.u(g) <= self.lam * max(self.u(groups[-1][-1]), 1.0):
                groups[-1].append(g)
            else:
                groups.append([g])
        return groups

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        if ctx.step_time_s:
            self.eta_s = 0.8 * self.eta_s + 0.2 * ctx.step_time_s
        now = ctx.now
        batch = list(running)
        for side, cap in ((False, self.max_batch), (True, self.max_batch_secondary)):
            busy = sum(self.side(g) == side for g in batch)
            room = 0 if (self.static and busy) else cap - busy
            cands = [g for g in waiting if self.side(g) == side]
            if room <= 0 or not cands:
                continue
            popped = sorted(cands, key=lambda g: self.priority(g, now), reverse=True)[:self.c_f]
            top = popped[0]
            group = next(gr for gr in self.consolidate(popped) if top in gr)
            group.sort(key=lambda g: self.priority(g, now), reverse=True)
            batch.extend(group[:room])
        return batch


class FifoStatic(Policy):
    """RT-LM's FIFO baseline: batch-level serving, the next max_batch requests in arrival order start together
    once the running batch has finished (no request joins a running batch)."""

    name = "fifo-static"
    interrupt_default = False   # its paper cuts no step short (option interrupt: true adds it)
    segmented = False

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        if running:
            return list(running)
        return super().select(waiting, running, ctx)
