"""The attention the transformers engine's forwards run (registered with transformers' AttentionInterface).

transformers' own "sdpa" attention repeats every key/value head for the query heads that share it (grouped-query
attention) whenever a 4D mask is given, which the engine gives at every decode (each row attends to its own length):
a copy of the whole context per layer. On SmolLM2 (9 query heads on 3 KV heads) at batch 8 x ~800 tokens that copy was
55% of a decode step. Here nothing is repeated:
- decode (one query per row): the query heads that share a KV head are that head's query rows, so one SDPA over
  ``[B, kv_heads, heads/kv_heads, head_dim]`` queries against the KV heads as they are, masked by the rows' lengths;
  the keys and values are the slot store's strided views, read in place. Any device.
- prefill on CPU: SDPA with ``enable_gqa`` (torch's CPU kernels share KV heads without a copy, mask or not; the
  result equals the repeated heads' bit for bit).
- prefill with a mask elsewhere (cuda): transformers' "sdpa" (its fused masked kernels need the repeated heads).
``SlotAttention`` switches a model to it for the engine's forwards only; generate() and other callers keep theirs
(a mask-free call here would not get transformers' padding masks).

On CUDA the SDPA calls leave out cuDNN's kernel: it builds an execution plan for every new shape, and a decode's keys
grow by one column a step, so every step paid about 1.4 ms of host time a layer (an H200, torch 2.11: a SmolLM2-shaped
decode step 58 ms with it, 18 ms with flash / memory-efficient attention; benchmarks/gpu_engine.py).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

SLOT_ATTENTION = "timely_slot_sdpa"
CUDA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]   # no cuDNN (above);
                                                    # set once per forward by SlotAttention, not per layer


def slot_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """Attention of ``query [B, heads, q, dim]`` over ``key``/``value [B, kv_heads, kv, dim]``; returns
    ``[B, q, heads, dim]``. The mask is ``[B, 1, q, kv]``, boolean (True = attend) or additive, or None (causal,
    kv == q)."""
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len == 1 and (attention_mask is None or attention_mask.shape[1] == 1):
        grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
        out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(batch, 1, heads, dim), None   # a CUDA kernel may return it non-contiguous
    if query.device.type == "cpu" or attention_mask is None:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                             is_causal=attention_mask is None, enable_gqa=heads != kv_heads)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


AttentionInterface.register(SLOT_ATTENTION, slot_attention)


class SlotAttention:
    """Context manager: ``model``'s attention layers run ``slot_attention`` inside it, on CUDA without cuDNN's SDPA
    kernel (both restored on exit, also when an interrupt ends the forward)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._config = model.config
        self._cuda = next(model.parameters()).device.type == "cuda"
        self._backends: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        self._saved = self._config._attn_implementation
        self._config._attn_implementation = SLOT_ATTENTION
        if self._cuda:
            self._backends = sdpa_kernel(CUDA_BACKENDS)
            self._backends.__enter__()

    def __exit__(self, *exc) -> None:
        self._config._attn_implementation = self._saved
        if self._backends is not None:
            self._backends.__exit__(*exc)
            self._backends = None
