"""EvictingEngine: applies a policy's prompt-KV eviction ratios (TimeBill) to an engine that can evict.

ratios(gen_id) -> the total fraction of the original prompt KV to evict (0 = keep all). Before every step the
wrapper evicts what is still due from each prefilled generation in the step, through the inner engine's
evict_prompt_kv(gen_id, ratio) (ratio of what it holds now), so the scheduler needs no change. Torch-free: the
policy decides the ratios and the engine evicts; the composition (core/composition.py) puts the wrapper in place
whenever a policy is set, at configure and on a live change alike.
"""
from __future__ import annotations

from typing import Callable, Sequence

from timely_llm_ros.core.engine import Engine, EngineError, EngineWrapper, MemoryStats, StepResult


class EvictingEngine(EngineWrapper):
    """Wraps an engine with evict_prompt_kv; ratios(gen_id) gives the wanted total eviction ratio."""

    def __init__(self, inner: Engine, ratios: Callable[[str], float]) -> None:
        if not inner.capabilities.evict_prompt_kv:
            raise EngineError(f"{type(inner).__name__} cannot evict prompt KV (capabilities.evict_prompt_kv is "
                              "False): run the policy without eviction or on an engine that declares it")
        super().__init__(inner)
        self.ratios = ratios
        self.applied: dict[str, float] = {}
        self._prefilled: set[str] = set()

    # the driver's interrupt wiring reaches the engine that runs the layers (set through the wrapper, kept when a
    # live policy change unwraps it again)
    @property
    def interrupt_check(self):  # type: ignore[override]
        return self.wrapped.interrupt_check

    @interrupt_check.setter
    def interrupt_check(self, check) -> None:
        self.wrapped.interrupt_check = check

    def __getattr__(self, name: str):
        # anything else a caller may ask of an engine (evict_prompt_kv, kv_tokens, ...) is the inner engine's
        if name == "wrapped":        # not set yet (during __init__): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        self.wrapped.add(gen_id, prompt_ids, max_new_tokens, forced_ids, grammar)

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        for g in gen_ids:
            if g not in self._prefilled:
                continue
            want, done = min(self.ratios(g), 0.99), self.applied.get(g, 0.0)
            if want > done + 1e-9:
                self.wrapped.evict_prompt_kv(g, 1.0 - (1.0 - want) / (1.0 - done))
                self.applied[g] = want
        res = self.wrapped.step(gen_ids)
        self._prefilled.update(res.prefilled)
        return res

    def suspend(self, gen_id: str) -> None:
        self.wrapped.suspend(gen_id)

    def resume(self, gen_id: str) -> None:
        self.wrapped.resume(gen_id)

    def release(self, gen_id: str) -> None:
        self._prefilled.discard(gen_id)
        self.wrapped.release(gen_id)

    def memory(self) -> MemoryStats:
        return self.wrapped.memory()

    def close(self) -> None:
        self.wrapped.close()


def with_policy_eviction(engine: Engine, policy) -> Engine:
    """The engine wrapped so that a policy deciding prompt-KV eviction (TimeBill's prompt_kv_eviction) evicts for
    real; any other policy, or an engine that cannot evict, gets the engine unchanged (an engine already wrapped
    too: eviction is applied once)."""
    ratios = getattr(policy, "prompt_kv_eviction", None)
    if isinstance(engine, EvictingEngine):
        return engine
    if callable(ratios) and engine.capabilities.evict_prompt_kv:
        return EvictingEngine(engine, ratios)
    return engine
