"""The server gives the C heap's free pages back once a burst of goals is over (ros/process_memory.py): the trim
itself on this process's real heap, and when QuietTrim decides to trim."""
from __future__ import annotations

import math

import pytest

from timely_llm_ros.ros.process_memory import QuietTrim, release_free_heap, resident_mib

pytestmark = pytest.mark.skipif(math.isnan(resident_mib()), reason="no /proc: resident memory cannot be read")


def test_release_free_heap_gives_freed_small_blocks_back():
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim (not glibc)")
    blocks = [bytearray(2000) for _ in range(60_000)]    # ~120 MiB in malloc'd blocks, not mmap'd ones
    pin = bytearray(2000)                                  # above them: free() alone cannot shrink the heap's top
    grown = resident_mib()
    del blocks
    kept = resident_mib()
    release_free_heap()
    after = resident_mib()
    assert kept - after > 60, (grown, kept, after)         # most of the freed 120 MiB left the process
    del pin


class Trims:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return True


def test_quiet_trim_trims_once_per_burst_after_the_quiet_time():
    trims = Trims()
    q = QuietTrim(1.0, trims)
    assert q.poll(0, True, 0.0) is None and q.poll(0, True, 50.0) is None   # no goal ever: nothing to give back
    q.poll(5, True, 100.0)                       # goals came
    assert q.poll(5, True, 100.5) is None        # not quiet long enough
    assert q.poll(5, False, 101.5) is None       # quiet, but a goal is still open
    assert q.poll(5, True, 101.5) is not None and trims.calls == 1
    assert q.poll(5, True, 200.0) is None and trims.calls == 1   # once per burst
    q.poll(6, True, 300.0)                       # a new goal restarts the quiet time
    assert q.poll(6, True, 300.9) is None
    assert q.poll(6, True, 301.0) is not None and trims.calls == 2


def test_quiet_trim_off_never_trims():
    trims = Trims()
    q = QuietTrim(0.0, trims)
    q.poll(3, True, 0.0)
    assert q.poll(3, True, 1e6) is None and trims.calls == 0
