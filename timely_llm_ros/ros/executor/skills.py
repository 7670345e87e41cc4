"""Skill registry and the context a skill runs in (no ROS types: a robot team's skill code stays ROS-free).

A skill is a Python callable ``fn(ctx, *args)``: ``args`` are the call's argument values (numbers as int/float,
the rest as str; a variable or a nested query already evaluated). It returns when the skill is done -- a query
returns its value (``@skill(..., returns=bool|float|str)``) --, raises ``SkillCancelled`` (or returns after
``ctx.cancelled`` turned true) when cancelled, and raises any other exception when it failed.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping

SkillFn = Callable[..., Any]
Estimate = Callable[[tuple], float]
RETURN_TYPES = {bool: "bool", float: "float", str: "str", "bool": "bool", "float": "float", "str": "str"}

_MARK = "_timely_skill"


class SkillCancelled(Exception):
    """Raised inside a skill (by ``ctx.sleep``/``ctx.check``) when its segment was cancelled."""


class SkillFailed(RuntimeError):
    """A skill could not do its job; the message goes to the planner server."""


@dataclass(frozen=True)
class SkillEntry:
    name: str
    fn: SkillFn
    estimate: Estimate | None = None   # seconds for these args, for progress feedback (time_remaining)
    returns: str | None = None         # a query's value: "bool" | "float" | "str" (None: an action)


def _return_kind(name: str, returns: Any) -> str | None:
    if returns is None:
        return None
    try:
        return RETURN_TYPES[returns]
    except (KeyError, TypeError):
        raise ValueError(f"skill {name!r}: returns must be bool, float or str, got {returns!r}") from None


def skill(name: str, estimate: Estimate | str | None = None,
          returns: type | str | None = None) -> Callable[[SkillFn], SkillFn]:
    """Mark a function (or a method of an executor subclass) as the implementation of skill ``name``.

    ``estimate(args) -> seconds`` feeds progress feedback; on a method it may name another method of the class.
    ``returns`` (bool, float or str) marks a query: the value the function returns is what the plan reads."""
    kind = _return_kind(name, returns)

    def mark(fn: SkillFn) -> SkillFn:
        setattr(fn, _MARK, (name, estimate, kind))
        return fn
    return mark


class SkillRegistry:
    """Skill name (as written in the plan, e.g. ``mf``) -> callable."""

    def __init__(self) -> None:
        self._skills: dict[str, SkillEntry] = {}

    def add(self, name: str, fn: SkillFn, estimate: Estimate | None = None,
            returns: type | str | None = None) -> None:
        if not name or not callable(fn):
            raise ValueError(f"skill {name!r}: needs a name and a callable")
        self._skills[name] = SkillEntry(name, fn, estimate, _return_kind(name, returns))

    def add_marked(self, source: object) -> int:
        """Add every ``@skill``-marked function of a module, class instance or mapping; returns how many."""
        items: Iterable[Any]
        if isinstance(source, Mapping):
            for name, fn in source.items():
                self.add(str(name), fn)
            return len(source)
        if isinstance(source, ModuleType):
            items = vars(source).values()
        else:
            items = (getattr(source, a) for a in dir(type(source)) if hasattr(getattr(type(source), a, None), _MARK))
        n = 0
        for fn in items:
            mark = getattr(fn, _MARK, None)
            if mark is not None and callable(fn):
                estimate = getattr(source, mark[1]) if isinstance(mark[1], str) else mark[1]
                self.add(mark[0], fn, estimate, mark[2])
                n += 1
        return n

    def get(self, name: str) -> SkillEntry | None:
        return self._skills.get(name)

    def names(self) -> list[str]:
        return sorted(self._skills)

    def returns(self) -> dict[str, str]:
        """Query skills and the kind of value each returns."""
        return {name: e.returns for name, e in self._skills.items() if e.returns is not None}

    def estimate(self, name: str, args: tuple) -> float:
        """Estimated seconds for one call; 0 when the skill gives no estimate (or it fails)."""
        entry = self._skills.get(name)
        if entry is None or entry.estimate is None:
            return 0.0
        try:
            value = float(entry.estimate(args))
        except Exception:  # an estimate must never break execution
            return 0.0
        return value if value > 0 and value != float("inf") else 0.0

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __len__(self) -> int:
        return len(self._skills)


class SkillContext:
    """What a running skill can see and do: cancellation, cancellable sleep, progress."""

    def __init__(self, request_id: str, index: int, name: str, args: tuple, stop: Callable[[], bool],
                 logger: Any = None, on_progress: Callable[[float], None] | None = None) -> None:
        self.request_id = request_id
        self.index = index
        self.name = name
        self.args = args
        self.logger = logger
        self._stop = stop
        self._on_progress = on_progress
        self._wake = threading.Event()

    @property
    def cancelled(self) -> bool:
        """True once the segment was cancelled, a more urgent plan preempted it (urgent_preempts) or the executor is
        shutting down: stop the robot and return."""
        return self._stop()

    def check(self) -> None:
        """Raise SkillCancelled when cancelled (call it between the steps of a long skill)."""
        if self._stop():
            raise SkillCancelled(f"{self.name} cancelled")

    def sleep(self, seconds: float, poll_s: float = 0.01) -> None:
        """Wait ``seconds`` (inf: until cancelled), raising SkillCancelled as soon as the segment is cancelled or
        preempted (``wake`` ends the wait at once)."""
        end = time.monotonic() + max(0.0, seconds)
        while True:
            self.check()
            left = end - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(min(left, poll_s))

    def progress(self, time_remaining_s: float) -> None:
        """Tell the planner how long this skill still needs (sent as feedback with the next progress report)."""
        if self._on_progress is not None:
            self._on_progress(max(0.0, float(time_remaining_s)))

    def wake(self) -> None:
        """Interrupt a sleep (a cancel or a preemption arrived)."""
        self._wake.set()
