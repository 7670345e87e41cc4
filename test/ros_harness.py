"""Helpers for tests that run real nodes as separate processes and talk to them over DDS on loopback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor

from timely_llm_ros.action import ExecuteSegment, Plan
from timely_llm_ros.ros.action_client import ActionClient, deep_queues
from timely_llm_ros.ros.process_signals import stopping_with_this_process
from waiting import poll_until, wait_until  # noqa: F401  (re-exported for the ROS tests)

REPO = Path(__file__).resolve().parent.parent
def ros_env() -> dict[str, str]:
    """Environment for child nodes: loopback discovery, this session's domain id, logs in build/."""
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_LOG_DIR", str(REPO / "build" / "ros_log"))
    env["PYTHONUNBUFFERED"] = "1"
    return stopping_with_this_process(env)   # a killed test run leaves no node behind


class NodeProcess:
    """A node started as its own process; its output is collected for assertions and failure messages."""

    def __init__(self, module: str, ros_args: list[str], ready: str, group: int | None = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        """module: a module to run with -m, or a script's path (``*.py``, or any path with a folder in it); group:
        None = the test's process group; 0 = lead a new group; a pid = join that group; env: the child's
        environment (default ros_env()); cwd: its working folder (default the checkout)."""
        run = [module] if module.endswith(".py") or os.sep in module else ["-m", module]
        cmd = [sys.executable, *run, "--ros-args", *ros_args]
        setpgid = None if group is None else (lambda: os.setpgid(0, group))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=ros_env() if env is None else env, cwd=REPO if cwd is None else cwd,
                                     preexec_fn=setpgid)
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._marker = ready
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if self._marker in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 90.0) -> None:
        end = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                why = f"exited with {self.proc.returncode}" if self.proc.returncode is not None else \
                    f"did not become ready in {timeout} s"
                raise RuntimeError(f"node {why}:\n" + "\n".join(self.lines[-40:]))

    def wait_for(self, text: str, timeout: float) -> None:
        """Block until the node has printed a line containing text."""
        printed = poll_until(lambda: any(text in line for line in list(self.lines)) or self.proc.poll() is not None,
                             timeout, 0.05)
        if not printed or not any(text in line for line in list(self.lines)):
            raise RuntimeError(f"node never printed {text!r}:\n" + "\n".join(self.lines[-40:]))

    def drained(self, timeout: float = 10.0) -> str:
        """The whole output of a node that has exited, once the reader has taken its last line."""
        assert self.proc.poll() is not None, "drained() is for a node that has exited"
        self._reader.join(timeout)
        assert not self._reader.is_alive(), f"the node's output was still open {timeout} s after it exited"
        return self.output()

    def output(self) -> str:
        return "\n".join(self.lines)

    def thread_dump(self) -> str:
        """Every thread's stack of a node still running (SIGUSR2, ros/process_signals.enable_thread_dump), for a failure
        message: where a node that does not exit is waiting."""
        if self.proc.poll() is not None:
            return f"(exited {self.proc.returncode})"
        mark = len(self.lines)
        self.proc.send_signal(signal.SIGUSR2)
        # faulthandler heads each thread's stack with "(most recent call first)"; the dump ends without a marker,
        # so once the first header is in, wait until the output has been quiet for 0.3 s
        poll_until(lambda: any("most recent call first" in line for line in self.lines[mark:]), 5.0, 0.05)
        seen = -1
        while seen != len(self.lines):
            seen = len(self.lines)
            time.sleep(0.3)
        return "\n".join(self.lines[mark:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_server(*params: str, ready: str = "timely_server ready", group: int | None = None,
                 ready_timeout: float = 90.0) -> NodeProcess:
    """The real server; TIMELY_TEST_MODEL_PATH runs the suite against another local model directory, and
    TIMELY_TEST_SERVER_PARAMS (space-separated name:=value) with other server parameters (e.g. engine_process:=true)."""
    args = ["-r", "__node:=timely_server", "-p", "num_threads:=1"]  # steadier than 2 on a shared 2-core box
    if os.environ.get("TIMELY_TEST_MODEL_PATH"):
        args += ["-p", f"model_path:={os.environ['TIMELY_TEST_MODEL_PATH']}"]
    for extra in os.environ.get("TIMELY_TEST_SERVER_PARAMS", "").split():
        args += ["-p", extra]
    for p in params:
        args += ["-p", p]
    node = NodeProcess("timely_llm_ros.ros.server.node", args, ready, group)
    node.wait_ready(ready_timeout)
    return node


def start_executor(agent: str, robot_type: str, time_scale: float, group: int | None = None,
                   params: tuple[str, ...] = ()) -> NodeProcess:
    node = NodeProcess("timely_llm_ros.ros.executor.node",
                       ["-r", f"__ns:=/{agent}", "-r", "__node:=executor", "-p", f"robot_type:={robot_type}",
                        "-p", f"time_scale:={time_scale}", *[a for p in params for a in ("-p", p)]],
                       "executor ready", group)
    node.wait_ready()
    return node


class Spun:
    """A node spun by its own executor on a daemon thread, in a context of its own."""

    def __init__(self, make, executor_type) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = make(self.context)
        self.executor = executor_type(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)

    def start(self) -> "Spun":
        self.thread.start()
        return self

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


class SpinningActionClient:
    """An in-process rclpy action client with its own Context, spun by a daemon thread until close()."""

    def __init__(self, node_name: str, action_type, action_name: str, **client_options) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(node_name, context=self.context)
        # goals are sent from the test's thread (our ActionClient makes that safe)
        self.client = ActionClient(self.node, action_type, action_name,
                                   callback_group=MutuallyExclusiveCallbackGroup(), **client_options)
        self.add_entities()
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spin = threading.Thread(target=self.executor.spin, daemon=True)
        self._spin.start()

    def add_entities(self) -> None:
        """Subclasses create further subscriptions here, before spinning starts."""

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self._spin.join(5.0)
        self.client.destroy()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


class PlanClient(SpinningActionClient):
    """An in-process rclpy client (own Context) for the /plan action."""

    def __init__(self) -> None:
        # a burst's responses, and a loaded client's feedback of many goals, must not be dropped on this side either
        super().__init__("test_plan_client", Plan, "/plan", **deep_queues())
        assert self.client.wait_until_answering(timeout_sec=30.0), "no /plan server"

    def send(self, **fields) -> "GoalRun":
        run = self.send_async(**fields)
        run.accepted(30.0)
        return run

    def send_async(self, **fields) -> "GoalRun":
        """Send without waiting for the goal response (bursts); GoalRun.accepted() waits for it."""
        run = GoalRun(self.client)
        run.handle_future = self.client.send_goal_async(Plan.Goal(**fields),
                                                        feedback_callback=lambda m: run.feedback.append(m.feedback))
        return run


class GoalRun:
    """A goal in flight: its feedback as it arrives, and its result."""

    def __init__(self, client: ActionClient) -> None:
        self.client = client
        self.feedback: list = []
        self.handle = None
        self.handle_future = None
        self.result_future = None

    def accepted(self, timeout: float) -> None:
        self.handle = wait(self.handle_future, timeout)
        assert self.handle is not None and self.handle.accepted, "goal was not accepted"
        self.result_future = self.client.result_async(self.handle)

    def result(self, timeout: float = 120.0):
        wrapped = wait(self.result_future, timeout)
        assert wrapped is not None, f"no result within {timeout} s"
        return wrapped.status, wrapped.result

    def cancel(self) -> None:
        wait(self.handle.cancel_goal_async(), 10.0)

    def wait_for(self, predicate, timeout: float = 60.0) -> bool:
        """Whether a feedback message satisfying predicate arrives within timeout."""
        return poll_until(lambda: any(predicate(fb) for fb in list(self.feedback)), timeout)


def feedback_then_success(feedbacks: int, execution_time: float):
    """An ExecuteSegment execute callback: every goal publishes ``feedbacks`` feedback messages, then succeeds at
    once reporting ``execution_time``."""
    def execute(handle):
        for i in range(feedbacks):
            handle.publish_feedback(ExecuteSegment.Feedback(skills_done=i, skills_total=feedbacks))
        handle.succeed()
        return ExecuteSegment.Result(success=True, execution_time=execution_time)
    return execute


def runs_on_robot(output: str, request_id: str | None = None) -> list[tuple[tuple[str, int], float, float]]:
    """The segments an executor started (log_timing lines), in start order: ((request, index), start, end)."""
    import re

    started, ended = {}, {}
    for req, index, event, t in re.findall(r"segment timing (\S+) (\d+) (started|ended) ([\d.]+)", output):
        (started if event == "started" else ended)[(req, int(index))] = float(t)
    return sorted(((key, t, ended.get(key, float("inf"))) for key, t in started.items()
                   if request_id is None or key[0] == request_id), key=lambda run: run[1])


def wait(future, timeout: float):
    """The future's result, or None if it is not done within timeout."""
    return future.result() if poll_until(future.done, timeout, 0.005) else None


@contextmanager
def plan_client() -> Iterator[PlanClient]:
    client = PlanClient()
    try:
        yield client
    finally:
        client.close()
