"""Which slot-store row holds which generation, and the window of rows a decode runs over.

A decode runs over a window of B contiguous store rows ``[lo, lo + B)`` holding exactly its B generations. Rows are
independent (left-aligned, each appends at its own column), so the batch changing costs copies of the rows that
leave or join only, never a re-pack of the batch. A generation that leaves the batch stays resident ("parked") in a
row outside the window, and the window goes where the fewest rows must move: one leaving at either edge of it moves
nothing (the window shrinks away from it) and rejoins by the window widening back over it. Moving a row within the
store is ~3-5x cheaper than cloning it into a fresh tensor (no allocation, no page faults).

The store itself (kv_cache.SlotKV) is made by the first generation that needs a row and grows on demand; on CPU it
sits in a reservation of address space (``RESERVE_ROWS`` x the model's context, pages mapped only where written), so
a growth inside it widens a view instead of copying the store.
"""
from __future__ import annotations

import itertools

import torch

from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.transformers.kv_cache import KVShape, SlotKV

# address space the CPU slot store reserves (rows x token columns, the columns capped by the model's context);
# only written pages become memory: 256 x 512 columns of the embedded planner is 1 GiB of address space
RESERVE_ROWS, RESERVE_TOKENS = 256, 4096


class SlotRows:
    """The slot store and the generation resident in each of its rows."""

    def __init__(self, shape: KVShape, device: torch.device, headroom_tokens: int, max_context: int | None,
                 min_rows: int = 0, min_tokens: int = 0) -> None:
        """``headroom_tokens``: columns added when the store grows; ``min_rows`` x ``min_tokens``: the least store
        made by the first generation, kept when idle (0: start at 8 rows, grow on demand, give it back when idle)."""
        self.shape, self.device = shape, device
        self.headroom_tokens, self.max_context = headroom_tokens, max_context
        self.min_rows, self.min_tokens = max(0, int(min_rows)), max(0, int(min_tokens))
        # keep the store when the last generation is released: its pages stay mapped, so the next busy period's
        # first writes and row moves do not page-fault (a fresh row costs ~4x a warm one on CPU)
        self.keep_when_idle = self.min_rows > 0
        # CPU: the store sits in a reservation of address space (False: growths allocate and copy; an ablation)
        self.reserve = True
        # the window goes where the fewest rows must move (False: always [0, B); ablation,
        # benchmarks/overhead.py segmentation)
        self.slide_window = True
        self.store: SlotKV | None = None
        self.slots: list[GenerationState | None] = []   # resident generation of each store row
        self.lo = 0                                      # first row of the last decode's window
        self._last_active: list[GenerationState | None] = []

    # ----- the store -----
    def store_for(self, rows: int, capacity: int, gens: list[GenerationState]) -> SlotKV:
        """The slot store, created or grown to hold ``rows`` rows of ``capacity`` columns (with headroom for
        ``gens``' remaining tokens)."""
        headroom = max(1, min(self.headroom_tokens, max(g.remaining() for g in gens)))
        if self.store is None:
            reserve = (RESERVE_ROWS, min(self.max_context or RESERVE_TOKENS, RESERVE_TOKENS)) if self.reserve else None
            self.store = SlotKV(self.shape, self.device, rows=max(rows, 8, self.min_rows),
                                capacity=max(capacity + headroom, self.min_tokens), reserve=reserve)
        self.store.ensure(rows, capacity, headroom)
        self.slots.extend([None] * (self.store.rows - len(self.slots)))
        return self.store

    def idle(self) -> None:
        """No generation is left: give the store back unless it is kept when idle."""
        if not self.keep_when_idle:
            self.drop()

    def drop(self) -> None:
        self.store, self.slots, self._last_active = None, [], []

    def nbytes(self) -> int:
        """Bytes of the store (0 without one)."""
        return self.store.nbytes() if self.store is not None else 0

    # ----- rows -----
    def claim(self, gen: GenerationState) -> int:
        """Give a generation the lowest free row (growing the store if none is free)."""
        for r, resident in enumerate(self.slots):
            if resident is None:
                self.slots[r], gen.row = gen, r
                return r
        self.store.ensure(len(self.slots) + 1, 0)
        self.slots.extend([None] * (self.store.rows - len(self.slots)))
        return self.claim(gen)

    def free(self, gen: GenerationState) -> None:
        self.slots[gen.row], gen.row = None, None

    def clone_out(self, gen: GenerationState, to_host: bool, pin: bool) -> None:
        """Copy a resident generation's row out of the store into a tensor of its own (on the device, or in host
        memory, pinned when ``pin``) and free the row."""
        src = self.store.read_row(gen.row, gen.kv_len)
        if to_host:
            gen.kv = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pin)
            gen.kv.copy_(src, non_blocking=pin)
            gen.offloaded = True
        else:
            gen.kv = src.clone()
        self.free(gen)

    def lengths_changed(self) -> None:
        """A resident row's length changed outside a decode (prompt eviction): the next decode reads them anew."""
        self._last_active = []

    # ----- the decode window -----
    def arrange(self, gens: list[GenerationState]) -> tuple[bool, list[GenerationState]]:
        """Make a window of rows [lo, lo + B) hold exactly these generations (in row order, returned); also whether
        the window's rows changed since the previous decode. When a window already holds them nothing moves."""
        batch = len(gens)
        if self.store is not None and max(g.kv_len for g in gens) < self.store.capacity:
            rows = [g.row for g in gens]
            if None not in rows and max(rows) - min(rows) == batch - 1 and (self.slide_window or min(rows) == 0):
                lo = min(rows)
                order = self.slots[lo:lo + batch]
                changed = order != self._last_active or lo != self.lo
                self._last_active, self.lo = order, lo
                return changed, order
        return self._compact(gens)

    def _compact(self, gens: list[GenerationState]) -> tuple[bool, list[GenerationState]]:
        """Place the window and copy only rows that leave or join it: a parked generation inside the new window
        moves to the free row nearest the window (so that a rejoin may only widen it); a wanted one outside moves
        in; one without a row (cloned out, offloaded, its prompt KV evicted) is written in. A parked generation is
        cloned out only when no free row exists."""
        batch, wanted = len(gens), set(gens)
        parked = sum(1 for g in self.slots if g is not None and g not in wanted)
        store = self.store_for(rows=batch + parked, capacity=max(g.kv_len for g in gens) + 1, gens=gens)
        slots = self.slots
        lo = self._window(batch, wanted) if self.slide_window else 0
        hi = lo + batch
        outside = [g for g in gens if g.row is not None and not lo <= g.row < hi]
        moved = bool(outside)

        def move(gen: GenerationState, dst: int) -> None:
            store.move_row(gen.row, dst, gen.kv_len)
            slots[gen.row], slots[dst], gen.row = None, gen, dst

        free_in = [r for r in range(lo, hi) if slots[r] is None]
        while outside and free_in:                  # rows freed outside can take the leavers below
            move(outside.pop(), free_in.pop())
        nearest = sorted((r for r in range(len(slots)) if slots[r] is None and not lo <= r < hi),
                         key=lambda r: lo - r if r < lo else r - hi, reverse=True)
        for r in range(lo, hi):                     # park leavers that sit in the window
            gen = slots[r]
            if gen is not None and gen not in wanted:
                if nearest:
                    move(gen, nearest.pop())
                else:
                    self.clone_out(gen, to_host=False, pin=False)
                moved = True
        free_in = [r for r in range(lo, hi) if slots[r] is None]
        for gen in outside:
            move(gen, free_in.pop())
        for gen in gens:
            if gen.row is None:
                dst = free_in.pop()
                store.write_row(dst, gen.kv)
                slots[dst], gen.row, gen.kv, moved = gen, dst, None, True
        active = slots[lo:hi]
        changed = moved or active != self._last_active or lo != self.lo
        self._last_active, self.lo = active, lo
        return changed, active

    def _window(self, batch: int, wanted: set[GenerationState]) -> int:
        """First row of the window of ``batch`` store rows that needs the fewest row copies: parked generations
        inside it move out, wanted ones outside it move in. Ties go to the window nearest the store's middle
        (room on both sides to park the next leavers next to it)."""
        slots = self.slots
        # +1 for a parked row (it would move out), -1 for a wanted row (it would not move in)
        marks = [0 if g is None else -1 if g in wanted else 1 for g in slots]
        acc = [0, *itertools.accumulate(marks)]
        span = len(slots) - batch
        return min(range(span + 1), key=lambda lo: (acc[lo + batch] - acc[lo], abs(2 * lo - span)))
