"""A process's memory and threads, the one /proc reader the server's diagnostics, the benchmarks and make stress share;
and the Python heap as tracemalloc counts it."""
from __future__ import annotations

import math
import os
import tracemalloc


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
