"""What the transformers engine holds for one generation: its tokens, where its KV lives, its grammar state.

A prefilled generation's KV holds prompt + output[:-1]; output[-1] is its next input. The KV lives in exactly one
place: a row of the slot store (``row``), or a tensor of its own (``kv``) on the device or, ``offloaded``, in host
memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(eq=False)
class GenerationState:
    """Engine-side state of one generation."""

    gen_id: str
    prompt: list[int]
    max_new_tokens: int
    forced: list[int] | None             # trace replay: the tokens it emits, whatever the logits say
    generator: torch.Generator | None    # its own sampling generator (None: greedy)
    output: list[int] = field(default_factory=list)
    kv_len: int = 0                      # tokens of context held in KV
    kv: torch.Tensor | None = None       # own KV [layers, 2, kv_heads, kv_len, head_dim] when not in the store
    row: int | None = None               # row of the slot store when its KV lives there
    prefilled: bool = False
    suspended: bool = False
    suspended_seq: int = 0               # order of suspension (least recent offloads first)
    finished: bool = False
    offloaded: bool = False              # kv lives in host memory
    prompt_kv: int = 0                   # prompt columns still in the KV (prompt eviction shrinks it)
    kept_pos: list[int] | None = None    # original positions of those columns (None: all of the prompt)
    pos_offset: int = 0                  # next position = kv_len + pos_offset (evicted columns counted back)
    matcher: object | None = None        # grammar state (engine/grammar.py) of a constrained generation

    def remaining(self) -> int:
        """Tokens it may still emit."""
        cap = self.max_new_tokens if self.forced is None else min(self.max_new_tokens, len(self.forced))
        return max(cap - len(self.output), 0)
