"""The server's health as an operator reads it (ROS-free; ros/server/state_message.py puts it on /diagnostics).

Requests that ended in the last ``window_s`` seconds are counted per urgency class (a goal with its own TUF counts
as "custom"): done, dropped, failed (cancelled ones are the client's choice and are not counted). Levels:

- ERROR: the engine is not loaded (unconfigured, or configure failed) or has failed (its process died), or an
  expected robot's executor is missing;
- WARN: over the window, at least ``min_requests`` ended and more than ``warn_drop_rate`` of them were dropped or
  more than ``warn_failure_rate`` failed; or a class is starving;
- OK otherwise.

A class is **starving** when, within the window, at least ``starvation_drops`` of its requests were dropped and
they are at least half of its requests that ended. ``OutcomeWindow.episodes`` reports each class once when it
starts starving and once when it stops (the server logs those, not every drop).
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from timely_llm_ros.core.request import RequestState

OK, WARN, ERROR = "OK", "WARN", "ERROR"
CUSTOM_CLASS = "custom"


@dataclass(frozen=True)
class HealthLimits:
    """Thresholds (the server's parameters health_window_s, warn_drop_rate, warn_failure_rate, starvation_drops)."""

    window_s: float = 60.0
    warn_drop_rate: float = 0.2
    warn_failure_rate: float = 0.2
    starvation_drops: int = 3
    min_requests: int = 5       # rates are judged over at least this many ended requests


@dataclass
class ClassCounts:
    """Requests of one class that ended within the window."""

    ended: int = 0
    done: int = 0
    dropped: int = 0
    failed: int = 0


@dataclass
class Health:
    level: str                  # OK | WARN | ERROR
    message: str
    reasons: list[str] = field(default_factory=list)


class OutcomeWindow:
    """Ended requests of the last window_s seconds, by class (thread-safe: goals end on many threads)."""

    def __init__(self, limits: HealthLimits = HealthLimits()) -> None:
        self.limits = limits
        self._ended: deque[tuple[float, str, RequestState]] = deque()
        self._starving: set[str] = set()
        self._lock = threading.Lock()

    def add(self, t: float, urgency_class: str, state: RequestState) -> None:
        """A request of ``urgency_class`` ("" = custom) ended in ``state`` at time t (cancelled: not counted)."""
        if state not in (RequestState.DONE, RequestState.DROPPED, RequestState.FAILED):
            return
        with self._lock:
            self._ended.append((t, urgency_class or CUSTOM_CLASS, state))

    def counts(self, t: float) -> dict[str, ClassCounts]:
        """Per class, the requests that ended in (t - window_s, t]."""
        with self._lock:
            while self._ended and self._ended[0][0] <= t - self.limits.window_s:
                self._ended.popleft()
            ended = list(self._ended)
        out: dict[str, ClassCounts] = {}
        for _, cls, state in ended:
            c = out.setdefault(cls, ClassCounts())
            c.ended += 1
            c.done += state == RequestState.DONE
            c.dropped += state == RequestState.DROPPED
            c.failed += state == RequestState.FAILED
        return out

    def starving(self, counts: dict[str, ClassCounts]) -> list[str]:
        """Classes that are starving by these counts (see the module docstring)."""
        n = self.limits.starvation_drops
        return sorted(cls for cls, c in counts.items() if c.dropped >= n and 2 * c.dropped >= c.ended)

    def episodes(self, t: float) -> tuple[list[str], list[str]]:
        """(classes that started starving, classes that stopped) since the last call."""
        now = set(self.starving(self.counts(t)))
        with self._lock:
            started, stopped = sorted(now - self._starving), sorted(self._starving - now)
            self._starving = now
        return started, stopped


def assess(engine_loaded: bool, missing_robots: list[str], counts: dict[str, ClassCounts], starving: list[str],
           limits: HealthLimits, not_loaded_why: str = "the engine is not loaded") -> Health:
    """The level and one-line message /diagnostics shows (every reason, most severe first)."""
    errors, warnings = [], []
    if not engine_loaded:
        errors.append(not_loaded_why)
    if missing_robots:
        errors.append(f"expected executor(s) missing: {', '.join(missing_robots)} (start them, or check "
                      "expected_agents)")
    ended = sum(c.ended for c in counts.values())
    if ended >= limits.min_requests:
        window = f"in the last {limits.window_s:g} s"
        dropped = sum(c.dropped for c in counts.values())
        failed = sum(c.failed for c in counts.values())
        if dropped > limits.warn_drop_rate * ended:
            warnings.append(f"{dropped} of {ended} requests dropped {window} (warn_drop_rate {limits.warn_drop_rate:g})")
        if failed > limits.warn_failure_rate * ended:
            warnings.append(f"{failed} of {ended} requests failed {window} (warn_failure_rate "
                            f"{limits.warn_failure_rate:g})")
    for cls in starving:
        c = counts[cls]
        warnings.append(f"class {cls!r} is starving: {c.dropped} of its {c.ended} requests dropped in the last "
                        f"{limits.window_s:g} s (let it serve late plans, raise max_batch, or lower the load)")
    level = ERROR if errors else WARN if warnings else OK
    reasons = errors + warnings
    return Health(level, "; ".join(reasons) if reasons else "serving", reasons)
