"""Grammar-constrained decoding with llguidance, for any engine that holds its logits as torch tensors (the
transformers engine here; the llama.cpp engine converts its logits to call the same). The choice of library and its
measurements: docs/engine.md, benchmarks/grammar.py.

- ``GrammarCompiler``: a tokenizer's grammars (Lark text, core/skills/grammar.py), each distinct text compiled once
  and kept (least recently used dropped past ``cache_size``); ``matcher(text)`` is a fresh parse state for one
  generation (a copy of the compiled one: tens of microseconds).
- ``TokenMasks``: the next tokens of a batch of logits rows, each constrained row among the tokens its matcher
  allows: ``greedy_tokens`` checks each row's best token against its matcher first (``validate_tokens``: a few
  microseconds) and computes a row's full mask only when that token is refused; ``apply`` masks every constrained
  row before sampling.
- ``advance(matcher, token)``: the matcher moves past the token its generation emitted. Engines call it only once
  that token is final (after the forward completed), so a step cut short, a suspension or an offload leaves every
  matcher as it was.

The tokenizer's stop tokens are allowed exactly where the grammar accepts the text so far.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence

import llguidance
import torch

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engine.tokenizer import ByteTokenizer

Matcher = llguidance.LLMatcher
CANDIDATES = 64    # a greedy row whose best token its grammar refuses: this many best logits are read for an allowed one
CACHE_SIZE = 256   # compiled grammars a compiler keeps (a grammar differs per robot type, skill list and object list)


class _ByteVocabulary:
    """The byte tokenizer of random-weight models as llguidance reads a tokenizer: bytes 0..255, then BOS and EOS
    (which decode to nothing)."""

    def __init__(self) -> None:
        self.bos_token_id, self.eos_token_id = ByteTokenizer.bos_token_id, ByteTokenizer.eos_token_id
        self.tokens = [bytes([i]) for i in range(256)] + [b"", b""]
        self.special_token_ids = [self.bos_token_id, self.eos_token_id]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


def llg_tokenizer(tokenizer, vocab_size: int, stop_ids: Iterable[int]) -> llguidance.LLTokenizer:
    """llguidance's view of an engine's tokenizer (a Hugging Face fast tokenizer behind ``hf_tokenizer``, or the
    byte tokenizer), with masks ``vocab_size`` wide and ``stop_ids`` as its end-of-sequence tokens. Building it reads
    the whole vocabulary (about 2 s for 49,152 tokens): make it once per model."""
    stops = sorted(int(i) for i in stop_ids)
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is not None:
        import llguidance.hf

        try:
            return llguidance.hf.from_tokenizer(hf, n_vocab=vocab_size, eos_token=stops or None)
        except ValueError as exc:
            raise EngineError(f"grammar-constrained decoding needs a fast Hugging Face tokenizer ({exc}): add the "
                              "request without a grammar") from None
    if isinstance(tokenizer, ByteTokenizer):
        return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()), n_vocab=vocab_size,
                                      eos_token=stops or None)
    raise EngineError("grammar-constrained decoding needs a Hugging Face tokenizer; this model has "
                      f"{type(tokenizer).__name__}: add the request without a grammar")


class GrammarCompiler:
    """Compiles grammar texts for one tokenizer, each distinct text once while it stays in the cache."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: Iterable[int], cache_size: int = CACHE_SIZE) -> None:
        """``tokenizer``: the engine's; ``vocab_size``: the width of the model's logits; ``stop_ids``: the tokens
        that end a generation."""
        self.tokenizer = llg_tokenizer(tokenizer, vocab_size, stop_ids)
        self.vocab_size = vocab_size
        self.cache_size = cache_size
        self._compiled: OrderedDict[str, Matcher] = OrderedDict()

    def compile(self, grammar: str) -> Matcher:
        """The compiled ``grammar`` (at its start; compiled on first use, kept): copy it, never advance it."""
        compiled = self._compiled.get(grammar)
        if compiled is not None:
            self._compiled.move_to_end(grammar)
            return compiled
        compiled = llguidance.LLMatcher(self.tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
        if compiled.is_error():
            raise EngineError(f"grammar does not compile: {compiled.get_error()}")
        self._compiled[grammar] = compiled
        while len(self._compiled) > self.cache_size:
            self._compiled.popitem(last=False)
        return compiled

    def matcher(self, grammar: str) -> Matcher:
        """A fresh matcher at the start of ``grammar``."""
        return self.compile(grammar).deep_copy()

    def __len__(self) -> int:
        return len(self._compiled)


class TokenMasks:
    """Next-token masks of a step's logits rows: a bitmask buffer (grown to the largest batch seen, kept) and the two
    ways masks reach the tokens."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self.kept_rows = self.masked_rows = 0   # greedy_tokens: rows whose best token was allowed, rows masked
        self.kernel_rows = 0                    # greedy_tokens: masked rows with no allowed token among CANDIDATES
        self._host = torch.full((1, self.words), -1, dtype=torch.int32)
        self._shifts = torch.arange(32, dtype=torch.int32)

    def _fill(self, matchers: Sequence[Matcher | None], rows: Sequence[int]) -> None:
        """Fill the masks of ``rows`` (row i from matchers[i]) into the buffer's rows of the same index."""
        if self._host.shape[0] < len(matchers):
            self._host = torch.full((len(matchers), self.words), -1, dtype=torch.int32)
        row_bytes = self.words * 4
        for i in rows:
            matcher = matchers[i]
            assert matcher is not None
            matcher.unsafe_compute_mask_ptr(self._host[i].data_ptr(), row_bytes)
            if matcher.is_error():
                raise EngineError(f"grammar matcher failed: {matcher.get_error()}")

    def _allowed(self, rows: Sequence[int], device: torch.device) -> torch.Tensor:
        """The filled masks of ``rows`` as booleans [len(rows), vocab] on ``device``."""
        masks = self._host[list(rows)].to(device, non_blocking=True)
        bits = (masks.unsqueeze(-1) >> self._shifts.to(device)) & 1
        return bits.view(len(rows), -1)[:, :self.vocab_size].bool()

    def _mask(self, logits: torch.Tensor, rows: Sequence[int]) -> None:
        index = torch.tensor(list(rows), device=logits.device)
        width = min(logits.shape[-1], self.vocab_size)
        allowed = self._allowed(rows, logits.device)[:, :width]
        masked = logits[index, :width].masked_fill(~allowed, float("-inf"))
        logits[index, :width] = masked
        if logits.shape[-1] > width:       # logits wider than the grammar's vocabulary: the extra tokens are never allowed
            logits[index, width:] = float("-inf")

    def apply(self, logits: torch.Tensor, matchers: Sequence[Matcher | None]) -> None:
        """Mask ``logits [rows, vocab]`` in place: row i to the tokens matchers[i] allows, rows without one not."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if rows:
            self._fill(matchers, rows)
            self._mask(logits, rows)

    def greedy_tokens(self, logits: torch.Tensor, matchers: Sequence[Matcher | None]) -> list[int]:
        """Each row's argmax, a constrained row's among the tokens its grammar allows. A constrained row keeps its
        best token when its matcher allows it; otherwise its mask is computed, and it takes the first allowed token
        among its CANDIDATES best, or, with none of them allowed, the argmax of its masked logits."""
        top = logits.argmax(-1).tolist()
        refused = []
        for i, matcher in enumerate(matchers):
            if matcher is None:
                continue
            if matcher.validate_tokens([top[i]]) == 1:
                self.kept_rows += 1
            else:
                refused.append(i)
        if not refused:
            return top
        self.masked_rows += len(refused)
        self._fill(matchers, refused)
        index = torch.tensor(refused, device=logits.device)
        candidates = logits[index].topk(min(CANDIDATES, logits.shape[-1]), dim=-1).indices     # best first
        words = self._host[refused].to(logits.device)
        inside = candidates < self.vocab_size
        bits = (words.gather(1, (candidates >> 5).clamp(max=self.words - 1)) >> (candidates & 31)) & 1
        allowed = (bits.bool() & inside)
        found = allowed.any(-1).tolist()
        best = candidates.gather(1, allowed.int().argmax(-1, keepdim=True)).squeeze(1).tolist()
        unresolved = []
        for i, ok, token in zip(refused, found, best):
            if ok:
                top[i] = int(token)
            else:
                unresolved.append(i)
        if unresolved:
            self.kernel_rows += len(unresolved)
            self._mask(logits, unresolved)
            for i in unresolved:
                top[i] = int(logits[i].argmax())
        return top


def advance(matcher: Matcher, token: int, gen_id: str) -> None:
    """Move a generation's matcher past the token it emitted (one its grammar allowed)."""
    if not matcher.consume_token(int(token)):
        raise EngineError(f"generation {gen_id!r}: token {token} is outside its grammar ({matcher.get_error()})")


def allowed_tokens(matcher: Matcher, vocab_size: int) -> list[int]:
    """Every token the matcher allows next (the full mask, as a list: for tests and diagnostics)."""
    masks = TokenMasks(vocab_size)
    masks._fill([matcher], [0])
    return masks._allowed([0], torch.device("cpu"))[0].nonzero().flatten().tolist()
