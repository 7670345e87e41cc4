"""Freed heap goes back to the OS once the server is idle (ros/memory_trim.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from timely_llm_ros.ros.memory_trim import IdleTrimmer, malloc_trim


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_trims_once_per_idle_period_after_work():
    clock, calls = _Clock(), []
    trimmer = IdleTrimmer(1.0, trim=lambda: calls.append(clock.t) or True, clock=clock)
    for t in (0.0, 5.0):                 # idle from the start: nothing was used, nothing to give back
        clock.t = t
        assert not trimmer.tick(busy=False)
    clock.t = 6.0
    trimmer.tick(busy=True)
    for t, trimmed in ((6.1, False), (7.0, False), (7.1, True), (9.0, False), (60.0, False)):
        clock.t = t
        assert trimmer.tick(busy=False) is trimmed, t
    assert calls == [7.1]                # 1 s after the work ended, then not again while idle
    clock.t = 61.0
    trimmer.tick(busy=True)              # new work: one more trim after it
    clock.t = 61.5
    trimmer.tick(busy=False)
    clock.t = 62.4
    trimmer.tick(busy=True)              # busy again before the second had passed: the idle clock restarts
    for t in (62.5, 63.4, 63.6):
        clock.t = t
        trimmer.tick(busy=False)
    assert calls == [7.1, 63.6] and trimmer.trims == 2


def test_zero_idle_time_turns_it_off():
    calls = []
    clock = _Clock()
    trimmer = IdleTrimmer(0.0, trim=lambda: calls.append(1) or True, clock=clock)
    trimmer.tick(busy=True)
    clock.t = 100.0
    assert not trimmer.tick(busy=False) and calls == []


def test_malloc_trim_returns_a_fragmented_heap_to_the_os():
    """200 MB of 1 KB buffers, one in 16 kept: the heap cannot shrink from its top, so only malloc_trim gives the
    free pages between the survivors back (in a child process, for a clean resident-memory reading)."""
    if not malloc_trim():
        pytest.skip("this C library has no malloc_trim (not glibc)")
    probe = textwrap.dedent("""
        from timely_llm_ros.ros.memory_trim import malloc_trim, resident_mib
        objs = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]
        keep = objs[::16]
        del objs
        before = resident_mib()
        malloc_trim()
        print(before, resident_mib(), len(keep))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    before, after, _ = (float(x) for x in out.stdout.split())
    assert before > 150.0, out.stdout     # the freed buffers were still resident
    assert after < before - 100.0, out.stdout
