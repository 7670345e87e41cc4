"""TimeBill's prompt-KV eviction in the transformers engine: which prompt columns to keep (SnapKV-style), and
dropping the others from a generation's KV wherever it lives.

Score of a prompt column = the attention the last window (up to 32) of kept prompt tokens pays to it, summed
over window queries, heads and layers. The window is always kept; the highest-scoring other columns fill the
rest of the kept share. (SnapKV also max-pools scores over neighbouring columns; we do not: plain top-k.)

The window's queries are recomputed by one forward of its tokens over the KV before it, at their original
positions, with a probe attention function (registered with transformers' AttentionInterface) that is the
plain softmax attention plus a record of its weights; the model's normal attention is untouched.
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.transformers.slot_rows import SlotRows

WINDOW = 32
_PROBE = "timely_snapkv_probe"
_scores: list[torch.Tensor] = []


def _probe_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Softmax attention that records the weights' sum per key column (over batch, heads, queries)."""
    rep = query.shape[1] // key.shape[1]
    if rep > 1:
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    w = (query @ key.transpose(-1, -2)).float() * scaling
    if attention_mask is not None:
        m = attention_mask[..., :key.shape[-2]]
        w = w.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else w + m.float()
    p = torch.softmax(w, dim=-1)
    _scores.append(p.sum(dim=(0, 1, 2)))
    out = (p.to(value.dtype) @ value).transpose(1, 2).contiguous()
    return out, p


AttentionInterface.register(_PROBE, _probe_attention)


@torch.inference_mode()
def snapkv_keep(model, kv: torch.Tensor, tokens: list[int], positions: list[int], keep: int) -> torch.Tensor:
    """Indices (ascending) of the ``keep`` prompt columns to keep.

    kv: the prompt's KV ``[layers, 2, kv_heads, P, head_dim]`` (device of the model); tokens/positions: the
    token id and original absolute position of each of its P columns.
    """
    n = kv.shape[-2]
    if keep >= n:
        return torch.arange(n, device=kv.device)
    w = min(WINDOW, n, keep)
    prefix = n - w
    if keep == w or prefix == 0:
        return torch.arange(prefix, n, device=kv.device)
    cache = DynamicCache()
    for layer in range(kv.shape[0]):
        cache.update(kv[layer, 0, None, :, :prefix], kv[layer, 1, None, :, :prefix], layer)
    dev = kv.device
    ids = torch.tensor([tokens[prefix:]], dtype=torch.long, device=dev)
    pos = torch.tensor([positions[prefix:]], dtype=torch.long, device=dev)
    cols = torch.arange(n, device=dev)
    mask = (cols[None, :] <= cols[prefix:, None])[None, None]      # window query i sees columns [0, prefix + i]
    config = model.config
    saved = config._attn_implementation
    _scores.clear()
    try:
        config._attn_implementation = _PROBE
        model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    finally:
        config._attn_implementation = saved
    if not _scores:
        raise RuntimeError("snapkv_keep: the model's attention did not go through transformers' AttentionInterface")
    score = torch.stack(_scores).sum(dim=0)[:prefix]
    _scores.clear()
    top = torch.topk(score, keep - w).indices
    return torch.cat([top.sort().values.to(dev), torch.arange(prefix, n, device=dev)])


@torch.inference_mode()
def evict_prompt_kv(model, gen: GenerationState, ratio: float, rows: SlotRows, device: torch.device,
                    pin: bool) -> int:
    """Drop ``ratio`` of the prompt KV a prefilled generation holds now, keeping the columns its last prompt window
    attends to most (``snapkv_keep``) and the window itself; its output KV is untouched and its later tokens keep
    their original positions. Works wherever the KV lives (store row, own tensor, host; pinned again when ``pin``).
    Returns the prompt columns kept."""
    if not 0.0 <= ratio < 1.0:
        raise EngineError(f"evict_prompt_kv: ratio must be in [0, 1), got {ratio}")
    if not gen.prefilled:
        raise EngineError(f"evict_prompt_kv: generation {gen.gen_id!r} is not prefilled yet; evict after its prefill")
    p = gen.prompt_kv
    keep = max(1, round(p * (1.0 - ratio)))
    if keep >= p:
        return p
    kv = rows.store.read_row(gen.row, gen.kv_len) if gen.row is not None else gen.kv
    positions = gen.kept_pos if gen.kept_pos is not None else list(range(p))
    tokens = [gen.prompt[i] for i in positions]
    idx = snapkv_keep(model, kv[..., :p, :].to(device), tokens, positions, keep)
    idx_all = torch.cat([idx, torch.arange(p, gen.kv_len, device=idx.device)])
    kept = kv.index_select(-2, idx_all.to(kv.device))
    if gen.row is not None:
        rows.store.write_row(gen.row, kept)
        rows.lengths_changed()
    else:
        gen.kv = kept.pin_memory() if gen.offloaded and pin else kept
    new_len = kept.shape[-2]
    gen.pos_offset += gen.kv_len - new_len
    gen.kv_len, gen.prompt_kv = new_len, keep
    gen.kept_pos = [positions[i] for i in idx.tolist()]
    return keep
