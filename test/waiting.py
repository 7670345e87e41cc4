"""Waiting for a condition with a deadline, for tests: ROS state arriving, a process ending, a file appearing.
Tests wait on the condition itself rather than sleeping for a guessed time; no ROS needed."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll_until(predicate: Callable[[], T], timeout: float, poll_s: float = 0.01) -> T:
    """Call predicate until it returns something truthy and return that; at the deadline return its last value
    (falsy). For callers that report the timeout themselves; wait_until fails the test instead."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(poll_s)


def wait_until(predicate: Callable[[], T], timeout: float, message: str | Callable[[], str],
               poll_s: float = 0.01) -> T:
    """Wait for a condition (ROS state arriving, a process ending) with a deadline: return predicate's first
    truthy value, or fail the test with message (a callable is evaluated only then, e.g. a node's output)."""
    value = poll_until(predicate, timeout, poll_s)
    if not value:
        raise AssertionError(f"after {timeout} s: " + (message() if callable(message) else message))
    return value
