"""Prompt-prefix reuse for the llamacpp engine: each robot type's shared system prompt is prefilled once.

Planner prompts of a robot type share a long fixed part (skills, guidance, worked examples) before a short task. When
a generation is released, its sequence's state (llama.cpp's serialised KV of its prompt and output) is kept in host
memory, keyed by those tokens; a new prompt's empty sequence loads the entry sharing its longest common prefix, is
cut back to that prefix and prefills only the rest. Loaded into an empty stream, the entry's cells sit where a
prefill would have put them, and every position's KV was computed from the same tokens, so the result is bit for bit
that of prefilling the prompt in two steps split where the entry's prefix ends. (llama.cpp's KV differs in its last
bits with how a prompt is split into micro-batches, so against one whole-prompt prefill a greedy near-tie can go the
other way; docs/engine.md.) Entries are dropped least recently used first beyond ``capacity_bytes``.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from timely_llm_ros.engine.llamacpp.native import KvContext
from timely_llm_ros.engine.prefix_match import best_prefix


class StatePrefixCache:
    """Whole prompts' sequence states in host memory, keyed by their token ids."""

    def __init__(self, ctx: KvContext, capacity_bytes: float, min_tokens: int = 32) -> None:
        self.ctx = ctx
        self.capacity_bytes, self.min_tokens = capacity_bytes, min_tokens
        self._entries: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _best(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        """(tokens reusable, the entry holding them); (0, None) below min_tokens. At most len(prompt) - 1 tokens:
        the last prompt token must run to give the logits."""
        return best_prefix(self._entries, prompt, self.min_tokens)

    def reusable(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` a lookup would reuse now (no statistics, no recency change)."""
        return self._best(prompt)[0]

    def load_into(self, prompt: Sequence[int], seq: int) -> int:
        """Fill the empty sequence ``seq`` with the longest cached prefix of ``prompt``; the tokens it now holds."""
        best, key = self._best(prompt)
        if key is None:
            return 0
        self._entries.move_to_end(key)
        self.ctx.load(seq, self._entries[key])
        if best < len(key):
            self.ctx.remove(seq, best)
        self.hits += 1
        self.reused_tokens += best
        return best

    def insert(self, prompt: Sequence[int], seq: int) -> None:
        """Keep the state of ``seq``, which holds exactly the tokens ``prompt`` (a prompt and what was generated after
        it), dropping least recently used entries beyond the byte cap."""
        key = tuple(prompt)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if len(key) < self.min_tokens:
            return
        state = self.ctx.save(seq)
        if len(state) > self.capacity_bytes:
            return
        self._entries[key] = state
        while self.nbytes() > self.capacity_bytes:
            self._entries.popitem(last=False)

    def nbytes(self) -> int:
        return sum(len(s) for s in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()
