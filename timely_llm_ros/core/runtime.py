"""SchedulerThread: runs a PlanScheduler on its own thread and serialises calls into it.

The ROS node's callbacks run on executor threads; they never touch the scheduler directly but
`post()` or `call()` functions into this thread's inbox. Between inbox items the thread runs
scheduler steps while there is work, and sleeps on the inbox when there is none (at most idle_poll_s: each
iteration also fails the segments whose robot did not accept or finish them in time, PlanScheduler.check_deadlines).

Interrupts: a request's submit waits in the inbox while an engine step runs. On an interruptible engine the
caller also `announce()`s it; the engine asks between its decoder layers (on this thread, so nothing else reads
the scheduler meanwhile) and the step ends early when the policy says the newcomer should not wait for it
(PlanScheduler.interrupts_step).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Callable, Iterable

from timely_llm_ros.core.engine import weak_method
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.scheduler import Event, PlanScheduler
from timely_llm_ros.core.step_trace import StepRecord

log = logging.getLogger(__name__)


class SchedulerThread:
    """Owns a PlanScheduler; every event it produces is handed to `on_events` on this thread."""

    def __init__(self, scheduler: PlanScheduler, on_events: Callable[[list[Event]], None],
                 on_idle: Callable[[], None] | None = None, idle_poll_s: float = 0.05,
                 trace: Callable[[StepRecord], None] | None = None) -> None:
        self.scheduler = scheduler
        self._on_events = on_events
        self._on_idle = on_idle
        self._trace = trace       # gets every engine step's record, with the loop iteration's wall time
        self._idle_poll_s = idle_poll_s
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timely-scheduler", daemon=True)
        # announced, not yet weighed against a step in flight; weighed at the next layer check, so only an idle engine
        # lets them pile up (requests refused at submit): past the bound the oldest are forgotten, which only means
        # they cut no step
        self._arrivals: deque[PlanRequest] = deque(maxlen=4096)
        engine = scheduler.engine
        self.interruptible = engine.capabilities.interruptible
        if self.interruptible:
            engine.interrupt_check = weak_method(self._arrival_interrupts)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def post(self, fn: Callable[[PlanScheduler], Iterable[Event] | None]) -> None:
        """Run fn(scheduler) on the scheduler thread; events it returns are dispatched."""
        self._inbox.put((fn, None))

    def announce(self, req: PlanRequest) -> None:
        """`req`'s submit was just posted: the engine step in flight may end early for it (thread-safe; a no-op on an
        engine that cannot be interrupted)."""
        if self.interruptible:
            self._arrivals.append(req)

    def _arrival_interrupts(self) -> bool:
        """The engine's interrupt_check (this thread, between decoder layers): does an announced request cut the
        step in flight short? Each announcement is weighed once, against the step running when it is first seen."""
        while self._arrivals:
            req = self._arrivals.popleft()
            if self.scheduler.interrupts_step(req, self.scheduler.clock()):
                return True
        return False

    def call(self, fn: Callable[[PlanScheduler], Any]) -> Future:
        """Like post, but returns a Future with fn's return value (events are not dispatched)."""
        fut: Future = Future()
        self._inbox.put((fn, fut))
        return fut

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            busy = self.scheduler.busy()
            began = self._drain_inbox(block=not busy)
            t_inbox = time.perf_counter()
            began = t_inbox if began is None else began
            if not busy:          # the wait for work is no part of the iteration's cost
                t0 = began
            if self._stop.is_set():
                break
            steps = self.scheduler.steps
            events_s = self._guard(self.scheduler.step) if self.scheduler.busy() else 0.0
            t_idle = time.perf_counter()
            self._guard(self.scheduler.check_deadlines)   # segments a robot did not accept or finish in time
            if self._on_idle is not None:
                self._guard(self._on_idle)
            record = self.scheduler.last_step
            if self._trace is not None and self.scheduler.steps != steps and record is not None:
                end = time.perf_counter()
                timed = replace(record, iteration_s=end - t0, inbox_s=t_inbox - began, events_s=events_s,
                                idle_s=end - t_idle)
                self._guard(lambda: self._trace(timed))

    def _drain_inbox(self, block: bool) -> float | None:
        """Run every posted item; returns when the first was taken (perf_counter), None if there was none."""
        try:
            item = self._inbox.get(timeout=self._idle_poll_s) if block else self._inbox.get_nowait()
        except queue.Empty:
            return None
        began = time.perf_counter()
        while item is not None:
            fn, fut = item
            if fut is None:
                self._guard(lambda: fn(self.scheduler))
            else:
                try:
                    fut.set_result(fn(self.scheduler))
                except BaseException as exc:  # handed to the caller
                    fut.set_exception(exc)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return began
        self._stop.set()
        return began

    def _guard(self, fn: Callable[[], Any]) -> float:
        """Run fn; dispatch returned events; a bug in one request must not stop the server. Returns the seconds
        the event handler took."""
        try:
            events = fn()
        except Exception:
            log.exception("scheduler thread: unexpected error (the server keeps serving)")
            return 0.0
        if not events:
            return 0.0
        t0 = time.perf_counter()
        try:
            self._on_events(list(events))
        except Exception:
            log.exception("scheduler thread: event handler failed")
        return time.perf_counter() - t0
