"""Per-generation bookkeeping the engines share: the checks an add() must pass and lookups that say why one fails."""
from __future__ import annotations

from typing import Any, Callable, Container, Sequence

from timely_llm_ros.core.engine import EngineError


def check_new(existing: Container[str], gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    """Refuse an add() that names an existing generation, has no prompt or no room for a token."""
    if gen_id in existing:
        raise EngineError(f"add: generation {gen_id!r} already exists")
    if not prompt_ids:
        raise EngineError(f"add: generation {gen_id!r} has an empty prompt")
    if max_new_tokens < 1:
        raise EngineError(f"add: generation {gen_id!r} needs max_new_tokens >= 1, got {max_new_tokens}")


class GenerationTable:
    """Mixin for engines that keep per-generation state in ``self._gens`` (objects with gen_id, suspended and
    finished) and remember released ids in ``self._released``: lookups and step checks with errors that say why."""

    _gens: dict[str, Any]
    _released: set[str]

    def _get(self, gen_id: str, op: str) -> Any:
        gen = self._gens.get(gen_id)
        if gen is None:
            state = "was released" if gen_id in self._released else "was never added"
            raise EngineError(f"{op}: unknown generation {gen_id!r} ({state})")
        return gen

    _REMEMBER_RELEASED = 4096   # released ids remembered for error messages (bounded: servers run for days)

    def _mark_released(self, gen_id: str) -> None:
        if len(self._released) >= self._REMEMBER_RELEASED:
            self._released.pop()
        self._released.add(gen_id)

    def _check_new(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        check_new(self._gens, gen_id, prompt_ids, max_new_tokens)

    @staticmethod
    def _forced_output(gen_id: str, forced_ids: Sequence[int] | None, bos_id: int | None) -> list[int] | None:
        """An add()'s forced output as a list (None: the generation decodes), without the BOS an encode() of a plan
        may prepend (it is no output)."""
        if forced_ids is None:
            return None
        if len(forced_ids) == 0:
            raise EngineError(f"add: generation {gen_id!r} has empty forced_ids")
        forced = [int(t) for t in forced_ids]
        return forced[1:] if len(forced) > 1 and forced[0] == bos_id else forced

    def _admit(self, gen: Any, grammar: str | None, compiler: Callable[[], Any]) -> None:
        """Register a new generation (``gen.forced`` set by _forced_output): under ``grammar``, its matcher made by
        ``compiler()``, unless its output is forced (a replay is never masked)."""
        if grammar is not None and gen.forced is None:
            gen.matcher = compiler().matcher(grammar)
        self._released.discard(gen.gen_id)
        self._gens[gen.gen_id] = gen

    def _runnable(self, gen_ids: Sequence[str]) -> list[Any]:
        gens = [self._get(g, "step") for g in gen_ids]
        if len(set(gen_ids)) != len(gen_ids):
            raise EngineError(f"step: duplicate generation ids in {list(gen_ids)}")
        for gen in gens:
            if gen.suspended:
                raise EngineError(f"step: generation {gen.gen_id!r} is suspended; resume() it first")
            if gen.finished:
                raise EngineError(f"step: generation {gen.gen_id!r} already finished; release() it")
        return gens
