"""An rclpy executor whose worker threads end after a burst.

rclpy's MultiThreadedExecutor runs callbacks on a ``concurrent.futures.ThreadPoolExecutor``, which starts a thread
whenever no worker is free and never ends one. A blocking callback holds its thread: the server's goal callback
holds one for the goal's whole life, an executor node's segment callback for the segment's. After a burst of 200
goals the server kept ~160 idle threads (+10 MiB resident) until it exited.

``ElasticThreadPool`` starts threads the same way (up to ``max_workers``), and a worker that has waited
``idle_exit_s`` without work ends, down to ``keep`` workers, so memory returns to its baseline when the work ends.
``ElasticExecutor`` is an rclpy executor that takes its callbacks through the public ``wait_for_ready_callbacks``
and runs them on that pool; ``idle_exit_s <= 0`` keeps every thread (rclpy's stock behaviour).
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Executor as FuturesExecutor
from concurrent.futures import Future as FuturesFuture
from typing import Any, Callable

from rclpy.executors import (ConditionReachedException, Executor, ExternalShutdownException, ShutdownException,
                             TimeoutException)

IDLE_EXIT_S = 5.0   # a thread costs ~0.1 ms to start, so a worker idle this long is worth ending


class ElasticThreadPool(FuturesExecutor):
    """A thread pool that starts workers on demand (at most ``max_workers``) and ends those idle for
    ``idle_exit_s`` (keeping ``keep``); ``idle_exit_s <= 0`` never ends one."""

    def __init__(self, max_workers: int, keep: int = 2, idle_exit_s: float = IDLE_EXIT_S,
                 name: str = "worker") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers, self.keep, self.idle_exit_s, self._name = max_workers, max(keep, 0), idle_exit_s, name
        self._cond = threading.Condition()
        self._queue: deque[tuple[FuturesFuture, Callable[..., Any], tuple, dict]] = deque()
        self._workers: set[threading.Thread] = set()
        self._started: list[threading.Thread] = []   # workers alive or just ending, joined by shutdown
        self._waiting = 0          # workers waiting for work (each takes one queued item)
        self._closed = False
        self.threads_started = self.threads_ended = 0

    @property
    def threads(self) -> int:
        """Workers alive now."""
        with self._cond:
            return len(self._workers)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> FuturesFuture:
        future: FuturesFuture = FuturesFuture()
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.append((future, fn, args, kwargs))
            if self._waiting >= len(self._queue):
                self._cond.notify()
            elif len(self._workers) < self.max_workers:
                self._start_worker()
            # else: every worker is busy; the item waits for the next free one
        return future

    def _start_worker(self) -> None:
        self.threads_started += 1
        worker = threading.Thread(target=self._work, name=f"{self._name}-{self.threads_started}", daemon=True)
        self._workers.add(worker)
        self._started.append(worker)
        worker.start()

    def _next(self) -> tuple[FuturesFuture, Callable[..., Any], tuple, dict] | None:
        """The next item, or None when this worker should end (idle too long, or shut down with nothing left)."""
        me = threading.current_thread()
        with self._cond:
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
            self._started = [t for t in self._started if t is me or t.is_alive()]   # ended ones are not kept
            return None

    def _work(self) -> None:
        while (item := self._next()) is not None:
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

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new work; queued work still runs unless cancel_futures; wait joins every worker."""
        with self._cond:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()
            self._cond.notify_all()
            workers = list(self._started)
        if wait:
            for worker in workers:
                if worker is not threading.current_thread():
                    worker.join()


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
        still running that wakes the executor or creates a task raised, "exception was never retrieved"."""
        self.pool.shutdown(wait=wait_for_threads)
        return super().shutdown(timeout_sec)
