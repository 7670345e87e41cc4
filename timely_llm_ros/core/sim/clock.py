"""A virtual clock shared by the simulated engine and the discrete-event loop."""
from __future__ import annotations


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
