"""From a forward's logits to each generation's next token: sampling, grammar masks, forced tokens, the end.

A constrained generation's logits row is masked to the tokens its grammar allows wherever logits become tokens
(``choose``), and its matcher advances only with the token it emits (``emit``), after its forward completed: a step
cut short, a suspension, an offload or a prompt eviction leaves the grammar state as it was (engine/grammar.py).
"""
from __future__ import annotations

import torch

from timely_llm_ros.core.engine import StepResult
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.grammar import GrammarCompiler, TokenMasks, advance
from timely_llm_ros.engine.transformers.sampling import SamplingParams, choose_tokens


class TokenChoice:
    """Sampling parameters, the grammar compiler and masks (made by the first constrained generation), the stop
    tokens."""

    def __init__(self, tokenizer, vocab_size: int, sampling: SamplingParams, eos_ids: set[int]) -> None:
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self.sampling = sampling
        self.eos_ids = eos_ids
        self.grammars: GrammarCompiler | None = None
        self.masks: TokenMasks | None = None

    def grammar_compiler(self) -> GrammarCompiler:
        """The compiler of this model's tokenizer (made on first use, with the mask buffer)."""
        if self.grammars is None:
            self.grammars = GrammarCompiler(self.tokenizer, self.vocab_size, self.eos_ids)
            self.masks = TokenMasks(self.vocab_size)
        return self.grammars

    def choose(self, logits: torch.Tensor, gens: list[GenerationState]) -> list[int]:
        """The next token of each row of ``logits [rows, vocab]`` (sampling.py), a constrained generation's among the
        tokens its grammar allows. Called once a forward has returned: on a GPU the masks are filled on the CPU while
        the forward's kernels still execute; greedy rows on a CPU are masked only where their grammar refuses their
        best token."""
        matchers = [g.matcher for g in gens]
        if self.masks is not None and any(m is not None for m in matchers):
            if self.sampling.greedy and logits.device.type == "cpu":
                return self.masks.greedy_tokens(logits, matchers)
            self.masks.apply(logits, matchers)
        return choose_tokens(logits, self.sampling, [g.generator for g in gens])

    def emit(self, gen: GenerationState, token: int, result: StepResult) -> None:
        """Append the generation's token (its forced one when replaying) and mark it finished at a stop token or
        its cap."""
        if gen.forced is not None:
            token = gen.forced[len(gen.output)]
        elif gen.matcher is not None:
            advance(gen.matcher, int(token), gen.gen_id)
        gen.output.append(int(token))
        result.tokens[gen.gen_id] = gen.output[-1]
        hit_eos = gen.forced is None and gen.output[-1] in self.eos_ids
        if hit_eos or gen.remaining() == 0:
            gen.finished = True
            result.finished.add(gen.gen_id)


def eos_ids(tokenizer, generation_config) -> set[int]:
    """The stop token ids of a model: its tokenizer's EOS and its generation config's (one id or a list)."""
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids
