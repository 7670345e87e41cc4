"""SimEngine: the Engine interface on a virtual clock, with modelled step times and KV accounting."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from timely_llm_ros.core.engine import Engine, EngineCapabilities, EngineError, MemoryStats, StepResult
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.evaluation.sim.tokenizer import PieceStream, PieceTokenizer


@dataclass
class _SimGen:
    prompt_tokens: int
    max_new_tokens: int
    forced: list[int] | None
    output: list[int] = field(default_factory=list)
    prefill_done: int = 0          # prompt tokens in KV (cached prefix included) while the prefill is chunked
    cached: int | None = None      # its prompt's tokens a prefix cache supplies (None: the latency model's figure)
    prefilled: bool = False
    suspended: bool = False
    offloaded: bool = False
    finished: bool = False

    @property
    def ctx_tokens(self) -> int:
        return self.prompt_tokens + len(self.output)


class SimEngine(Engine):
    """Simulated engine: tokens come from forced plans (trace replay); step() advances the shared clock.

    prompt_tokens pads every encoded prompt to at least that many tokens (LRTrace prompts are long in-context
    prompts); set_prompt_tokens(gen_id, n, cached) overrides the count of one generation before add(), and with
    ``cached`` how many of them a prefix cache supplies (a model whose robot types have system prompts of different
    lengths; default the latency model's cached_prefix_tokens).
    Suspended generations keep their KV on the device until the KV budget is exceeded; then the least
    recently suspended move to host memory, and resuming them costs a modelled reload in the next step.
    step_token_budget (chunked prefill): a step decodes every prefilled generation (one token each) and spends
    what is left of the budget on prompt chunks in the order given; a chunk of n tokens ending at context c
    costs a*n*c + b*n (+ c once per step), so a prompt in one chunk costs what the unchunked prefill costs.
    Interrupts: the driver sets interrupt_at(start, end) -> the time of the first arrival in (start, end) that
    interrupts the step, or None; the step then ends at the next layer boundary (LatencyModel.interrupted_s) with
    nothing generated (its KV reloads are kept), a conservative model of the real engine, which keeps the forwards
    already complete.
    """

    def __init__(self, latency: LatencyModel, clock: VirtualClock | None = None,
                 prompt_tokens: int = 0, tokenizer: PieceTokenizer | None = None,
                 step_token_budget: int | None = None) -> None:
        if step_token_budget is not None and step_token_budget < 1:
            raise ValueError(f"step_token_budget must be >= 1 or None, got {step_token_budget}")
        self.step_token_budget = step_token_budget
        self.capabilities = EngineCapabilities(interruptible=True, interrupt_granularity="layer",
                                               step_token_budget=step_token_budget, prefill_left=True, reload=True,
                                               evict_prompt_kv=True, set_prompt_tokens=True)
        self.latency = latency
        self.clock = clock or VirtualClock()
        self.prompt_tokens = prompt_tokens
        self.tokenizer = tokenizer or PieceTokenizer()
        self.eos_token_id = self.tokenizer.eos_id
        self._gens: dict[str, _SimGen] = {}
        self._suspended: OrderedDict[str, None] = OrderedDict()  # LRU order of suspension
        self._prompt_override: dict[str, int] = {}
        self._cached_override: dict[str, int] = {}
        self._prompt_seen: dict[str, int] = {}
        self._pending_reload_s = 0.0
        self.steps = 0
        self.interrupt_at: Callable[[float, float], float | None] | None = None
        self.interrupted_steps = 0

    # tokens
    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        if len(ids) < self.prompt_tokens:
            ids = [self.tokenizer.pad_id] * (self.prompt_tokens - len(ids)) + ids
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def text_stream(self) -> PieceStream:
        return self.tokenizer.stream()

    def set_prompt_tokens(self, gen_id: str, n: int, cached: int | None = None) -> None:
        """Model gen_id's prompt as n tokens long, whatever add() receives (``cached`` of them from a prefix cache)."""
        self._prompt_override[gen_id] = int(n)
        if cached is not None:
            self._cached_override[gen_id] = int(cached)

    # lifecycle
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        if gen_id in self._gens:
            raise EngineError(f"generation {gen_id!r} already added")
        n = self._prompt_override.pop(gen_id, self._prompt_seen.get(gen_id, len(prompt_ids)))
        self._prompt_seen[gen_id] = n      # a request that comes back (a replan) has as long a prompt
        self._gens[gen_id] = _SimGen(n, max_new_tokens, list(forced_ids) if forced_ids is not None else None,
                                     cached=self._cached_override.get(gen_id))

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        gens = [(gid, self._get(gid)) for gid in gen_ids]
        for gid, g in gens:
            if g.suspended:
                raise EngineError(f"generation {gid!r} is suspended; resume it before stepping")
            if g.finished:
                raise EngineError(f"generation {gid!r} already finished")
        before = [g.prefill_done for _, g in gens]
        prefills: list[tuple[int, int]] = []
        decode_batch = decode_kv = 0
        for _, g in gens:
            if g.prefilled:
                decode_batch += 1
                decode_kv += g.ctx_tokens
        room = None if self.step_token_budget is None else max(self.step_token_budget - decode_batch, 0)
        completes: set[int] = set()
        for _, g in gens:
            if g.prefilled:
                continue
            if not g.prefill_done:
                g.prefill_done = self._cached(g)
            n = g.prompt_tokens - g.prefill_done if room is None else min(room, g.prompt_tokens - g.prefill_done)
            if n <= 0:
                continue
            g.prefill_done += n
            prefills.append((n, g.prefill_done))
            if room is not None:
                room -= n
            if g.prefill_done >= g.prompt_tokens:
                completes.add(id(g))
        reload_s, self._pending_reload_s = self._pending_reload_s, 0.0
        elapsed = self.latency.step_s(prefills, decode_batch, decode_kv) + reload_s
        cut = self._cut(elapsed, reload_s)
        if cut is not None:
            for (_, g), done in zip(gens, before):
                g.prefill_done = done
            self.interrupted_steps += 1
            self.clock.advance(cut + self.latency.step_overhead_s)
            self.steps += 1
            return StepResult(tokens={}, elapsed_s=cut, interrupted=True)
        result = StepResult(tokens={}, elapsed_s=elapsed)
        for gid, g in gens:
            if not g.prefilled:
                if id(g) not in completes:
                    continue               # its prompt is not complete yet: no token this step
                g.prefilled = True
                result.prefilled.append(gid)
            tok = self._next_token(g)
            g.output.append(tok)
            result.tokens[gid] = tok
            if self._done(g, tok):
                g.finished = True
                result.finished.add(gid)
        self._fit_budget()
        self.clock.advance(elapsed + self.latency.step_overhead_s)   # the serving loop's own time passes too
        self.steps += 1
        return result

    def _cut(self, elapsed: float, reload_s: float) -> float | None:
        """Where this step ends if an arrival interrupts it (None: it runs whole)."""
        if self.interrupt_at is None:
            return None
        t0 = self.clock.now
        at = self.interrupt_at(t0, t0 + elapsed)
        if at is None:
            return None
        cut = self.latency.interrupted_s(elapsed, reload_s, at - t0)
        return cut if cut < elapsed else None

    def prefill_left(self, gen_id: str) -> int | None:
        g = self._get(gen_id)
        if g.prefilled:
            return 0
        return g.prompt_tokens - (g.prefill_done or self._cached(g))

    def _cached(self, g: _SimGen) -> int:
        """Prompt tokens of g the prefix cache supplies (at most all but the last)."""
        cached = self.latency.cached_prefix_tokens if g.cached is None else g.cached
        return min(cached, max(g.prompt_tokens - 1, 0))

    def reload_s(self, gen_id: str) -> float:
        g = self._get(gen_id)
        return self.latency.reload_s(g.ctx_tokens) if g.offloaded else 0.0

    def suspend(self, gen_id: str) -> None:
        g = self._get(gen_id)
        g.suspended = True
        self._suspended[gen_id] = None
        self._suspended.move_to_end(gen_id)
        self._fit_budget()

    def resume(self, gen_id: str) -> None:
        g = self._get(gen_id)
        if not g.suspended:
            return
        g.suspended = False
        self._suspended.pop(gen_id, None)
        if g.offloaded:
            g.offloaded = False
            self._pending_reload_s += self.latency.reload_s(g.ctx_tokens)
            self._fit_budget()

    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        """Drop `ratio` of the prompt KV gen_id holds now (TimeBill); later decode steps attend over the rest.
        Returns the prompt tokens kept."""
        g = self._get(gen_id)
        if not 0.0 <= ratio < 1.0:
            raise EngineError(f"eviction ratio must be in [0, 1), got {ratio}")
        g.prompt_tokens = max(1, round(g.prompt_tokens * (1.0 - ratio)))
        return g.prompt_tokens

    def release(self, gen_id: str) -> None:
        self._gens.pop(gen_id, None)
        self._suspended.pop(gen_id, None)
        self._prompt_override.pop(gen_id, None)

    def memory(self) -> MemoryStats:
        per = self.latency.kv_bytes_per_token
        dev = sum(g.ctx_tokens for g in self._gens.values() if g.prefilled and not g.offloaded) * per
        host = sum(g.ctx_tokens for g in self._gens.values() if g.offloaded) * per
        return MemoryStats(kv_device_bytes=dev, kv_host_bytes=host, kv_budget_bytes=self.latency.kv_budget_bytes,
                           kv_bytes_per_token=per, generations=len(self._gens))

    # internals
    def _get(self, gen_id: str) -> _SimGen:
        try:
            return self._gens[gen_id]
        except KeyError:
            raise EngineError(f"unknown generation {gen_id!r}") from None

    def _next_token(self, g: _SimGen) -> int:
        if g.forced is not None:
            i = len(g.output)
            return g.forced[i] if i < len(g.forced) else self.tokenizer.eos_id
        return self.tokenizer.pad_id

    def _done(self, g: _SimGen, tok: int) -> bool:
        if len(g.output) >= g.max_new_tokens or tok == self.tokenizer.eos_id:
            return True
        return g.forced is not None and len(g.output) >= len(g.forced)

    def _fit_budget(self) -> None:
        """Offload least recently suspended KV to host while the device is over budget."""
        mem = self.memory()
        over = mem.kv_device_bytes - mem.kv_budget_bytes
        for gid in list(self._suspended):
            if over <= 0:
                break
            g = self._gens[gid]
            if g.prefilled and not g.offloaded:
                g.offloaded = True
                over -= g.ctx_tokens * self.latency.kv_bytes_per_token
