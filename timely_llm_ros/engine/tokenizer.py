"""Tokenizers the engines use, torch-free: a ProcessEngine's owner unpickles one without loading torch."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol, Sequence

from timely_llm_ros.engine.detokenize import ByteTable


class Tokenizer(Protocol):
    """What the engine needs from a tokenizer."""

    eos_token_id: int | None
    bos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ChatTemplateError(ValueError):
    """The model's tokenizer has no chat template, or its template refused the messages."""


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
    def has_chat_template(self) -> bool:
        """Whether the tokenizer carries a chat template (an instruct model's)."""
        return bool(getattr(self._tok, "chat_template", None))

    def encode_chat(self, messages: Sequence[Mapping[str, str]], add_bos: bool = False,
                    add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template (plus the assistant's opening when
        ``add_generation_prompt``), with the BOS token first when ``add_bos`` and the template did not start with it.

        Turn-aligned: the text each message adds to the rendering is tokenized on its own, so every message
        boundary is a token boundary and the ids of the first k messages are a prefix of the ids of any longer
        conversation that starts with them (the prefix cache relies on it). Where turns are separated by special
        tokens (ChatML, Llama 3, Gemma, ...) this is exactly the ids of the whole text; a template that does not
        render conversations as prefixes of each other is tokenized as one text."""
        if not self.has_chat_template:
            raise ChatTemplateError("this model's tokenizer has no chat template: set chat_template: false in its "
                                    "config/models.yaml entry (prompts then use the raw planner format)")
        messages = [dict(m) for m in messages]
        try:
            texts = [self._tok.apply_chat_template(messages[:k], tokenize=False,
                                                   add_generation_prompt=add_generation_prompt and k == len(messages))
                     for k in range(1, len(messages) + 1)]
        except Exception as exc:   # jinja raises its own errors (e.g. a template that refuses a system message)
            raise ChatTemplateError(f"the chat template refused the messages: {exc}") from exc
        pieces, done = [], ""
        for text in texts:
            if not text.startswith(done):
                pieces, done = [texts[-1]], texts[-1]
                break
            pieces.append(text[len(done):])
            done = text
        ids = [i for piece in pieces if piece for i in self.encode(piece)]
        if add_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    @property
    def hf_tokenizer(self):
        """The wrapped transformers tokenizer (grammar libraries read its vocabulary); None for a bare one."""
        return self._tok if hasattr(self._tok, "backend_tokenizer") else None

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
