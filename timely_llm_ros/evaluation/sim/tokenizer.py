"""A deterministic, dependency-free tokenizer for simulation (trace replay needs token counts, not a model).

Pieces: an identifier or number with at most one leading space, a run of other whitespace, or one other
character. Ids are assigned in first-seen order; decode(encode(text)) == text for any text.
"""
from __future__ import annotations

import re
from typing import Sequence

_PIECE = re.compile(r" ?[A-Za-z_]+| ?\d+(?:\.\d+)?|\s+|.", re.DOTALL)


class PieceTokenizer:
    """Regex-piece tokenizer with a vocabulary that grows as text is seen."""

    pad_id = 0
    eos_id = 1

    def __init__(self) -> None:
        self._pieces: list[str] = ["", ""]  # pad, eos decode to nothing
        self._ids: dict[str, int] = {}

    def pieces(self, text: str) -> list[str]:
        """The pieces text splits into (what each token stands for)."""
        return _PIECE.findall(text)

    def encode(self, text: str) -> list[int]:
        out = []
        for piece in _PIECE.findall(text):
            tid = self._ids.get(piece)
            if tid is None:
                tid = self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            out.append(tid)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self._pieces[i] for i in ids)

    def stream(self) -> "PieceStream":
        """The text of one generation's output token by token: decode is a concatenation of pieces, so each token
        adds exactly its own piece (one lookup, where decoding the whole output each token is quadratic)."""
        return PieceStream(self._pieces)

    def count(self, text: str) -> int:
        """Number of tokens text encodes to."""
        return len(_PIECE.findall(text))


class PieceStream:
    """A TextStream (core/engine.py) over a PieceTokenizer's pieces."""

    __slots__ = ("_pieces",)

    def __init__(self, pieces: list[str]) -> None:
        self._pieces = pieces

    def push(self, token_id: int) -> str:
        return self._pieces[token_id]
