"""RoutedEngine: two Engine instances behind one, each generation on the one a routing flag picks (RT-LM offload).

route(gen_id) -> True sends a generation to the secondary instance (e.g. a CPU engine beside a GPU one); it is
asked at the generation's first step, so a policy can decide from the request before anything runs. The
scheduler keeps driving one engine; it needs no change.

Timing. The two instances work in parallel: the primary's step is what the caller waits for; a secondary step
is launched beside it and its tokens are delivered by the first step() that finds it complete. On a virtual
clock (simulation) the secondary SimEngine runs on a private clock and its finish time is primary-start + its
modelled time; with real engines (a WallClock) the secondary step runs inline after the primary's, so its time
is serial, not overlapped (true overlap needs a second process: not built). When both instances would be the
same CPU, do not build a RoutedEngine: run the policy with offload=False on the one engine (see rtlm.py).
"""
from __future__ import annotations

from typing import Callable, Sequence

from timely_llm_ros.core.engine import Engine, EngineError, EngineWrapper, MemoryStats, StepResult


class RoutedEngine(EngineWrapper):
    """primary + secondary engines; route(gen_id) True = secondary. clock: the caller's clock (now, advance_to);
    needed only when the secondary is simulated on its own clock (sim=True). Tokenizer and planning flags are the
    primary's (EngineWrapper)."""

    def __init__(self, primary: Engine, secondary: Engine, route: Callable[[str], bool] | None = None,
                 clock=None, sim: bool = False) -> None:
        super().__init__(primary)
        self.primary, self.secondary = primary, secondary
        self.route = route or (lambda gen_id: False)
        self.clock, self.sim = clock, sim
        if sim and clock is None:
            raise ValueError("RoutedEngine(sim=True) needs the shared clock")
        self._pending: dict[str, tuple] = {}        # gen id -> add() arguments, until its first step
        self._where: dict[str, Engine] = {}
        self._inflight: StepResult | None = None    # secondary step whose tokens are not delivered yet
        self._ready_at = 0.0
        self.secondary_ids: set[str] = set()

    def set_prompt_tokens(self, gen_id: str, n: int, cached: int | None = None) -> None:
        """Forwarded to both (only the chosen one keeps it)."""
        self._forward_prompt_tokens((self.primary, self.secondary), gen_id, n, cached)

    def prepare_grammar(self, grammar: str) -> None:
        for eng in (self.primary, self.secondary):
            eng.prepare_grammar(grammar)

    def prefill_left(self, gen_id: str) -> int | None:
        eng = self._where.get(gen_id)
        return eng.prefill_left(gen_id) if eng is not None else None

    def reload_s(self, gen_id: str) -> float:
        eng = self._where.get(gen_id)
        return eng.reload_s(gen_id) if eng is not None else 0.0

    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        if gen_id in self._pending or gen_id in self._where:
            raise EngineError(f"generation {gen_id!r} already added")
        self._pending[gen_id] = (list(prompt_ids), max_new_tokens, forced_ids, grammar)

    def _engine(self, gen_id: str) -> Engine:
        if gen_id in self._pending:
            eng = self.secondary if self.route(gen_id) else self.primary
            eng.add(gen_id, *self._pending.pop(gen_id))
            other = self.primary if eng is self.secondary else self.secondary
            other.release(gen_id)  # drop a forwarded prompt-length override
            self._where[gen_id] = eng
            if eng is self.secondary:
                self.secondary_ids.add(gen_id)
        try:
            return self._where[gen_id]
        except KeyError:
            raise EngineError(f"unknown generation {gen_id!r}") from None

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        first = [g for g in gen_ids if self._engine(g) is self.primary]
        second = [g for g in gen_ids if self._where[g] is self.secondary]
        t0 = self.clock.now if self.clock is not None else 0.0
        out = self.primary.step(first) if first else StepResult(tokens={})
        if second and self._inflight is None:
            res = self.secondary.step([g for g in second if g in self._where])
            self._inflight, self._ready_at = res, t0 + res.elapsed_s
        if self._inflight is not None:
            if self.sim and not first and self.clock.now < self._ready_at:
                self.clock.advance_to(self._ready_at)  # only the secondary works: wait for it
            if not self.sim or self.clock.now >= self._ready_at:
                res, self._inflight = self._inflight, None
                res.tokens = {g: t for g, t in res.tokens.items() if g in gen_ids}  # policy keeps them batched
                out.tokens.update({g: t for g, t in res.tokens.items() if g in self._where})
                out.finished |= {g for g in res.finished if g in self._where}
                out.prefilled += [g for g in res.prefilled if g in self._where]
                if not first:
                    out.elapsed_s = res.elapsed_s
        return out

    def suspend(self, gen_id: str) -> None:
        if gen_id not in self._pending:
            self._engine(gen_id).suspend(gen_id)

    def resume(self, gen_id: str) -> None:
        if gen_id not in self._pending:
            self._engine(gen_id).resume(gen_id)

    def release(self, gen_id: str) -> None:
        self._pending.pop(gen_id, None)
        eng = self._where.pop(gen_id, None)
        for e in (self.primary, self.secondary) if eng is None else (eng,):
            e.release(gen_id)

    def memory(self) -> MemoryStats:
        a, b = self.primary.memory(), self.secondary.memory()
        return MemoryStats(a.kv_device_bytes, a.kv_host_bytes + b.kv_device_bytes + b.kv_host_bytes,
                           a.kv_budget_bytes, a.kv_bytes_per_token, a.generations + b.generations)

    def failure(self) -> str | None:
        return self.primary.failure() or self.secondary.failure()

    def close(self) -> None:
        self.primary.close()
        self.secondary.close()
