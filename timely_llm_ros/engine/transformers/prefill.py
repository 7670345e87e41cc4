"""Prefill: new generations' prompts run straight into free rows of the slot store.

Three ways, each ending in ``_finish`` (the prompt's first token, chosen from the last position's logits):
- groups of prompts of similar length in one right-padded forward (``prefill``: at most ``prefill_tokens`` padded
  tokens and 50% padding a group; ``batch_prefill=False`` makes every group one prompt), or one prompt alone with
  causal attention and no mask;
- a prompt that starts like a cached one (prefix_cache.py) copies that prefix's KV into its row and prefills only
  the rest, one row at a time;
- chunked (``prefill_chunks``): a step's budget of prompt tokens spent on prompts in order; a prompt that does not
  fit continues in later steps, its partial KV kept like a suspended generation's, and only a completed prompt emits.
A forward that fails or is cut short by an interrupt frees the rows it claimed (a chunk keeps the chunks before it),
so the generation is as before the step.
"""
from __future__ import annotations

import torch

from timely_llm_ros.core.engine import StepResult
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.transformers.layer_gate import StepInterrupted
from timely_llm_ros.engine.transformers.prefix_cache import PrefixCache
from timely_llm_ros.engine.transformers.slot_rows import SlotRows
from timely_llm_ros.engine.transformers.token_choice import TokenChoice


