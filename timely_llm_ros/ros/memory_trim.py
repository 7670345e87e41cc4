"""Hand freed heap memory back to the OS once the server has been idle a while (glibc's malloc_trim).

Memory Python frees goes back to glibc's arenas, not to the OS: without a trim the server's resident memory keeps
the free pages its busiest moment left. malloc_trim(0) returns them (every arena, not only the top of the main
heap, since glibc 2.8). It walks the arenas under their locks, so it runs only after the work has ended, once per
idle period, on the scheduler thread. After bursts of 200 goals it gave back about 3 MiB of 424
(benchmarks/memory_after_burst.py --compare trim): most of what a burst added was live, chiefly the goal threads
rclpy's pool keeps; those now end when idle (ros/elastic_executor.py, parameter worker_idle_exit_s).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from typing import Callable


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):   # not glibc (musl, macOS): nothing to trim with
        return None
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_MALLOC_TRIM = _load_malloc_trim()


def malloc_trim() -> bool:
    """Return free heap pages to the OS; False where the C library has no malloc_trim."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def resident_mib(pid: int | str = "self") -> float:
    """A process's resident memory (MiB) from /proc/<pid>/statm; nan when it is gone or there is no /proc (not
    Linux). The one reader the server, the benchmarks and make stress share."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return math.nan


class IdleTrimmer:
    """Calls `trim` once the server has been idle for `idle_s` after some work (0 turns it off)."""

    def __init__(self, idle_s: float, trim: Callable[[], bool] = malloc_trim,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self._trim = trim
        self._clock = clock
        self._worked = False                 # work since the last trim
        self._idle_since: float | None = None
        self.trims = 0

    def tick(self, busy: bool) -> bool:
        """Call on every loop iteration; True when it trimmed now."""
        now = self._clock()
        if busy:
            self._worked, self._idle_since = True, None
            return False
        if self._idle_since is None:
            self._idle_since = now
        if not self._worked or self.idle_s <= 0 or now - self._idle_since < self.idle_s:
            return False
        self._worked = False
        if self._trim():
            self.trims += 1
            return True
        return False
