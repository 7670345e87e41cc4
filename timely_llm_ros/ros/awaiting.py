"""How a coroutine on rclpy's executor waits for work another thread does, without a thread of its own.

rclpy (Kilted) resumes a coroutine task that awaits a pending ``rclpy.task.Future`` each time its executor wakes,
and a Future completed from another thread wakes nobody unless it has done callbacks. So whoever completes a
future from another thread also calls ``executor.wake()`` (a trigger of the executor's guard condition, safe from
any thread): the awaiting coroutine then resumes at the executor's next wait instead of its next unrelated wake-up.
"""
from __future__ import annotations

from concurrent.futures import Executor as ThreadPool
from typing import Any, Callable, TypeVar

from rclpy.executors import Executor
from rclpy.task import Future

T = TypeVar("T")


def waker(executor: Executor | None) -> Callable[[], None]:
    """A callable that wakes ``executor`` (nothing without one: a node not added to an executor yet)."""
    return executor.wake if executor is not None else (lambda: None)


async def on_pool(pool: ThreadPool, executor: Executor | None, fn: Callable[..., T], *args: Any,
                  failed: T) -> T:
    """fn(*args) run on ``pool``, awaited on ``executor``; ``failed`` if it raised or the pool was shut down."""
    done: Future = Future(executor=executor)
    wake = waker(executor)

    def settle(work) -> None:
        try:
            value = failed if work.cancelled() else work.result()
        except Exception:   # a failed discovery counts as not discovered; the caller says why
            value = failed
        done.set_result(value)
        wake()

    try:
        pool.submit(fn, *args).add_done_callback(settle)
    except RuntimeError:    # the pool was shut down meanwhile (cleanup)
        return failed
    return await done
