"""ros/process_signals.py SignalLatch: a signal never hangs a node, whatever its main thread holds when the signal comes.

Each case runs in a fresh interpreter with a time limit, because the failure being guarded against is a
process that waits for itself forever."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str, timeout: float = 20.0) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: {exc.stdout!r} {exc.stderr!r}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_stop_signal_while_the_main_thread_holds_the_stop_events_lock_does_not_hang():
    """The main loop of every node waits on its stop event, and Event.wait holds the event's lock for a few
    bytecodes each time round; a handler that calls Event.set there waits for its own thread. Here the signal
    lands while the lock is held for many bytecodes, so the old handler hangs every time."""
    out = _run("""
        import os, signal, threading
        from timely_llm_ros.ros.spin import StopFlag
        before = signal.getsignal(signal.SIGTERM)     # SIG_DFL, or SIG_IGN inherited from the test runner
        stop = StopFlag()
        stop.install()
        with stop.event._cond:                       # as inside Event.wait / Event.set
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100000):                  # bytecodes: the Python-level handler runs among them
                pass
        print("set", stop.wait(5), stop.signal == signal.SIGTERM)
        stop.restore()
        print("threads", threading.active_count(), signal.getsignal(signal.SIGTERM) is before)
    """)
    assert out.split() == ["set", "True", "True", "threads", "1", "True"]


def test_signals_in_a_burst_reach_their_actions_and_the_first_stop_signal_is_kept():
    out = _run("""
        import os, signal, threading
        from timely_llm_ros.ros.process_signals import SignalLatch
        from timely_llm_ros.ros.spin import StopFlag
        seen, done = [], threading.Event()
        def dump(signum):
            seen.append(signum)
            if len(seen) == 20:
                done.set()
        latch = SignalLatch({signal.SIGUSR2: dump})
        latch.install()
        for _ in range(20):
            os.kill(os.getpid(), signal.SIGUSR2)     # each is handled before the next is sent (same thread)
        print("dumps", done.wait(5), len(seen))
        latch.restore()
        stop = StopFlag()
        stop.install()
        os.kill(os.getpid(), signal.SIGINT)
        stop.wait(5)
        os.kill(os.getpid(), signal.SIGTERM)
        print("first", stop.signal == signal.SIGINT)
        stop.restore()
        print("threads", threading.active_count())
    """)
    assert out.split() == ["dumps", "True", "20", "first", "True", "threads", "1"]


def test_a_latch_outside_the_main_thread_installs_nothing():
    out = _run("""
        import signal, threading
        from timely_llm_ros.ros.process_signals import SignalLatch
        got, before = [], signal.getsignal(signal.SIGUSR2)
        t = threading.Thread(target=lambda: got.append(SignalLatch({signal.SIGUSR2: print}).install()))
        t.start(); t.join()
        print(got[0], signal.getsignal(signal.SIGUSR2) is before, threading.active_count())
    """)
    assert out.split() == ["False", "True", "1"]


def test_an_action_that_raises_does_not_end_the_watch():
    """A failing action (a thread dump that cannot write) is reported, and the next signal still works."""
    out = _run("""
        import os, signal, threading
        from timely_llm_ros.ros.process_signals import SignalLatch
        stopped = threading.Event()
        def broken(_):
            raise OSError("cannot write")
        latch = SignalLatch({signal.SIGUSR2: broken, signal.SIGTERM: lambda _: stopped.set()})
        latch.install()
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGTERM)
        print("stopped", stopped.wait(5))
        latch.restore()
    """)
    assert out.split() == ["stopped", "True"]


def test_restore_can_leave_the_signals_ignored_for_a_process_about_to_exit():
    out = _run("""
        import os, signal
        from timely_llm_ros.ros.process_signals import SignalLatch
        latch = SignalLatch({signal.SIGINT: print})
        latch.install()
        latch.restore(ignore=True)
        os.kill(os.getpid(), signal.SIGINT)           # Python's default handler would raise KeyboardInterrupt
        print("ignored", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    """)
    assert out.split() == ["ignored", "True"]
