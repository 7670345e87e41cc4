"""Tokenizers the engines use, torch-free: a ProcessEngine's owner unpickles one without loading torch."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from .detokenize import ByteTable


class Tokenizer(Protocol):
    """What the engine needs from a tokenizer."""

    eos_token_id: int | None
    bos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255, then BOS=256 and EOS=257 (for random-weight models)."""

    bos_token_id, eos_token_id = 256, 257

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id, *text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """Adapter over a transformers tokenizer (or a bare tokenizers.Tokenizer)."""

    def __init__(self, tok) -> None:
        self._tok = tok
        self.eos_token_id = getattr(tok, "eos_token_id", None)
        self.bos_token_id = getattr(tok, "bos_token_id", None)
        self._bytes = ByteTable.build(tok)       # fast path for byte-level BPE, None otherwise

    def encode(self, text: str) -> list[int]:
        # no special tokens: the embedded planner is trained on prompts encoded this way (model/tokenizer.py)
        out = self._tok.encode(text, add_special_tokens=False)
        return list(getattr(out, "ids", out))

    def decode(self, ids: Sequence[int]) -> str:
        if self._bytes is not None:
            return self._bytes.decode(ids)
        return self._tok.decode(list(ids), skip_special_tokens=True)

    @property
    def byte_table(self) -> ByteTable | None:
        """The verified id -> bytes table of a byte-level BPE tokenizer (None for others)."""
        return self._bytes


def load_tokenizer(path: Path) -> Tokenizer:
    """The tokenizer in a model folder (transformers' AutoTokenizer, else its tokenizer.json)."""
    try:
        from transformers import AutoTokenizer

        return HFTokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True))
    except Exception:
        if (path / "tokenizer.json").is_file():
            from tokenizers import Tokenizer as RawTokenizer

            return HFTokenizer(RawTokenizer.from_file(str(path / "tokenizer.json")))
        raise
