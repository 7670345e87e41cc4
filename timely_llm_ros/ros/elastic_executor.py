"""An rclpy executor whose worker threads end after a burst.

rclpy's MultiThreadedExecutor runs callbacks on a ``concurrent.futures.ThreadPoolExecutor``, which starts a thread
whenever no worker is free and never ends one. A blocking callback holds its thread: the server's goal callback
holds one for the goal's whole life, an executor node's segment callback for the segment's. After a burst of 200
goals the server kept ~160 idle threads (+10 MiB resident) until it exited.

``ElasticThreadPool`` starts threads on demand too (up to ``max_workers``), and a worker that has waited
``idle_exit_s`` without work ends, down to ``keep`` workers, so the threads a burst needed do not stay.
A burst after a quiet spell then starts its threads anew, and ``Thread.start`` waits until the new thread runs
(0.5-0.8 ms on a busy 2-core box, a GIL hand-over): done by the thread that submits, as concurrent.futures does,
that wait slowed the server's goal intake 1.27x. Here a starter thread of the pool's own starts the workers, so
``submit`` never waits: 1.09x (benchmarks/goal_intake.py --compare-threads, bursts of 200 goals 7 s apart).
``ElasticExecutor`` is an rclpy executor that takes its callbacks through the public ``wait_for_ready_callbacks``
and runs them on that pool; ``idle_exit_s <= 0`` keeps every thread (rclpy's behaviour).
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from concurrent.futures import Executor as FuturesExecutor
from concurrent.futures import Future as FuturesFuture
from typing import Any, Callable

from rclpy.executors import (ConditionReachedException, Executor, ExternalShutdownException, ShutdownException,
                             TimeoutException)

from .process_signals import thread_stack

IDLE_EXIT_S = 5.0   # a thread costs ~0.1-0.8 ms to start, so a worker idle this long is worth ending

_Item = tuple[FuturesFuture, Callable[..., Any], tuple, dict]


class ElasticThreadPool(FuturesExecutor):
    """A thread pool that starts workers on demand (at most ``max_workers``, started by a starter thread so that
    ``submit`` never waits) and ends those idle for ``idle_exit_s`` (keeping ``keep``); ``idle_exit_s <= 0``
    never ends one."""

    def __init__(self, max_workers: int, keep: int = 2, idle_exit_s: float = IDLE_EXIT_S,
                 name: str = "worker") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers, self.keep, self.idle_exit_s, self._name = max_workers, max(keep, 0), idle_exit_s, name
        lock = threading.Lock()
        self._cond = threading.Condition(lock)         # workers wait here for work
        self._start_cond = threading.Condition(lock)   # the starter waits here for workers to start
        self._queue: deque[_Item] = deque()
        self._workers: set[threading.Thread] = set()   # made by the starter, not ended
        self._started: list[threading.Thread] = []     # the same, and those just ending: joined by shutdown
        self._waiting = 0        # workers waiting for work (each takes one queued item)
        self._to_make = 0        # workers submit asked for that the starter has not made yet
        self._arriving = 0       # workers asked for that have not yet come for work (to_make and starting ones)
        self._closed = False
        self.threads_started = self.threads_ended = 0
        self._starter = threading.Thread(target=self._start_workers, name=f"{name}-starter", daemon=True)
        self._starter.start()

    @property
    def threads(self) -> int:
        """Workers alive or starting now (the starter not counted)."""
        with self._cond:
            return len(self._workers) + self._to_make

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> FuturesFuture:
        future: FuturesFuture = FuturesFuture()
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.append((future, fn, args, kwargs))
            if self._waiting >= len(self._queue):
                self._cond.notify()
            elif (self._waiting + self._arriving < len(self._queue)
                  and len(self._workers) + self._to_make < self.max_workers):
                self._to_make += 1
                self._arriving += 1
                self._start_cond.notify()
            # else: a worker is on its way, or every worker is busy: the item waits for the next free one
        return future

    def _start_workers(self) -> None:
        """The starter thread: makes the workers submit asked for; ends at shutdown once it owes none."""
        with self._cond:
            while True:
                while not self._to_make and not self._closed:
                    self._start_cond.wait()
                if not self._to_make:
                    return
                self._to_make -= 1
                self.threads_started += 1
                worker = threading.Thread(target=self._work, name=f"{self._name}-{self.threads_started}",
                                          daemon=True)
                self._workers.add(worker)
                self._started.append(worker)
                self._cond.release()    # Thread.start waits for the new thread to run: not under the lock
                try:
                    worker.start()
                finally:
                    self._cond.acquire()

    def _next(self, arriving: bool) -> _Item | None:
        """The next item, or None when this worker should end (idle too long, or shut down with nothing left)."""
        me = threading.current_thread()
        with self._cond:
            if arriving:
                self._arriving -= 1
            while not self._queue:
                if self._closed:
                    break
                self._waiting += 1
                woken = self._cond.wait(self.idle_exit_s if self.idle_exit_s > 0 else None)
                self._waiting -= 1
                if not woken and not self._queue and len(self._workers) > self.keep:
                    break
            if self._queue:
                return self._queue.popleft()
            self._workers.discard(me)
            self.threads_ended += 1
            # ended workers are not kept (the starting ones and those still finishing are, for shutdown to join)
            self._started = [t for t in self._started if t is me or t in self._workers or t.is_alive()]
            return None

    def _work(self) -> None:
        arriving = True
        while (item := self._next(arriving)) is not None:
            arriving = False
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to whoever holds the future, as concurrent.futures does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                    del result
            # no frame keeps the callback, its arguments or its result (tensors) alive between items
            del future, fn, args, kwargs

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None) -> bool:
        """No new work; queued work still runs unless cancel_futures. wait: join the starter and every worker, for
        at most ``timeout`` seconds in all (None: as long as they take). Returns False when a worker was still
        running at the end (``running_workers`` names them); the workers are daemon threads, so a callback that
        never returns cannot keep the process from exiting."""
        with self._cond:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()
            self._cond.notify_all()
            self._start_cond.notify_all()
        if not wait:
            return True
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)

        def left() -> float | None:
            return None if deadline is None else max(deadline - time.monotonic(), 0.0)

        if self._starter is not threading.current_thread():
            self._starter.join(left())     # it makes the workers it owes first: queued work still gets one
        with self._cond:
            workers = list(self._started)
        for worker in workers:
            if worker is not threading.current_thread() and worker.ident is not None:
                worker.join(left())
        return not self.running_workers()

    def running_workers(self) -> list[threading.Thread]:
        """Workers (and the starter) still alive, other than the calling thread."""
        with self._cond:
            threads = [self._starter, *self._started]
        return [t for t in threads if t.is_alive() and t is not threading.current_thread()]


class ElasticExecutor(Executor):
    """An rclpy executor that runs ready callbacks on an ElasticThreadPool (a MultiThreadedExecutor whose idle
    threads end after ``idle_exit_s``)."""

    def __init__(self, num_threads: int, *, keep: int = 2, idle_exit_s: float = IDLE_EXIT_S,
                 context: Any = None) -> None:
        super().__init__(context=context)
        self.pool = ElasticThreadPool(max(num_threads, 1), keep=keep, idle_exit_s=idle_exit_s, name="rclpy")
        self._tasks_running: list[Any] = []

    def _spin_once_impl(self, timeout_sec: float | None, condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(timeout_sec, None, condition)
        except (ShutdownException, ExternalShutdownException, TimeoutException, ConditionReachedException):
            return
        self.pool.submit(handler)
        self._tasks_running.append(handler)
        done = [task for task in self._tasks_running if task.done()]
        if done:
            self._tasks_running = [task for task in self._tasks_running if not task.done()]
            for task in done:
                task.result()   # a callback's exception surfaces here, as in rclpy's executors

    def spin_once(self, timeout_sec: float | None = None) -> None:
        self._spin_once_impl(timeout_sec)

    def spin_once_until_future_complete(self, future: Any, timeout_sec: float | None = None) -> None:
        future.add_done_callback(lambda _f: self.wake())
        self._spin_once_impl(timeout_sec, future.done)

    def shutdown(self, timeout_sec: float | None = None, *, wait_for_threads: bool = True) -> bool:
        """Callbacks already handed to the pool finish first (their threads joined with wait_for_threads), then
        rclpy's shutdown destroys the executor's guard condition. rclpy's own order (Kilted) destroys it first:
        its wait for work in progress is skipped (it tests the shutdown flag right after setting it), so a callback
        still running that wakes the executor or creates a task raised, "exception was never retrieved".

        A callback still running after timeout_sec is reported on stderr with its stack, and the shutdown goes on
        (returns False): a node must exit on Ctrl-C even when a callback hangs."""
        drained = self.pool.shutdown(wait=wait_for_threads, timeout=timeout_sec)
        if not drained:
            report_stuck(self.pool.running_workers(), timeout_sec)
        return super().shutdown(timeout_sec) and drained


def report_stuck(threads: list[threading.Thread], waited_s: float | None) -> None:
    """Print where each thread is (its Python stack) to stderr: callbacks that did not end at shutdown."""
    lines = [f"[executor] {len(threads)} callback thread(s) still running {waited_s} s after shutdown began; "
             "exiting without them:"]
    for thread in threads:
        lines.append(f"  thread {thread.name}:")
        lines += ["    " + ln for ln in thread_stack(thread)] or ["    (no stack)"]
    print("\n".join(lines), file=sys.stderr, flush=True)
