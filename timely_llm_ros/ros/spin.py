"""main() for a node: init, spin, clean shutdown on completion, SIGINT or SIGTERM (shared by every node).

rclpy's own signal handlers are not installed: they re-raise KeyboardInterrupt wherever the main thread
happens to be, and a second SIGINT (Ctrl-C in a terminal reaches the whole process group, and the
launcher forwards one more) then lands inside the shutdown code and prints a traceback. Here SIGINT and
SIGTERM only set a stop event; the main thread then

1. calls ``node.finish(timeout)`` if the node has it, WHILE the executor still spins (the server ends
   its accepted goals as SERVER_SHUTDOWN and lets their results go out),
2. stops the spin thread and joins it (waiting, with a line every 10 s, for a callback still running: a
   configure loading a model), then shuts the executor down (joining its worker threads),
3. calls ``node.shutdown()`` (entities rclpy does not destroy with the node), ``destroy_node()`` and
   shuts the context down.

Destroying entities while another thread still waits on them is what aborted processes with
"terminate called without an active exception"; here nothing is destroyed before the threads are joined.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
import traceback
from typing import Callable

import rclpy
from rclpy.exceptions import (InvalidHandle, InvalidParameterTypeException, InvalidParameterValueException,
                              ParameterException)
from rclpy.signals import SignalHandlerOptions
from rclpy._rclpy_pybind11 import RCLError   # what rclpy.init raises when rcl rejects the command line
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor

from timely_llm_ros.ros.process_signals import SignalLatch, enable_thread_dump, stop_with_parent

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SPIN_JOIN_S = 10.0             # how long a stop joins the spin thread before it says it waits for a callback
CALLBACK_WAIT_LIMIT_S = 300.0   # past this a stop gives up on a running callback and ends the process (exit 1)
GIL_SWITCH_INTERVAL_S = 0.001


def set_gil_switch_interval() -> float:
    """A thread that computes (the engine's step loop, a skill) keeps the GIL for Python's switch interval
    (5 ms) before a waiting callback thread gets it, and handing a segment on takes several hand-offs: nodes
    that relay time-critical messages switch every 1 ms instead (TIMELY_GIL_SWITCH_INTERVAL_S overrides)."""
    interval = float(os.environ.get("TIMELY_GIL_SWITCH_INTERVAL_S", GIL_SWITCH_INTERVAL_S))
    sys.setswitchinterval(interval)
    return interval


_SEE = " (`ros2 param describe <node> <name>` gives each parameter's type and range)"
BAD_PARAMETER_EXIT = 1   # as a node that cannot configure (server) or start (executors)
_TYPE_ERROR = re.compile(r"parameter '(?P<name>[^']+)' to '(?P<value>.*)' of type '(?P<given>\w+)', expecting type "
                         r"'(?P<expected>\w+)'", re.S)


def parameter_error_message(exc: ParameterException) -> str:
    """What to do about a parameter the node rejected at start-up (rclpy's exception says only what is wrong)."""
    text = str(exc)
    m = _TYPE_ERROR.search(text) if isinstance(exc, InvalidParameterTypeException) else None
    if m is not None:
        name, value, given, expected = m.group("name", "value", "given", "expected")
        if given == "INTEGER" and expected == "DOUBLE":
            fix = (f"write {value}.0, a ROS double needs the decimal point (-p {name}:={value}.0, or "
                   f"{name}: {value}.0 in a params file)")
        elif given == "BOOL" and expected == "STRING":
            fix = (f"quote the word: YAML and -p read on, off, yes, no, true and false as booleans (-p {name}:=\"'off'\", "
                   f"or {name}: 'off' in a params file)")
        else:
            fix = f"give {name} a {expected.lower().replace('_', ' ')} value"
        return f"parameter {name} is a {expected}, got the {given} {value!r}: {fix}{_SEE}"
    if isinstance(exc, InvalidParameterValueException):
        reason = text.split("Reason: ", 1)[-1]
        return f"parameter value rejected: {reason}{_SEE}"
    return f"parameter error: {text}"


_RCL_SOURCE = re.compile(r",? at /\S+:\d+")      # rcl's "at /project/src/rcl/arguments.c:352" trail
_ROS_ARGS_HINTS = (
    ("parameter override rule", "set a parameter as -p name:=value (':=', not '='; a list as -p name:=[1, 2])"),
    ("params file", "--params-file must name a readable ROS params file (node_name: {ros__parameters: {...}}; "
                    "/**/node_name matches the node in any namespace)"),
    ("remap rule", "remap as -r from:=to (e.g. -r __ns:=/drone_1)"),
    ("log level", "--log-level takes debug, info, warn, error or fatal"),
)


def ros_args_error_message(exc: Exception) -> str:
    """What to do about a command line rcl rejected (its own message names the argument, then C source lines)."""
    text = _RCL_SOURCE.sub("", str(exc).replace("failed to initialize rcl: ", "")).strip()
    hint = next((h for key, h in _ROS_ARGS_HINTS if key in text),
                "after --ros-args: -p name:=value, --params-file FILE, -r from:=to, --log-level LEVEL")
    return f"invalid ROS arguments: {text} -> {hint}"


class NodeStartError(Exception):
    """A node's constructor found a parameter it cannot start with (a file that does not exist or does not parse,
    an entry of the wrong form); the message says which and what to write. spin_node prints it, exit 1."""


class StopFlag:
    """Set by SIGINT/SIGTERM (or by the node itself); ``signal`` is the first signal, later ones change nothing.
    The handlers take no lock (ros/process_signals.py): a signal never hangs the node, whenever it comes."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self._latch = SignalLatch({sig: self._on_signal for sig in STOP_SIGNALS}, name="stop-signals")

    def install(self) -> None:
        self._latch.install()

    def restore(self, ignore: bool = False) -> None:
        self._latch.restore(ignore)

    def _on_signal(self, signum: int) -> None:     # on the latch's watcher thread, not in a handler
        if self.signal is None:
            self.signal = signum
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)


class Spinner:
    """Spins an executor on its own thread until stop(); stop() joins that thread."""

    def __init__(self, executor, context, name: str = "ros-spin") -> None:
        self._executor, self._context = executor, context
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.is_set() and self._context.ok():
            try:
                self._executor.spin_once(timeout_sec=0.05)
            except (ExternalShutdownException, InvalidHandle):
                if self._halt.is_set() or not self._context.ok():   # the context was shut down, or stop() was
                    break      # asked, while a callback ran: the loop is over, not a callback's error
                print("[spin] a callback raised:\n" + traceback.format_exc(), file=sys.stderr, flush=True)
            except Exception:  # a failing callback is reported; it must not stop the node from spinning
                print("[spin] a callback raised:\n" + traceback.format_exc(), file=sys.stderr, flush=True)

    def stop(self, timeout: float = 10.0) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait_for_callback(self, limit_s: float = CALLBACK_WAIT_LIMIT_S, every_s: float = 10.0) -> bool:
        """After stop(): wait for a callback that outlived its join (a configure still loading a model) to
        return, saying so every ``every_s``, for up to ``limit_s``. True when the spin thread has ended: only then
        may the executor and the node be destroyed, since a callback that goes on to create or use entities of a
        destroyed node crashes the process in rcl (SIGSEGV), not in Python."""
        waited = 0.0
        while self._thread.is_alive() and waited < limit_s:
            print(f"[spin] stopping: waiting for a callback that is still running (a model load, say) before the "
                  f"node is destroyed ({waited:.0f} s so far)", file=sys.stderr, flush=True)
            self._thread.join(every_s)
            waited += every_s
        return not self._thread.is_alive()


def start_node_process(args: list[str] | None, refused_prefix: str = "error") -> StopFlag | None:
    """What every node process does first (spin_node, run_executor): SIGINT/SIGTERM set the returned stop flag
    (handlers that take no lock), SIGUSR2 dumps the threads, the node stops if its starter dies, the GIL switch
    interval is set, and rclpy is initialised without its own signal handlers. Call ``restore(ignore=True)`` on
    the flag when the process is about to exit. None when rcl rejects the command line (a -p without ':=', a
    params file that does not exist or does not parse): one line saying what to write is printed, no traceback,
    and the caller exits with BAD_PARAMETER_EXIT."""
    stop = StopFlag()
    stop.install()
    enable_thread_dump()
    stop_with_parent()
    set_gil_switch_interval()
    try:
        rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    except RCLError as exc:
        print(f"{refused_prefix}: {ros_args_error_message(exc)}", file=sys.stderr, flush=True)
        stop.restore(ignore=True)
        return None
    return stop


def spin_node(make_node: Callable[[], object], num_threads: int = 2, args: list[str] | None = None,
              work: Callable[[object, StopFlag], int] | None = None,
              finish_timeout_s: float = 10.0, exit_code: Callable[[object], int] | None = None,
              make_executor: Callable[[], Executor] | None = None) -> int:
    """Create the node, spin it, and tear everything down in order (see the module docstring).

    ``work(node, stop)`` runs on the main thread while the node spins (a client's run); without it the
    node serves until SIGINT/SIGTERM or until ``node.stop`` (if it has one) is set. The node spins on
    ``make_executor()`` (an rclpy executor; default a MultiThreadedExecutor of ``num_threads``). Returns the exit code:
    ``work``'s result, else ``exit_code(node)`` if given, else 0 (a requested stop is a normal end). Meant as a
    process's main: SIGINT and SIGTERM stay ignored after it returns.
    """
    stop = start_node_process(args)
    if stop is None:
        return BAD_PARAMETER_EXIT
    context = rclpy.get_default_context()
    node = executor = spinner = None
    code = 0
    try:
        try:
            node = make_node()
        except ParameterException as exc:   # a user's -p / params-file mistake: say what to do, no traceback
            print(f"error: {parameter_error_message(exc)}", file=sys.stderr, flush=True)
            return BAD_PARAMETER_EXIT
        except NodeStartError as exc:
            print(f"error: cannot start: {exc}", file=sys.stderr, flush=True)
            return BAD_PARAMETER_EXIT
        if hasattr(node, "stop_flag"):
            node.stop_flag = stop
        executor = make_executor() if make_executor is not None else MultiThreadedExecutor(max(2, num_threads))
        executor.add_node(node)
        if hasattr(node, "before_spin") and not stop.is_set():
            node.before_spin()  # e.g. the server's autostart: entities are created before anything waits on them
        spinner = Spinner(executor, context)
        spinner.start()
        if work is not None:
            code = work(node, stop)
        else:
            while not stop.wait(0.2) and context.ok():
                pass
    finally:
        stop.set()
        if node is not None and hasattr(node, "finish") and spinner is not None:
            node.finish(finish_timeout_s)
        if spinner is not None:
            spinner.stop(SPIN_JOIN_S)
            if not spinner.wait_for_callback():   # destroying under a running callback crashes in rcl
                print(f"[spin] a callback still runs after {CALLBACK_WAIT_LIMIT_S:.0f} s: the process ends without "
                      "destroying the node", file=sys.stderr, flush=True)
                os._exit(1)
        if executor is not None:
            executor.shutdown(timeout_sec=finish_timeout_s)
        if node is not None:
            if hasattr(node, "shutdown"):
                node.shutdown()
            node.destroy_node()
        rclpy.try_shutdown()
        stop.restore(ignore=True)   # the process ends now: a late Ctrl-C must not turn exit 0 into -2
    if work is None and exit_code is not None and node is not None:
        code = exit_code(node)
    return code
