"""The engine interface the scheduler drives, one decode step at a time, and the text-stream protocol it reads
each generation's output through.

The core owns it: the engines in timely_llm_ros/engine implement it, and so does the simulator (evaluation/sim).
Generations are identified by the request id. A step runs exactly the generations it is given: those not yet
prefilled are prefilled (their first output token comes from the prefill), the others decode one token. With chunked
prefill (step_token_budget set) a step decodes every prefilled generation and spends the rest of the budget on
prompt chunks, in the order the ids are given; a generation whose prompt is not complete yet emits no token in that
step.

What an engine can do beyond the abstract methods it declares in ``Engine.capabilities`` (EngineCapabilities); the
scheduler, the composition root and the engine process read that declaration and never probe an engine's attributes.

Interrupts (engines whose capabilities say ``interruptible``): the driver sets ``interrupt_check``, a callable the
engine asks between decoder layers of every forward in a step (or, where ``interrupt_granularity`` says "graph-node", every few
milliseconds while a forward runs); when it returns True the step ends there. The forwards already
complete keep their tokens; the generations of the forward cut short emit nothing and are left exactly as before
the step (their partial KV writes are overwritten when they run again), and the result says ``interrupted``.
"""
from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence


class TextStream(Protocol):
    """The text of one generation's output, token by token."""

    def push(self, token_id: int) -> str:
        """Append a token; return the text it completes ("" while a character is still incomplete)."""


class PrefixDiffStream:
    """Any tokenizer: decode the whole output after each token and return what is new since the last call."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode, self._ids, self._text = decode, [], ""

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        text = self._decode(self._ids)
        if text.endswith("\ufffd"):      # wait for the rest of a multi-byte character
            return ""
        delta, self._text = text[len(self._text):], text
        return delta


class EngineError(RuntimeError):
    """An engine failure the server reports as GENERATION_FAILED."""


@dataclass
class StepResult:
    """Output of one engine step."""

    tokens: dict[str, int]                            # gen id -> token emitted this step
    finished: set[str] = field(default_factory=set)   # gens that emitted EOS or hit their cap
    elapsed_s: float = 0.0                            # measured (real) or modelled (simulated) step time
    prefilled: list[str] = field(default_factory=list)  # gens prefilled in this step
    interrupted: bool = False                         # cut short at a layer boundary by interrupt_check: gens
                                                      # without a token here did not advance


INTERRUPT_GRANULARITIES = ("layer", "graph-node", "step")


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine declares it can do beyond the abstract Engine methods. The defaults are those of the least
    capable engine: a caller may rely on a feature only where its field says so."""

    interruptible: bool = False           # asks interrupt_check while a step runs and can end the step early
    interrupt_granularity: str = "step"   # where an interrupt ends a step: "layer" (interrupt_check asked between
                                          # decoder layers), "graph-node" (asked every few milliseconds while a
                                          # forward runs; the forward ends after its graph node in flight), "step"
                                          # (never inside a step: an arrival waits for the step in flight)
    interrupt_poll_s: float | None = None  # "graph-node": how often interrupt_check is asked (None: not stated)
    fused_steps: bool = False             # prefills and decodes of a step run in one forward (vLLM); False: the
                                          # decode pass of the members already prefilled runs after the prefill
                                          # forwards, on its own
    step_token_budget: int | None = None  # chunked prefill: tokens (decodes + prefill chunks) per step; None = off
    replays_forced_ids: bool = True       # add(..., forced_ids=...) is honoured (False: the engine refuses it)
    prefill_left: bool = False            # prefill_left(gen_id) reports the prompt tokens left (after prefix-cache
                                          # reuse); False: it answers None and the scheduler assumes the whole prompt
    reload: bool = False                  # reload_s(gen_id) estimates bringing offloaded KV back (False: always 0)
    evict_prompt_kv: bool = False         # evict_prompt_kv(gen_id, ratio) drops a share of a prefilled prompt's KV
    set_prompt_tokens: bool = False       # simulated engine: set_prompt_tokens(gen_id, n, cached) models the prompt
                                          # length instead of the token ids given to add()

    def __post_init__(self) -> None:
        if self.interrupt_granularity not in INTERRUPT_GRANULARITIES:
            raise ValueError(f"interrupt_granularity must be one of {INTERRUPT_GRANULARITIES}, "
                             f"got {self.interrupt_granularity!r}")
        if self.interruptible == (self.interrupt_granularity == "step"):
            raise ValueError("an interruptible engine ends steps at a 'layer' or 'graph-node' boundary, any other "
                             f"at 'step' (got interruptible={self.interruptible}, "
                             f"interrupt_granularity={self.interrupt_granularity!r})")
        if self.step_token_budget is not None and self.step_token_budget < 1:
            raise ValueError(f"step_token_budget must be >= 1 or None, got {self.step_token_budget}")


