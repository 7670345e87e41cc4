"""What the llamacpp engine holds for one generation: its tokens, its llama.cpp sequence, its grammar state.

A generation placed in the pool owns a sequence id; its sequence holds positions [0, kv_len). A prefilled
generation's sequence holds prompt + output[:-1], and output[-1] is its next input. Offloaded, it holds no sequence:
its KV is ``host_state`` (llama.cpp's serialised sequence state) until it is resumed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(eq=False)
class LlamaGeneration:
    """Engine-side state of one generation (the fields token_choice.TokenChoice reads are named as in the
    transformers engine's GenerationState)."""

    gen_id: str
    prompt: list[int]
    max_new_tokens: int
    forced: list[int] | None             # trace replay: the tokens it emits, whatever the logits say
    generator: torch.Generator | None    # its own sampling generator (None: greedy)
    output: list[int] = field(default_factory=list)
    seq: int | None = None               # its llama.cpp sequence id while its KV is in the pool
    kv_len: int = 0                      # positions its sequence holds
    prefilled: bool = False
    suspended: bool = False
    suspended_seq: int = 0               # order of suspension (least recent offloads first)
    finished: bool = False
    host_state: bytes | None = None      # offloaded: its sequence's state in host memory
    matcher: object | None = None        # grammar state (engine/grammar.py) of a constrained generation

    @property
    def offloaded(self) -> bool:
        return self.host_state is not None

    def remaining(self) -> int:
        """Tokens it may still emit."""
        cap = self.max_new_tokens if self.forced is None else min(self.max_new_tokens, len(self.forced))
        return max(cap - len(self.output), 0)
