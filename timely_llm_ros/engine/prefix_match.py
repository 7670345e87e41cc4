"""Which cached prompt a new prompt shares the most leading tokens with: the lookup both engines' prompt-prefix
caches (transformers/prefix_cache.py, llamacpp/prefix_cache.py) make before they copy that prefix's KV."""
from __future__ import annotations

from typing import Iterable, Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists (compared in chunks, then one by one)."""
    n, i = min(len(a), len(b)), 0
    while i < n:
        j = min(i + 256, n)
        if a[i:j] != b[i:j]:
            while a[i] == b[i]:
                i += 1
            return i
        i = j
    return n


def best_prefix(keys: Iterable[tuple[int, ...]], prompt: Sequence[int],
                min_tokens: int) -> tuple[int, tuple[int, ...] | None]:
    """(tokens reusable, the key holding them) over ``keys``; (0, None) below ``min_tokens``. At most
    len(prompt) - 1 tokens: the last prompt token must run to give the logits."""
    best, best_key = 0, None
    prompt = tuple(prompt)          # common_prefix compares slices: tuple with tuple
    for key in keys:
        m = common_prefix(key, prompt)
        if m > best:
            best, best_key = m, key
    best = min(best, len(prompt) - 1)
    if best < min_tokens or best_key is None:
        return 0, None
    return best, best_key