@dataclass
class MemoryStats:
    """KV memory accounting (bytes)."""

    kv_device_bytes: float          # KV resident on the compute device
    kv_host_bytes: float            # KV of suspended generations offloaded to host memory
    kv_budget_bytes: float          # configured device KV budget (inf = unbounded)
    kv_bytes_per_token: float       # KV size of one token of context
    generations: int = 0            # generations holding state


class Engine(ABC):
    """A step-controlled LLM engine with suspend/resume that keeps KV and token ids."""

    capabilities: EngineCapabilities = EngineCapabilities()   # what this engine declares (an engine whose
                                                               # features depend on its options sets its own)
    eos_token_id: int | None = None
    bos_token_id: int | None = None  # the tokenizer's BOS (None: it has none); prompts start with it where asked
    max_context: int | None = None   # prompt + output tokens the model can attend over (None = unbounded)
    interrupt_check: Callable[[], bool] | None = None   # set by the driver (scheduler thread, simulator), held
                                                         # weakly (weak_method) when the driver owns the engine

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Tokenize a prompt."""

    @abstractmethod
    def decode(self, token_ids: Sequence[int]) -> str:
        """Detokenize output ids."""

    def text_stream(self) -> TextStream:
        """A detokenizer for one generation's output, token by token (the scheduler makes one per generation).
        This default decodes the whole output each token; engines with a byte-level tokenizer do better."""
        return PrefixDiffStream(self.decode)

    def has_chat_template(self) -> bool:
        """Whether encode_chat can render prompts with the model's chat template."""
        return bool(getattr(getattr(self, "tokenizer", None), "has_chat_template", False))

    def encode_chat(self, messages: Sequence[Mapping[str, str]], add_bos: bool = False,
                    add_generation_prompt: bool = True) -> list[int]:
        """Tokenize a conversation with the model's chat template, turn-aligned, BOS first when ``add_bos``
        (engine/tokenizer.py HFTokenizer.encode_chat); EngineError when the model has no chat template."""
        encode = getattr(getattr(self, "tokenizer", None), "encode_chat", None)
        if encode is None:
            raise EngineError(f"{type(self).__name__}: this engine's tokenizer cannot render a chat template; use "
                              "a model entry with chat_template: false")
        return encode(messages, add_bos, add_generation_prompt)

    @abstractmethod
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        """Register a generation; its prefill runs in the first step that includes it.

        forced_ids (trace replay): emit exactly these tokens, then finish, while still running
        real forward passes.
        grammar: constrain the output to this grammar (Lark for llguidance, core/skills/grammar.py): each token is one the
        grammar allows after the output so far, and EOS comes exactly where the grammar accepts the output. Ignored
        when forced_ids is given; an engine that cannot constrain ignores it too.
        """

    @abstractmethod
    def step(self, gen_ids: Sequence[str]) -> StepResult:
        """Run one batched step for exactly these generations."""

    @abstractmethod
    def suspend(self, gen_id: str) -> None:
        """Take a generation out of the running set, keeping its KV cache and token ids."""

    @abstractmethod
    def resume(self, gen_id: str) -> None:
        """Bring a suspended generation back (reloads offloaded KV); no prefill, no re-tokenization."""

    @abstractmethod
    def release(self, gen_id: str) -> None:
        """Free everything a generation holds (cancel or completion)."""

    @abstractmethod
    def memory(self) -> MemoryStats:
        """Current KV memory accounting."""

    def prepare_grammar(self, grammar: str) -> None:
        """Compile a grammar ahead of the adds that will use it, so that the first of them does not wait for the
        compilation. Optional: by default nothing happens here and add() compiles."""

    def prefill_left(self, gen_id: str) -> int | None:
        """Prompt tokens gen_id still has to prefill (after any prefix-cache reuse and chunks already run);
        None if the engine does not know (the scheduler then assumes the whole prompt). capabilities.prefill_left."""
        return None

    def reload_s(self, gen_id: str) -> float:
        """Estimated time to bring gen_id's offloaded KV back to the device on resume (0 when resident).
        capabilities.reload."""
        return 0.0

    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        """Drop `ratio` of the prompt KV gen_id holds now (a prefilled generation); returns the tokens kept.
        capabilities.evict_prompt_kv; an engine that does not declare it raises."""
        raise EngineError(f"{type(self).__name__} cannot evict prompt KV (capabilities.evict_prompt_kv is False): "
                          "run a policy that evicts on an engine that declares it")

    def set_prompt_tokens(self, gen_id: str, n: int, cached: int | None = None) -> None:
        """Simulated engines: model gen_id's prompt as `n` tokens, `cached` of them a reusable prefix (None: the
        engine's default). capabilities.set_prompt_tokens; an engine that does not declare it raises."""
        raise EngineError(f"{type(self).__name__} models no prompt length (capabilities.set_prompt_tokens is "
                          "False): only a simulated engine takes one")

    def describe(self) -> str:
        """One line for the configure log: the model this engine runs and how ("" when it has nothing to say)."""
        return ""

    def failure(self) -> str | None:
        """Why this engine can take no more work (it runs in a process that has died, so every later call fails),
        or None while it can. Cheap: the server asks it every state period for /diagnostics."""
        return None

    def close(self) -> None:
        """Free the model (lifecycle cleanup)."""


class EngineWrapper(Engine):
    """Base of engines that change how another engine's steps run (eviction, routing): the tokenizer, the text
    stream, the capabilities and model facts policies plan with (eos, context) and the per-generation facts
    admission asks (prompt left to prefill, reload time, a simulated prompt length) are the wrapped engine's unless
    a subclass says otherwise."""

    def __init__(self, wrapped: Engine) -> None:
        self.wrapped = wrapped
        self.capabilities = wrapped.capabilities
        self.eos_token_id = wrapped.eos_token_id
        self.bos_token_id = wrapped.bos_token_id
        self.max_context = wrapped.max_context

    def encode(self, text: str) -> list[int]:
        return self.wrapped.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.wrapped.decode(token_ids)

    def text_stream(self) -> TextStream:
        return self.wrapped.text_stream()

    def has_chat_template(self) -> bool:
        return self.wrapped.has_chat_template()

    def encode_chat(self, messages: Sequence[Mapping[str, str]], add_bos: bool = False,
                    add_generation_prompt: bool = True) -> list[int]:
        return self.wrapped.encode_chat(messages, add_bos, add_generation_prompt)

    def prepare_grammar(self, grammar: str) -> None:
        self.wrapped.prepare_grammar(grammar)

    def describe(self) -> str:
        return self.wrapped.describe()

    def failure(self) -> str | None:
        return self.wrapped.failure()

    def prefill_left(self, gen_id: str) -> int | None:
        return self.wrapped.prefill_left(gen_id)

    def reload_s(self, gen_id: str) -> float:
        return self.wrapped.reload_s(gen_id)

    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        return self.wrapped.evict_prompt_kv(gen_id, ratio)

    def set_prompt_tokens(self, gen_id: str, n: int, cached: int | None = None) -> None:
        self._forward_prompt_tokens((self.wrapped,), gen_id, n, cached)

    @staticmethod
    def _forward_prompt_tokens(engines: Sequence[Engine], gen_id: str, n: int, cached: int | None = None) -> None:
        """The prompt-length override goes to the engines that declare one (simulated); real ones take none."""
        for e in engines:
            if e.capabilities.set_prompt_tokens:
                e.set_prompt_tokens(gen_id, n, cached)


def weak_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` (bound) held weakly: its object may own the engine that keeps this callable (interrupt_check), and a
    strong reference would make the two a cycle that only Python's cycle collector frees, KV store included. Once
    the object is gone the callable returns None."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        target = ref()
        return None if target is None else target(*args)
    return call
