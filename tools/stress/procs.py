"""Child processes of the stress suite (server, executor hosts): start, readiness, output, timing lines, RSS."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from pathlib import Path

from timely_llm_ros.ros.process_signals import stopping_with_this_process
from timely_llm_ros.ros.process_memory import resident_mib

REPO = Path(__file__).resolve().parents[2]
_TIMING = re.compile(r"segment timing (\S+) (\d+) (published|sent|received|started|ended) ([0-9.]+)")
_REQUEST_ID = re.compile(r"\b([0-9a-f]{12})\b")   # the server's request id (12 hex digits of the goal id)
KEEP_REQUESTS = 20000                               # request ids whose lines are kept (the newest)


class RequestLines:
    """The last lines of a process's output that name each request id, for the newest `keep` ids: a rare failure
    can then be read from the one run that had it, without keeping the whole output of a 20,000-goal run."""

    def __init__(self, keep: int = KEEP_REQUESTS, per_request: int = 20) -> None:
        self.keep, self.per_request = keep, per_request
        self._lines: OrderedDict[str, deque[str]] = OrderedDict()

    def add(self, line: str) -> None:
        for req_id in dict.fromkeys(_REQUEST_ID.findall(line)):
            lines = self._lines.get(req_id)
            if lines is None:
                lines = self._lines[req_id] = deque(maxlen=self.per_request)
                if len(self._lines) > self.keep:
                    self._lines.popitem(last=False)
            lines.append(line.rstrip()[:400])

    def of(self, req_id: str) -> list[str]:
        return list(self._lines.get(req_id, ()))


class Child:
    """A node process; keeps the tail of its output and every 'segment timing' line (server and executors)."""

    def __init__(self, name: str, module: str, argv: list[str], ready: str, nice: int = 0) -> None:
        """nice: the process's niceness increment (0: as this process; higher: lower CPU priority)."""
        self.name = name
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        env.setdefault("ROS_LOG_DIR", str(REPO / "build" / "ros_log"))
        self.proc = subprocess.Popen([sys.executable, "-m", module, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=stopping_with_this_process(env),
                                     cwd=REPO,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)
        self.tail: deque[str] = deque(maxlen=200)
        self.tracebacks = 0
        self.exceptions: Counter = Counter()   # last line of each traceback, e.g. "ValueError: ..."
        self._in_traceback = False
        self.timing: dict[tuple[str, int], dict[str, float]] = {}
        self.requests = RequestLines()   # its lines by request id (the report shows an unexpected result's)
        self._marker = ready
        self._ready = threading.Event()
        self.ready_count = 0
        self.ready_needed = 1
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())
            if "Traceback (most recent call last)" in line:
                self.tracebacks += 1
                self._in_traceback = True
            elif self._in_traceback and line[:1] not in (" ", "\t") and not line.startswith("Traceback"):
                self._in_traceback = False
                self.exceptions[line.strip()[:160]] += 1
            elif self._in_traceback and re.match(r"\s+\w+(\.\w+)*(Error|Exception|Interrupt|Exit)\b", line):
                self._in_traceback = False  # node loggers indent the traceback: its exception line too
                self.exceptions[line.strip()[:160]] += 1
            self.requests.add(line)
            m = _TIMING.search(line)
            if m:
                self.timing.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = float(m.group(4))
            elif self._marker in line:
                self.ready_count += 1
                if self.ready_count >= self.ready_needed:
                    self._ready.set()

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"{self.name} did not become ready (exit {self.proc.poll()}):\n" +
                                   "\n".join(list(self.tail)[-30:]))

    def wait_for(self, text: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in list(self.tail)):
                return True
            time.sleep(0.05)
        return False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        """Resident set size (MiB) from /proc, with its child processes' (the server's engine process, with
        engine_process); nan when the process is gone."""
        own = resident_mib(self.proc.pid)
        children = [resident_mib(pid) for pid in _children(self.proc.pid)]
        return own + sum(r for r in children if r == r)     # a child gone meanwhile reads nan: left out

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._pump.join(5)

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGINT, then SIGKILL after grace_s; the exit code (negative: killed by a signal)."""
        if self.alive:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                self._pump.join(5)
                return None
        self._pump.join(5)
        return self.proc.returncode


def start_server(expected: list[str], extra: list[str]) -> Child:
    params = ["num_threads:=1", "max_batch:=8", "log_timing:=true", "executor_timeout_s:=2.0", "executor_discovery_timeout_s:=1.0",
              "state_period_s:=0.2", *extra]
    if expected:
        params.append(f"expected_agents:=[{','.join(expected)}]")
    argv = ["--ros-args", "-r", "__node:=timely_server"]
    for p in params:
        argv += ["-p", p]
    return Child("server", "timely_llm_ros.ros.server.node", argv, "timely_server ready")


def start_executors(name: str, agents: list[tuple[str, str]], *params: str) -> Child:
    argv = ["--agents", ",".join(f"{a}:{t}" for a, t in agents), "--ros-args", "-p", "log_timing:=true"]
    for p in params:
        argv += ["-p", p]
    child = Child(name, "timely_llm_ros.ros.executor.host", argv, "executor ready")
    child.ready_needed = len(agents)
    return child




def _children(pid: int) -> list[int]:
    """Direct child processes of pid (from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out
