"""Slot KV store: one preallocated buffer whose rows hold generations, plugged into transformers' Cache API.

Buffer ``[layers, 2, rows, kv_heads, capacity, head_dim]``. A generation resident in row ``r``
keeps its ``n`` tokens left-aligned in columns ``[0, n)`` and appends at column ``n``; rows are
independent, so a generation joins or leaves the batch by copying only its own row. A decode
step runs over a window of rows ``[lo, lo + active)``: each row writes its new key/value at its own
column (one indexed write per layer) and attention reads a view masked to each row's length.

On CPU the buffer can be a view of a larger reservation of address space (``lazy_zeros``): growing within it
only widens the view, so a burst claiming rows costs no reallocation and no copy, and only pages that are
written become resident memory.
"""
from __future__ import annotations

import math
import mmap
import sys
import weakref
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


_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0   # MAP_NORESERVE: address space, no swap claim


def lazy_zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros over an anonymous memory mapping: the kernel maps a zero page where it is first
    touched, so a large one costs address space, not memory, until written. The mapping is unmapped when the
    last tensor viewing it is freed (the tensor holds the mmap object; no cycle). Raises OSError if the
    system refuses the mapping (e.g. strict overcommit)."""
    numel = math.prod(shape)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    mem = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE,
                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return torch.frombuffer(mem, dtype=dtype, count=numel).view(*shape)


class _SlotLayer(CacheLayerMixin):
    """One layer's view of the shared buffer; the store's mode says where new keys/values go.

    It holds its store through a weak reference: a strong one would make store <-> layers a reference
    cycle, and the store's buffer (all the KV) would then be freed only when Python's cycle collector
    happens to run, long after the engine dropped the store.
    """

    is_sliding = False

    def __init__(self, store: "SlotKV", layer_idx: int) -> None:
        super().__init__()
        self._store_ref, self._idx = weakref.ref(store), layer_idx
        self.is_initialized = True

    @property
    def _store(self) -> "SlotKV":
        store = self._store_ref()
        if store is None:
            raise RuntimeError("the slot KV store of this cache layer was freed")
        return store

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffer is preallocated."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        s = self._store
        keys, values = s.buffer[self._idx, 0], s.buffer[self._idx, 1]   # [rows, heads, capacity, dim]
        if s.prefill_rows is not None and s.prefill_offset:             # one row's prompt after a reused prefix
            r, start, end = s.prefill_rows[0], s.prefill_offset, s.prefill_offset + key_states.shape[-2]
            keys[r, :, start:end].copy_(key_states[0])
            values[r, :, start:end].copy_(value_states[0])
            return keys[r:r + 1, :, :end], values[r:r + 1, :, :end]
        if s.prefill_rows is not None:                                  # fresh sequences, columns [0, q)
            q = key_states.shape[-2]                                    # (they attend only to themselves)
            if len(s.prefill_rows) == 1:
                r = s.prefill_rows[0]
                keys[r, :, :q].copy_(key_states[0])
                values[r, :, :q].copy_(value_states[0])
            else:
                keys[s.prefill_index, :, :q] = key_states
                values[s.prefill_index, :, :q] = value_states
            return key_states, value_states
        rows, cols = s.store_index, s.lengths_t                        # one new token per row, at its length
        keys[rows, :, cols] = key_states[:, :, 0]
        values[rows, :, cols] = value_states[:, :, 0]
        end, lo = s.max_length + 1, s.lo
        return keys[lo:lo + s.active, :, :end], values[lo:lo + s.active, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        s = self._store
        return s.prefill_offset if s.prefill_rows is not None else s.max_length

    def get_max_length(self) -> int:
        return self._store.capacity


class SlotKV(Cache):
    """Rows of KV for resident generations; a forward either prefills fresh rows or decodes rows [lo, lo + active)."""

    def __init__(self, shape: KVShape, device: torch.device | str, rows: int = 4, capacity: int = 256,
                 reserve: tuple[int, int] | None = None) -> None:
        """``reserve`` (rows, columns), CPU only: map address space for that many up front (``lazy_zeros``);
        the store still starts at ``rows`` x ``capacity`` and grows within the reservation without copying."""
        self.shape = shape
        self.device = torch.device(device)
        self._backing = self._reserve(rows, capacity, reserve)
        self.buffer = self._backing[:, :, :rows, :, :capacity]
        self.prefill_rows: list[int] | None = None    # set while a prefill forward runs
        self.prefill_offset = 0                        # columns already filled (a reused prompt prefix)
        self.prefill_index = torch.zeros(0, dtype=torch.long, device=self.device)
        self.active = 0
        self.lo = 0                            # first row of the decode window
        self.lengths: list[int] = []           # tokens of the active rows (host copy)
        self.max_length = 0
        self.lengths_t = torch.zeros(0, dtype=torch.long, device=self.device)   # the same, on the device
        self.store_index = torch.zeros(0, dtype=torch.long, device=self.device)  # store rows of the window
        self.moves = 0                         # row moves so far (load-independent cost of placement)
        self._cols = torch.arange(capacity, device=self.device)
        super().__init__(layers=[_SlotLayer(self, i) for i in range(shape.layers)])

    def _zeros(self, rows: int, capacity: int) -> torch.Tensor:
        # zeros, not empty: masked columns still enter attention as 0-weight * value, and NaN garbage
        # there would poison the output (0 * NaN = NaN)
        s = self.shape
        return torch.zeros((s.layers, 2, rows, s.kv_heads, capacity, s.head_dim), dtype=s.dtype, device=self.device)

    def _reserve(self, rows: int, capacity: int, reserve: tuple[int, int] | None) -> torch.Tensor:
        if reserve is not None and self.device.type == "cpu":
            s = self.shape
            dims = (s.layers, 2, max(rows, reserve[0]), s.kv_heads, max(capacity, reserve[1]), s.head_dim)
            try:
                return lazy_zeros(dims, s.dtype)
            except OSError:       # no address space to spare: allocate as it grows
                pass
        return self._zeros(rows, capacity)

    @property
    def reservation(self) -> tuple[int, int]:
        """(rows, columns) the store can grow to without a copy."""
        return self._backing.shape[2], self._backing.shape[-2]

    @property
    def rows(self) -> int:
        return self.buffer.shape[2]

    @property
    def capacity(self) -> int:
        return self.buffer.shape[-2]

    def nbytes(self) -> int:
        """Bytes of the store's rows x columns (allocated; with a reservation, at most this much is ever written)."""
        return self.buffer.numel() * self.buffer.element_size()

    def ensure(self, rows: int, capacity: int, headroom: int = 0) -> None:
        """Grow (amortised) so that ``rows`` rows of ``capacity`` columns fit."""
        if rows <= self.rows and capacity <= self.capacity:
            return
        new_rows = self.rows if rows <= self.rows else max(rows, 2 * self.rows)
        new_cap = self.capacity if capacity <= self.capacity else max(capacity + headroom, self.capacity * 3 // 2)
        back_rows, back_cap = self.reservation
        if rows <= back_rows and capacity <= back_cap:        # inside the reservation: a wider view, no copy
            new_rows, new_cap = min(new_rows, back_rows), min(new_cap, back_cap)
            self.buffer = self._backing[:, :, :new_rows, :, :new_cap]
        else:
            grown = self._zeros(new_rows, new_cap)
            grown[:, :, :self.rows, :, :self.capacity].copy_(self.buffer)
            self._backing = self.buffer = grown
        self._cols = torch.arange(new_cap, device=self.device)

    # ----- rows -----
    def read_row(self, row: int, n: int) -> torch.Tensor:
        """A view of a row's KV ``[layers, 2, kv_heads, n, head_dim]`` (no copy)."""
        return self.buffer[:, :, row, :, :n]

    def write_row(self, row: int, kv: torch.Tensor) -> None:
        """Copy a generation's KV ``[layers, 2, kv_heads, n, head_dim]`` into a row."""
        self.buffer[:, :, row, :, :kv.shape[-2]].copy_(kv, non_blocking=True)

    def move_row(self, src: int, dst: int, n: int) -> None:
        """Copy the first n columns of row src into row dst."""
        self.moves += 1
        self.buffer[:, :, dst, :, :n].copy_(self.buffer[:, :, src, :, :n])

    # ----- modes -----
    def begin_prefill(self, rows: Sequence[int], offset: int = 0) -> None:
        """The next forward prefills sequences (batch order) into these rows from column ``offset``
        (> 0 only for one row whose first ``offset`` columns already hold a reused prefix)."""
        if offset and len(rows) != 1:
            raise ValueError("a prefill after a reused prefix runs one row at a time")
        self.prefill_rows, self.prefill_offset = list(rows), offset
        if len(rows) > 1:
            self.prefill_index = torch.tensor(rows, dtype=torch.long, device=self.device)

    def end_prefill(self) -> None:
        self.prefill_rows, self.prefill_offset = None, 0

    def begin_decode(self, lengths: Sequence[int], changed: bool, lo: int = 0) -> torch.Tensor:
        """The next forward appends one token to each row of [lo, lo + len(lengths)), whose generations hold
        ``lengths`` tokens. ``changed`` must be set whenever the rows, their generations or ``lo`` differ from the
        previous decode. Returns the 4D additive mask ``[rows, 1, 1, columns]`` (0 where a row attends, -inf
        elsewhere)."""
        self.prefill_rows = None
        if changed:
            self.lo, self.active = lo, len(lengths)
            self.lengths_t = torch.tensor(lengths, dtype=torch.long, device=self.device)
            self.store_index = torch.arange(lo, lo + self.active, device=self.device)
        self.lengths = list(lengths)
        self.max_length = max(self.lengths)
        cols = self._cols[:self.max_length + 1]
        blocked = cols[None, :] > self.lengths_t[:, None]
        # additive (0 / -inf), made once per step: SDPA would convert a boolean mask again in every layer
        mask = torch.zeros(blocked.shape, dtype=self.shape.dtype, device=self.device)
        return mask.masked_fill_(blocked, float("-inf"))[:, None, None, :]

    def positions(self) -> torch.Tensor:
        """Position ids of the appended tokens: each row's current length, ``[active, 1]``."""
        return self.lengths_t[:, None]

    def end_decode(self) -> None:
        """Commit the appended column of every row of the window."""
        self.lengths_t += 1
        self.lengths = [n + 1 for n in self.lengths]
        self.max_length += 1