class Prefiller:
    """Runs the prefill forwards of a step."""

    def __init__(self, model: torch.nn.Module, device: torch.device, rows: SlotRows, tokens: TokenChoice,
                 prefix_cache: PrefixCache | None, prefill_tokens: int, batch_prefill: bool) -> None:
        self.model, self.device, self.rows, self.tokens = model, device, rows, tokens
        self.prefix_cache = prefix_cache
        self.prefill_tokens, self.batch_prefill = prefill_tokens, batch_prefill

    def left(self, gen: GenerationState) -> int:
        """Prompt tokens the generation still has to prefill (what a cached prefix will not supply)."""
        if gen.prefilled:
            return 0
        if gen.kv_len == 0 and gen.row is None and gen.kv is None and self.prefix_cache is not None:
            return len(gen.prompt) - self.prefix_cache.reusable(gen.prompt)
        return len(gen.prompt) - gen.kv_len

    def prefill(self, gens: list[GenerationState], result: StepResult) -> None:
        """Prefill these generations whole: cache hits one by one, the others in groups of similar length."""
        fresh = []
        for gen in gens:
            reused, kv = self.prefix_cache.lookup(gen.prompt) if self.prefix_cache else (0, None)
            if kv is not None:
                self._after_prefix(gen, reused, kv, result)
            else:
                fresh.append(gen)
        limit = self.prefill_tokens if self.batch_prefill else 0
        group: list[GenerationState] = []
        real = 0
        for gen in sorted(fresh, key=lambda g: len(g.prompt)):
            padded = (len(group) + 1) * len(gen.prompt)
            if group and (padded > limit or padded > 1.5 * (real + len(gen.prompt))):
                self._group(group, result)       # too big, or too much padding: start a new group
                group, real = [], 0
            group.append(gen)
            real += len(gen.prompt)
        if group:
            self._group(group, result)

    def prefill_chunks(self, gens: list[GenerationState], room: int, result: StepResult) -> None:
        """Spend ``room`` prompt tokens on these generations in order."""
        for gen in gens:
            if room <= 0:
                return
            n = len(gen.prompt)
            if gen.kv_len == 0 and gen.row is None and gen.kv is None and self.prefix_cache is not None:
                reused, kv = self.prefix_cache.lookup(gen.prompt)
                if kv is not None:
                    self.rows.store_for(rows=0, capacity=n + 1, gens=[gen])
                    self.rows.store.write_row(self.rows.claim(gen), kv[..., :reused, :])
                    gen.kv_len = reused
            done = gen.kv_len
            take = min(room, n - done)
            store = self.rows.store_for(rows=0, capacity=n + 1, gens=[gen])
            if gen.row is None:
                row = self.rows.claim(gen)
                if gen.kv is not None:                 # partial prompt KV moved out since the last chunk
                    store.write_row(row, gen.kv)
                    gen.kv = None
            store.begin_prefill([gen.row], offset=done)
            try:
                ids = torch.tensor([gen.prompt[done:done + take]], dtype=torch.long, device=self.device)
                if done == 0:
                    out = self.model(input_ids=ids, past_key_values=store, use_cache=True, logits_to_keep=1)
                else:
                    cols = torch.arange(done + take, device=self.device)
                    mask = cols[None, :] <= cols[done:, None]
                    out = self.model(input_ids=ids, position_ids=cols[None, done:], attention_mask=mask[None, None],
                                     past_key_values=store, use_cache=True, logits_to_keep=1)
            except StepInterrupted:
                gen.kv_len = done                   # the chunks before this one stay in its row
                raise
            except Exception:
                self.rows.free(gen)
                gen.kv_len = 0
                raise
            finally:
                store.end_prefill()
            gen.kv_len = done + take
            room -= take
            if gen.kv_len == n:
                if self.prefix_cache is not None:
                    self.prefix_cache.insert(gen.prompt, store.read_row(gen.row, n))
                self._finish([gen], [n], out.logits[:, -1], result)

    def _after_prefix(self, gen: GenerationState, reused: int, kv: torch.Tensor, result: StepResult) -> None:
        """Copy a cached prefix's KV into a row, prefill the rest of the prompt after it."""
        n = len(gen.prompt)
        store = self.rows.store_for(rows=0, capacity=n + 1, gens=[gen])
        row = self.rows.claim(gen)
        store.write_row(row, kv[..., :reused, :])
        store.begin_prefill([row], offset=reused)
        try:
            cols = torch.arange(n, device=self.device)
            mask = cols[None, :] <= cols[reused:, None]          # suffix token i sees columns [0, reused + i]
            out = self.model(input_ids=torch.tensor([gen.prompt[reused:]], dtype=torch.long, device=self.device),
                             position_ids=cols[None, reused:], attention_mask=mask[None, None],
                             past_key_values=store, use_cache=True, logits_to_keep=1)
        except Exception:
            self.rows.free(gen)
            raise
        finally:
            store.end_prefill()
        self._finish([gen], [n], out.logits[:, -1], result)

    def _group(self, gens: list[GenerationState], result: StepResult) -> None:
        """One forward for these prompts, each into a row of its own."""
        lengths = [len(g.prompt) for g in gens]
        width = max(lengths)
        store = self.rows.store_for(rows=0, capacity=width + 1, gens=gens)
        rows = [self.rows.claim(g) for g in gens]
        store.begin_prefill(rows)
        try:
            if len(gens) == 1:               # causal attention, no mask, logits of the last position only
                ids = torch.tensor([gens[0].prompt], dtype=torch.long, device=self.device)
                out = self.model(input_ids=ids, past_key_values=store, use_cache=True, logits_to_keep=1)
            else:                            # right-padded: row i's tokens [0, n_i) see only themselves
                ids = torch.tensor([g.prompt + [0] * (width - len(g.prompt)) for g in gens],
                                   dtype=torch.long, device=self.device)
                n = torch.tensor(lengths, device=self.device)
                cols = torch.arange(width, device=self.device)
                mask = (cols[None, :] <= cols[:, None])[None] & (cols[None, None, :] < n[:, None, None])
                # logits of the last `keep` positions cover every row's last real token; an int
                # logits_to_keep means the same in every transformers 5.x (a per-row index tensor does not)
                keep = width - min(lengths) + 1
                out = self.model(input_ids=ids, position_ids=cols[None].expand(len(gens), width),
                                 attention_mask=mask[:, None], past_key_values=store, use_cache=True,
                                 logits_to_keep=keep)
                last = n - 1 - (width - keep)
                out.logits = out.logits[torch.arange(len(gens), device=self.device), last][:, None]
        except Exception:
            for gen in gens:                 # leave them unprefilled and rowless, as before the step
                self.rows.free(gen)
            raise
        finally:
            store.end_prefill()
        if self.prefix_cache is not None:
            for gen, n_tokens in zip(gens, lengths):
                self.prefix_cache.insert(gen.prompt, store.read_row(gen.row, n_tokens))
        self._finish(gens, lengths, out.logits[:, -1], result)

    def _finish(self, gens: list[GenerationState], lengths: list[int], logits: torch.Tensor,
                result: StepResult) -> None:
        """The prompts are in their rows: each generation emits its first token."""
        tokens = self.tokens.choose(logits, gens)
        for gen, n_tokens, token in zip(gens, lengths, tokens):
            gen.kv_len, gen.prefilled, gen.prompt_kv = n_tokens, True, n_tokens
            result.prefilled.append(gen.gen_id)
            self.tokens.emit(gen, token, result)
