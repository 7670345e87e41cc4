"""How a node process meets signals and its starter's death; no rclpy, so timely_bringup uses it too.

- ``SignalLatch``: signal handlers that take no lock. A Python signal handler runs in the main thread between two
  bytecodes, wherever that thread is. If it is inside ``threading.Event.wait`` or ``Event.set`` of the very event
  the handler sets (the main loop of every node waits on its stop event), or inside the handler of an earlier
  signal (a parent killed outright sends its parent-death signal again each time one of its threads exits; Ctrl-C
  in a terminal plus the one a launcher forwards), the handler's ``Event.set`` waits for a lock its own thread
  holds, and the process hangs for good. Here the handler only writes the signal's number to a pipe; a watcher
  thread reads it and calls the action, outside any handler.
- ``enable_thread_dump``: ``kill -USR2 <pid>`` prints every thread's stack.
- ``stopping_with_this_process`` (the starter's side) and ``stop_with_parent`` (the node's side): a node stops
  when the process that started it dies without stopping it.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Mapping

THREAD_DUMP_SIGNAL = signal.SIGUSR2
STOP_WITH_PID_ENV = "TIMELY_STOP_WITH_PID"   # the starter's pid: its nodes stop if it dies


class SignalLatch:
    """Route signals to actions run on a watcher thread. install() from the main thread (elsewhere it does
    nothing and returns False); restore() puts the previous handlers back and joins the watcher."""

    def __init__(self, actions: Mapping[int, Callable[[int], None]], name: str = "signal-watcher") -> None:
        self._actions = dict(actions)
        self._name = name
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread() or self._pipe is not None:
            return False
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)    # a full pipe drops a signal instead of blocking the handler
        self._pipe = (read_fd, write_fd)
        self._watcher = threading.Thread(target=self._watch, args=(read_fd,), name=self._name, daemon=True)
        self._watcher.start()
        for sig in self._actions:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return True

    def restore(self, ignore: bool = False) -> None:
        """Stop watching. ignore=True leaves the signals ignored instead of putting the old handlers back: for a
        process that is about to exit, where Python's default handler would turn a late Ctrl-C into a
        KeyboardInterrupt traceback or an exit by the signal (-2) after a clean shutdown."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if ignore else handler)
        self._previous.clear()
        if self._pipe is not None:
            os.close(self._pipe[1])         # the watcher reads end-of-file and ends
            if self._watcher is not None:
                self._watcher.join()
            os.close(self._pipe[0])
        self._pipe = self._watcher = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        pipe = self._pipe
        if pipe is not None:
            try:
                os.write(pipe[1], bytes([int(signum)]))
            except OSError:                 # full (thousands pending) or closed by restore(): nothing to add
                pass

    def _watch(self, read_fd: int) -> None:
        while True:
            data = os.read(read_fd, 64)
            if not data:
                return
            for signum in data:
                action = self._actions.get(signum)
                if action is None:
                    continue
                try:
                    action(signum)
                except Exception:           # keep watching: a later signal (Ctrl-C) must still work
                    traceback.print_exc()


def enable_thread_dump() -> None:
    """`kill -USR2 <pid>` prints every thread's Python stack to stderr and the node carries on (faulthandler):
    where a node that does not exit, or does not answer, is waiting. Tests send it to a process that outlives
    its time."""
    faulthandler.register(THREAD_DUMP_SIGNAL, all_threads=True, chain=False)


def stopping_with_this_process(env: dict[str, str]) -> dict[str, str]:
    """The environment for a node this process starts, such that the node stops (SIGTERM, as on Ctrl-C) if this
    process dies without stopping it (stop_with_parent). Only from the main thread: the kernel's parent-death
    signal follows the thread that started the child, and another thread may end before the node."""
    if threading.current_thread() is not threading.main_thread():
        return env
    return {**env, STOP_WITH_PID_ENV: str(os.getpid())}


def stop_with_parent() -> bool:
    """A node whose starter names its own pid in TIMELY_STOP_WITH_PID (timely_bringup, the test harness, make
    stress, the benchmarks: stopping_with_this_process) is sent SIGTERM, and so stops as on Ctrl-C, when that
    starter dies without stopping it (kill -9, a crash): no orphaned node keeps the model in memory and its robots
    on the ROS graph. Call it after the SIGTERM handler is installed. The variable is removed, so the node's own
    children do not inherit it. Linux only (prctl PR_SET_PDEATHSIG); returns whether it is armed."""
    pid = os.environ.pop(STOP_WITH_PID_ENV, "")
    if not pid.isdigit() or not sys.platform.startswith("linux"):
        return False
    import ctypes

    pr_set_pdeathsig = 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != int(pid):    # the starter died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return True
