"""Detokenizing a byte-level BPE generation as it grows, one token at a time (a core.engine.TextStream).

The scheduler needs the text each new token adds. ``PrefixDiffStream`` (core/engine.py) works with any tokenizer:
it decodes the whole output after every token. For byte-level BPE tokenizers a table from token id to its bytes
(``ByteTable``, built only when the tokenizer's decoder is ByteLevel and checked against the tokenizer) makes that
exact and incremental:
``ByteStream`` feeds the new token's bytes to an incremental UTF-8 decoder, so a token costs one lookup, however
long the output. The per-token cost is part of the segmentation overhead, and right after a forward pass it
runs with cold caches, where decoding the whole output every token cost 2-4x more than one lookup
(benchmarks/overhead.py segmentation).
"""
from __future__ import annotations

import codecs
import random
from typing import Sequence


class ByteStream:
    """Byte-level BPE: the new token's bytes through an incremental UTF-8 decoder (same text as ByteTable.decode)."""

    __slots__ = ("_table", "_utf8")

    def __init__(self, table: list[bytes]) -> None:
        self._table = table
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._table[token_id])


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE character for each byte, inverted: printable Latin-1 bytes stand for
    themselves, the other bytes take the code points from 256 upwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class ByteTable:
    """Token id -> bytes; special tokens decode to nothing (as skip_special_tokens=True)."""

    def __init__(self, table: list[bytes]) -> None:
        self._table = table

    @classmethod
    def build(cls, hf_tokenizer) -> "ByteTable | None":
        """A verified table for a transformers fast tokenizer with a ByteLevel decoder, else None."""
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None or type(backend.decoder).__name__ != "ByteLevel":
            return None
        alphabet = _byte_level_alphabet()
        special = set(getattr(hf_tokenizer, "all_special_ids", []) or [])
        special |= set(backend.get_added_tokens_decoder())
        vocab = backend.get_vocab(with_added_tokens=True)
        table = [b""] * (max(vocab.values()) + 1)
        for piece, idx in vocab.items():
            if idx in special:
                continue
            if any(ch not in alphabet for ch in piece):
                return None
            table[idx] = bytes(alphabet[ch] for ch in piece)
        fast = cls(table)
        return fast if fast._agrees_with(hf_tokenizer, len(table)) else None

    def _agrees_with(self, hf_tokenizer, vocab_size: int) -> bool:
        rng = random.Random(0)
        singles = range(vocab_size) if vocab_size <= 4096 else rng.sample(range(vocab_size), 4096)
        samples = [[i] for i in singles] + [
            [rng.randrange(vocab_size) for _ in range(rng.randrange(2, 40))] for _ in range(200)]
        return all(self.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True) for ids in samples)

    def decode(self, ids: Sequence[int]) -> str:
        table = self._table
        return b"".join([table[i] for i in ids]).decode("utf-8", errors="replace")

    def stream(self) -> ByteStream:
        """An incremental decoder for one generation."""
        return ByteStream(self._table)
