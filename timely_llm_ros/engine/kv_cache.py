"""A preallocated, right-aligned batch KV cache that plugs into transformers' Cache API.

All layers share one tensor ``[layers, 2, batch, kv_heads, capacity, head_dim]``. Rows are
right-aligned: row ``b`` holds its ``n_b`` tokens in columns ``[width - n_b, width)`` and the
columns before are padding, masked out. Every row appends at column ``width`` in the same
step, so a decode step writes in place (no torch.cat) and attention reads a view.
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class KVShape:
    """Geometry of a model's KV cache."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> None:
        self.layers, self.kv_heads, self.head_dim, self.dtype = layers, kv_heads, head_dim, dtype

    @classmethod
    def of(cls, config, dtype: torch.dtype) -> "KVShape":
        """Read the geometry from a transformers decoder config."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(config.num_hidden_layers, kv_heads, head_dim, dtype)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes of one token of context, all layers, keys and values."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return self.layers * 2 * self.kv_heads * self.head_dim * elem

    def empty(self, batch: int, capacity: int, device: torch.device | str) -> torch.Tensor:
        """An uninitialised batch buffer."""
        return torch.empty((self.layers, 2, batch, self.kv_heads, capacity, self.head_dim),
                           dtype=self.dtype, device=device)


class _SlotLayer(CacheLayerMixin):
    """One layer's view of the shared batch buffer."""

    is_sliding = False

    def __init__(self, cache: "BatchKV", layer_idx: int) -> None:
        super().__init__()
        self._cache, self._idx = cache, layer_idx
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffer is preallocated."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new keys/values at the append column; return views of the valid columns."""
        buf, w = self._cache.buffer[self._idx], self._cache.width
        end = w + key_states.shape[-2]
        buf[0, :, :, w:end].copy_(key_states)
        buf[1, :, :, w:end].copy_(value_states)
        return buf[0, :, :, :end], buf[1, :, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache.width + query_length, 0

    def get_seq_length(self) -> int:
        return self._cache.width

    def get_max_length(self) -> int:
        return self._cache.capacity


class BatchKV(Cache):
    """The KV of a fixed set of generations, right-aligned in one preallocated buffer."""

    def __init__(self, shape: KVShape, lengths: Sequence[int], capacity: int,
                 device: torch.device | str) -> None:
        self.shape = shape
        self.device = torch.device(device)
        self.width = max(lengths) if lengths else 0
        self.lengths = list(lengths)
        self.buffer = shape.empty(len(lengths), max(capacity, self.width + 1), self.device)
        super().__init__(layers=[_SlotLayer(self, i) for i in range(shape.layers)])
        self._mask = self._build_mask()

    @property
    def capacity(self) -> int:
        return self.buffer.shape[-2]

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def start(self, row: int) -> int:
        """First valid column of a row."""
        return self.width - self.lengths[row]

    def _build_mask(self) -> torch.Tensor:
        cols = torch.arange(self.capacity, device=self.device)
        starts = torch.tensor([self.width - n for n in self.lengths], device=self.device)
        return cols[None, :] >= starts[:, None]            # [batch, capacity]

    def load_row(self, row: int, kv: torch.Tensor) -> None:
        """Copy one generation's KV ``[layers, 2, kv_heads, n, head_dim]`` into a row."""
        n = kv.shape[-2]
        if n != self.lengths[row]:
            raise ValueError(f"row {row} expects {self.lengths[row]} tokens, got {n}")
        self.buffer[:, :, row, :, self.width - n:self.width].copy_(kv, non_blocking=True)

    def row_view(self, row: int) -> torch.Tensor:
        """A view of one row's valid KV ``[layers, 2, kv_heads, n, head_dim]`` (no copy)."""
        return self.buffer[:, :, row, :, self.start(row):self.width]

    def decode_mask(self) -> torch.Tensor:
        """4D boolean mask for one appended token per row: ``[batch, 1, 1, width + 1]``."""
        return self._mask[:, None, None, :self.width + 1]

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more columns, growing the buffer (amortised) when needed."""
        need = self.width + extra
        if need <= self.capacity:
            return
        grown = self.shape.empty(self.batch, max(need, self.capacity + self.capacity // 2), self.device)
        grown[..., :self.width, :].copy_(self.buffer[..., :self.width, :])
        self.buffer = grown
        self._mask = self._build_mask()

    def advance(self, tokens: int = 1) -> None:
        """Commit ``tokens`` appended columns (call after the forward pass)."""
        self.width += tokens
        self.lengths = [n + tokens for n in self.lengths]

    def nbytes(self) -> int:
        """Bytes physically allocated by the buffer."""
        return self.buffer.numel() * self.buffer.element_size()
