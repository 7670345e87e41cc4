"""Decode: every prefilled generation of a step gains one token in ONE forward over a window of store rows.

The window (slot_rows.py) holds exactly the step's generations; each row's new key/value goes to its own column and
attention reads each row to its own length (kv_cache.SlotKV.begin_decode, slot_attention.py). Position ids are the
rows' lengths, shifted where prompt KV was evicted (the original positions are kept). A decode cut short by an
interrupt leaves every length as it was: its first layers wrote keys/values at each row's next column, which the row
overwrites when it decodes again.
"""
from __future__ import annotations

import torch

from timely_llm_ros.core.engine import StepResult
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.transformers.slot_rows import SlotRows
from timely_llm_ros.engine.transformers.token_choice import TokenChoice


class Decoder:
    """Runs the decode forward of a step."""

    def __init__(self, model: torch.nn.Module, device: torch.device, rows: SlotRows, tokens: TokenChoice) -> None:
        self.model, self.device, self.rows, self.tokens = model, device, rows, tokens

    def decode(self, gens: list[GenerationState], result: StepResult) -> None:
        changed, order = self.rows.arrange(gens)
        store = self.rows.store
        mask = store.begin_decode([g.kv_len for g in order], changed, self.rows.lo)
        ids = torch.tensor([[g.output[-1]] for g in order], dtype=torch.long, device=self.device)
        positions = store.positions()
        if any(g.pos_offset for g in order):       # evicted prompt KV: original positions kept
            positions = positions + torch.tensor([[g.pos_offset] for g in order], dtype=torch.long,
                                                 device=self.device)
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                         past_key_values=store, use_cache=True)
        store.end_decode()
        tokens = self.tokens.choose(out.logits[:, -1], order)
        for gen, token in zip(order, tokens):
            gen.kv_len += 1
            self.tokens.emit(gen, token, result)
