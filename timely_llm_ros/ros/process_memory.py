"""A process's memory and threads, the one /proc reader the server's diagnostics, the benchmarks and make stress share;
the Python heap as tracemalloc counts it; and giving the C heap's free pages back to the system.

Why the last: CPython, the middleware and the tokenizer allocate through the C library's malloc. After a burst of goals
their memory is freed, but glibc keeps the free pages of its arenas (one per thread that allocated) mapped, so
resident memory stays at the burst's high-water mark and creeps up as fragments of later bursts land in new places.
``malloc_trim(0)`` returns every whole free page to the system; it frees nothing in use.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import tracemalloc
from functools import cache
from typing import Callable


def resident_mib(pid: int | str = "self") -> float:
    """A process's resident memory (MiB) from /proc/<pid>/statm; nan when it is gone or there is no /proc (not
    Linux)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return math.nan


def thread_count(pid: int | str = "self") -> int:
    """A process's threads as the kernel counts them (Python's and the middleware's, from /proc/<pid>/status);
    -1 when it is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def python_heap_mib() -> float:
    """What this process's Python allocators hold now (MiB) by tracemalloc: every block allocated since tracing
    started and not freed yet (tensor storage and the middleware's own memory are not Python blocks); nan while
    tracemalloc is not tracing."""
    if not tracemalloc.is_tracing():
        return math.nan
    return tracemalloc.get_traced_memory()[0] / 2**20


@cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_heap() -> bool:
    """Give the C heap's whole free pages back to the system (glibc ``malloc_trim(0)``, every arena); False where
    there is no such call. Nothing in use moves; the call walks the free lists (about a millisecond per hundred MiB
    of heap), so it belongs where the process is idle."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class QuietTrim:
    """When to give the heap back: once goals came since the last trim, then none came for ``quiet_s`` and the
    server holds none (``idle``). A busy server is never held up by a trim, a quiet one trims once per burst."""

    def __init__(self, quiet_s: float, trim: Callable[[], bool] = release_free_heap) -> None:
        self.quiet_s = quiet_s      # <= 0: never
        self._trim = trim
        self._seen = 0              # the goal count when last polled
        self._quiet_since = -math.inf
        self._trimmed = 0           # the goal count at the last trim

    def poll(self, received: int, idle: bool, now: float) -> float | None:
        """``received``: goals taken in so far (any count that changes when one comes); ``idle``: none open and
        nothing being generated. The resident MiB given back when it trimmed now, else None."""
        if received != self._seen:
            self._seen, self._quiet_since = received, now
            return None
        if self.quiet_s <= 0 or received == self._trimmed or not idle or now - self._quiet_since < self.quiet_s:
            return None
        self._trimmed = received
        before = resident_mib()
        return before - resident_mib() if self._trim() else None
