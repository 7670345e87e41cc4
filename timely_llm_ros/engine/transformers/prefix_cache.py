"""Prompt-prefix KV reuse: prompts that start like an earlier one prefill only what differs.

Planner prompts share a long fixed part (skill set, guidance, examples) before a short scene/task
suffix. The cache keeps the KV of a few whole prompts (least recently used dropped beyond a byte
cap); a new prompt copies the KV of its longest common prefix with one of them and prefills the rest.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import torch

from timely_llm_ros.engine.prefix_match import best_prefix


class PrefixCache:
    """KV ``[layers, 2, kv_heads, n, head_dim]`` of whole prompts, keyed by their token ids."""

    def __init__(self, capacity_bytes: float, min_tokens: int = 32) -> None:
        self.capacity_bytes, self.min_tokens = capacity_bytes, min_tokens
        self._entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self.hits = 0
        self.reused_tokens = 0

    def _best(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        """(tokens reusable, key of the entry holding them); (0, None) below min_tokens. At most len(prompt) - 1
        tokens are reused: the last prompt token must run to give the logits."""
        return best_prefix(self._entries, prompt, self.min_tokens)

    def reusable(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` a lookup would reuse now (no statistics, no recency change)."""
        return self._best(prompt)[0]

    def lookup(self, prompt: Sequence[int]) -> tuple[int, torch.Tensor | None]:
        """(tokens reusable, KV holding them) for the best entry; (0, None) below min_tokens.

        At most len(prompt) - 1 tokens are reused: the last prompt token must run to give the logits.
        """
        best, best_key = self._best(prompt)
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        return best, self._entries[best_key]

    def insert(self, prompt: Sequence[int], kv: torch.Tensor) -> None:
        """Keep a copy of a prompt's KV (dropping least recently used entries beyond the byte cap)."""
        size = kv.numel() * kv.element_size()
        if len(prompt) < self.min_tokens or size > self.capacity_bytes:
            return
        self._entries[tuple(prompt)] = kv.clone()
        self._entries.move_to_end(tuple(prompt))
        while self.nbytes() > self.capacity_bytes:
            self._entries.popitem(last=False)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()
