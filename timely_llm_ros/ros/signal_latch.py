"""Signal handlers that take no lock: each signal is handed to a watcher thread, which acts on it.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread is. If it is inside
``threading.Event.wait`` or ``Event.set`` of the very event the handler sets (the main loop of every node waits on
its stop event), or inside the handler of an earlier signal (a parent killed outright sends its parent-death
signal again each time one of its threads exits; Ctrl-C in a terminal plus the one a launcher forwards), the
handler's ``Event.set`` waits for a lock its
own thread holds, and the process hangs for good. Here the handler only writes the signal's number to a pipe;
a watcher thread reads it and calls the action, outside any handler. No rclpy: the bringup uses it too.
"""
from __future__ import annotations

import os
import signal
import threading
import traceback
from typing import Any, Callable, Mapping


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
