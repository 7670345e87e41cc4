"""A process's resident memory, the one /proc reader the server's diagnostics, the benchmarks and make stress share."""
from __future__ import annotations

import math
import os


def resident_mib(pid: int | str = "self") -> float:
    """A process's resident memory (MiB) from /proc/<pid>/statm; nan when it is gone or there is no /proc (not
    Linux)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return math.nan
