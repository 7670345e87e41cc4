"""Clocks for the event loop: a virtual clock that jumps, and a wall clock that sleeps.

Both read as ``clock()`` / ``clock.now`` (seconds since the clock's origin) and move with ``advance(dt)`` and
``advance_to(t)``; the virtual clock jumps there at once, the wall clock sleeps until real time gets there.
"""
from __future__ import annotations

import time
from typing import Protocol


class LoopClock(Protocol):
    """What the event loop needs from a clock."""

    @property
    def now(self) -> float: ...

    def __call__(self) -> float: ...

    def advance(self, dt: float) -> float: ...

    def advance_to(self, t: float) -> float: ...


class VirtualClock:
    """Monotonic simulated time in seconds; call it to read the time."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> float:
        """Move forward by dt >= 0 seconds; returns the new time."""
        if dt < 0:
            raise ValueError(f"time cannot go back ({dt} s)")
        self.now += dt
        return self.now

    def advance_to(self, t: float) -> float:
        """Jump to t if it is later than now."""
        self.now = max(self.now, t)
        return self.now


class WallClock:
    """Real time (time.monotonic) in seconds since the origin; advancing it sleeps."""

    def __init__(self, start: float = 0.0) -> None:
        self.reset(start)

    def reset(self, start: float = 0.0) -> None:
        """Make the current instant read as `start`."""
        self._origin = time.monotonic() - start

    @property
    def now(self) -> float:
        return time.monotonic() - self._origin

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> float:
        """Sleep dt >= 0 seconds; returns the time after waking."""
        if dt < 0:
            raise ValueError(f"time cannot go back ({dt} s)")
        return self.advance_to(self.now + dt)

    def advance_to(self, t: float) -> float:
        """Sleep until t (returns at once if t has passed)."""
        while (left := t - self.now) > 0:
            time.sleep(left)
        return self.now
