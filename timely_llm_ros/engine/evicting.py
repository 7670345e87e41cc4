"""EvictingEngine: applies a policy's prompt-KV eviction ratios (TimeBill) to an engine that can evict.

ratios(gen_id) -> the total fraction of the original prompt KV to evict (0 = keep all). Before every step the
wrapper evicts what is still due from each prefilled generation in the step, through the inner engine's
evict_prompt_kv(gen_id, ratio) (ratio of what it holds now), so the scheduler needs no change.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .base import Engine, EngineError, MemoryStats, StepResult
from .detokenize import TextStream


class EvictingEngine(Engine):
    """Wraps an engine with evict_prompt_kv; ratios(gen_id) gives the wanted total eviction ratio."""

    def __init__(self, inner: Engine, ratios: Callable[[str], float]) -> None:
        if not callable(getattr(inner, "evict_prompt_kv", None)):
            raise EngineError(f"{type(inner).__name__} cannot evict prompt KV (no evict_prompt_kv)")
        self.inner, self.ratios = inner, ratios
        self.eos_token_id = inner.eos_token_id
        self.max_context = inner.max_context
        self.step_token_budget = inner.step_token_budget   # class attributes on Engine: __getattr__ never sees them
        self.fused_steps = inner.fused_steps
        self.applied: dict[str, float] = {}
        self._prefilled: set[str] = set()

    def __getattr__(self, name: str):
        # anything else the scheduler may ask (prefill_left, reload_s, step_token_budget, ...) is the inner engine's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def prefill_left(self, gen_id: str) -> int | None:
        return self.inner.prefill_left(gen_id)

    def reload_s(self, gen_id: str) -> float:
        return self.inner.reload_s(gen_id)

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.inner.decode(token_ids)

    def text_stream(self) -> TextStream:
        return self.inner.text_stream()

    def set_prompt_tokens(self, gen_id: str, n: int) -> None:
        f = getattr(self.inner, "set_prompt_tokens", None)
        if callable(f):
            f(gen_id, n)

    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None) -> None:
        self.inner.add(gen_id, prompt_ids, max_new_tokens, forced_ids)

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        for g in gen_ids:
            if g not in self._prefilled:
                continue
            want, done = min(self.ratios(g), 0.99), self.applied.get(g, 0.0)
            if want > done + 1e-9:
                self.inner.evict_prompt_kv(g, 1.0 - (1.0 - want) / (1.0 - done))
                self.applied[g] = want
        res = self.inner.step(gen_ids)
        self._prefilled.update(res.prefilled)
        return res

    def suspend(self, gen_id: str) -> None:
        self.inner.suspend(gen_id)

    def resume(self, gen_id: str) -> None:
        self.inner.resume(gen_id)

    def release(self, gen_id: str) -> None:
        self._prefilled.discard(gen_id)
        self.inner.release(gen_id)

    def memory(self) -> MemoryStats:
        return self.inner.memory()

    def close(self) -> None:
        self.inner.close()


def with_policy_eviction(engine: Engine, policy) -> Engine:
    """The engine wrapped so that a policy deciding prompt-KV eviction (TimeBill's prompt_kv_eviction) evicts for
    real; any other policy, or an engine that cannot evict, gets the engine unchanged."""
    ratios = getattr(policy, "prompt_kv_eviction", None)
    if callable(ratios) and callable(getattr(engine, "evict_prompt_kv", None)):
        return EvictingEngine(engine, ratios)
    return engine
