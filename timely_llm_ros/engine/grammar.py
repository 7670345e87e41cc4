"""Grammar-constrained decoding for the transformers engine, with xgrammar (the choice and its measurements:
docs/engine.md, benchmarks/grammar_backends.py).

A generation added with a grammar holds a matcher (its parse state). In a step, the rows of the logits that belong
to constrained generations get their next-token bitmask filled from their matchers and applied before sampling;
other rows are left as they are. A matcher advances only when its generation emits a token, after the forward
completed, so a step cut short leaves it as it was. The tokenizer's stop tokens are allowed exactly where the
grammar accepts the text so far.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
import xgrammar as xgr

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engine.tokenizer import ByteTokenizer


class GrammarCompiler:
    """Compiles grammar texts (xgrammar EBNF) for one tokenizer, each distinct text once."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: Iterable[int]) -> None:
        """``tokenizer``: the engine's (a Hugging Face tokenizer behind ``hf_tokenizer``, or the byte tokenizer of
        random-weight models); ``vocab_size``: the width of the model's logits."""
        stops = sorted(int(i) for i in stop_ids)
        hf = getattr(tokenizer, "hf_tokenizer", None)
        if hf is not None:
            info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=vocab_size, stop_token_ids=stops)
        elif isinstance(tokenizer, ByteTokenizer):   # bytes 0..255, then BOS and EOS (decode to nothing)
            info = xgr.TokenizerInfo([bytes([i]) for i in range(256)] + [b"", b""], vocab_size=vocab_size,
                                     stop_token_ids=stops)
        else:
            raise EngineError("grammar-constrained decoding needs a Hugging Face tokenizer; this model has "
                              f"{type(tokenizer).__name__}: add the request without a grammar")
        self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._compiled: dict[str, xgr.CompiledGrammar] = {}
        self.vocab_size = vocab_size

    def compile(self, grammar: str) -> xgr.CompiledGrammar:
        """``grammar`` compiled (on its first use; kept)."""
        compiled = self._compiled.get(grammar)
        if compiled is None:
            try:
                compiled = self._compiler.compile_grammar(grammar)
            except RuntimeError as exc:
                raise EngineError(f"grammar does not compile: {exc}") from None
            self._compiled[grammar] = compiled
        return compiled

    def matcher(self, grammar: str) -> xgr.GrammarMatcher:
        """A fresh matcher at the start of ``grammar``."""
        return xgr.GrammarMatcher(self.compile(grammar))

    def __len__(self) -> int:
        return len(self._compiled)


CANDIDATES = 64   # greedy rows whose top token the grammar forbids: this many highest logits are read for an allowed one


class RowMasks:
    """The bitmask buffer of a step's logits rows (grown to the largest batch seen, kept), and the two ways its masks
    reach the tokens: ``apply`` masks every constrained row (then any sampling follows), ``greedy_tokens`` chooses
    greedy tokens and masks only the rows that need it."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.masked_rows = self.kept_rows = 0    # greedy_tokens: rows masked, rows whose top token was allowed
        self.kernel_rows = 0                     # greedy_tokens: masked rows with no allowed token among CANDIDATES
        self._host = xgr.allocate_token_bitmask(1, vocab_size)
        self._device: torch.Tensor | None = None

    def _fill(self, matchers: Sequence[xgr.GrammarMatcher | None]) -> list[int]:
        """Fill the masks of the constrained rows; their indices."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if rows and self._host.shape[0] < len(matchers):
            self._host = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        for i in rows:
            matchers[i].fill_next_token_bitmask(self._host, i)
        return rows

    def _mask(self, logits: torch.Tensor, rows: list[int], batch: int) -> None:
        mask = self._host[:batch]
        if logits.device.type != "cpu":
            if self._device is None or self._device.shape[0] < batch:
                self._device = torch.empty_like(self._host, device=logits.device)
            self._device[:batch].copy_(mask, non_blocking=True)
            mask = self._device[:batch]
        xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=self.vocab_size, indices=rows)

    def apply(self, logits: torch.Tensor, matchers: Sequence[xgr.GrammarMatcher | None]) -> None:
        """Mask ``logits [rows, vocab]`` in place: row i by matchers[i]'s next-token mask, rows without one not."""
        rows = self._fill(matchers)
        if rows:
            self._mask(logits, rows, len(matchers))

    def greedy_tokens(self, logits: torch.Tensor, matchers: Sequence[xgr.GrammarMatcher | None]) -> list[int]:
        """Each row's argmax, a constrained row's among the tokens its grammar allows: its highest-ranked allowed
        token. One top-k of the batch's logits gives every row its best CANDIDATES tokens; a constrained row takes
        the first of them its filled bitmask allows, and only a row with none allowed there goes through the mask
        kernel (~140-200 us a row of 49,152 logits on this CPU: more than a decode step's share can carry) and a
        second argmax."""
        rows = self._fill(matchers)
        candidates = logits.topk(min(CANDIDATES, logits.shape[-1]), dim=-1).indices   # [rows, K], best first
        top = candidates[:, 0].tolist()
        if not rows:
            return top
        constrained = candidates[rows]
        allowed = (self._host[rows].gather(1, constrained >> 5) >> (constrained & 31)) & 1
        kept = allowed[:, 0].tolist()
        found = allowed.any(-1).tolist()
        # argmax of 0/1 is the first 1: the best allowed candidate (index 0, unused, where none is allowed)
        chosen = constrained.gather(1, allowed.argmax(-1, keepdim=True)).squeeze(1).tolist()
        unresolved = []
        for i, top_allowed, ok, token in zip(rows, kept, found, chosen):
            if top_allowed:
                self.kept_rows += 1
                continue
            self.masked_rows += 1
            if ok:
                top[i] = token
            else:
                unresolved.append(i)
        if unresolved:
            self.kernel_rows += len(unresolved)
            self._mask(logits, unresolved, len(matchers))
            for i in unresolved:
                top[i] = int(logits[i].argmax())
        return top


def advance(matcher: xgr.GrammarMatcher, token: int, gen_id: str) -> None:
    """Move a generation's matcher past the token it emitted (one its mask allowed)."""
    if not matcher.accept_token(token):
        raise EngineError(f"generation {gen_id!r}: token {token} is outside its grammar (its mask allowed it)")
