"""The processes of a fleet: each node's command line, and a running node whose output the bringup echoes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from timely_llm_ros.ros.fleet.description import EXECUTOR_NAME, SERVER_NAME, WORKLOAD_NAME, FleetConfig

NODE_MODULES = {
    "server": "timely_llm_ros.ros.server.node",
    "executor": "timely_llm_ros.ros.executor.node",
    "workload": "timely_llm_ros.ros.fleet.workload_node",
}
READY_PATTERN = re.compile(r"(?<!not )\bready\b", re.IGNORECASE)  # a node's "I am ready" log line


@dataclass
class ChildSpec:
    """A process to start: display name, argv, and what readiness to wait for before going on."""

    name: str
    role: str                      # server | executor | workload
    argv: list[str]
    ready_timeout_s: float = 0.0   # 0 = do not wait
    action_type: str = ""          # readiness also by an action server of this type on the node (rclpy graph)
    node_name: str = ""
    namespace: str = "/"
    lifecycle: bool = False        # a managed node the bringup configures and activates
    pass_fds: tuple[int, ...] = () # file descriptors the process inherits (an in-memory params file)


def build_children(
    config: FleetConfig,
    params_file: str | Path,
    log_level: str = "info",
    with_workload: bool = True,
    pass_fds: tuple[int, ...] = (),
) -> list[ChildSpec]:
    """The processes to start, in start order (server, executors, workload).

    Each role runs its node as ``<python> -m <module>`` (NODE_MODULES);
    ``pass_fds``: descriptors every child inherits (those ``params_file`` needs, see merged_params_file).
    """
    entry = {role: [sys.executable, "-m", module] for role, module in NODE_MODULES.items()}
    tail = ["--params-file", str(params_file), "--log-level", log_level]
    children: list[ChildSpec] = []
    if config.server:
        children.append(ChildSpec(
            SERVER_NAME, "server",
            [*entry["server"], "--ros-args", "-r", f"__node:={SERVER_NAME}", *tail, "-p", "autostart:=false"],
            ready_timeout_s=config.server_ready_timeout_s, action_type="timely_llm_ros/action/Plan",
            node_name=SERVER_NAME, lifecycle=True,
        ))
    for ex in config.executors:
        children.append(ChildSpec(
            f"{ex.agent}/{EXECUTOR_NAME}", "executor",
            [*entry["executor"], "--ros-args", "-r", f"__ns:=/{ex.agent}", "-r", f"__node:={EXECUTOR_NAME}",
             *tail, "-p", f"robot_type:={ex.robot_type}"],
            ready_timeout_s=config.executor_ready_timeout_s,
            action_type="timely_llm_ros/action/ExecuteSegment", node_name=EXECUTOR_NAME, namespace=f"/{ex.agent}",
        ))
    if config.workload and with_workload:
        children.append(ChildSpec(
            WORKLOAD_NAME, "workload",
            [*entry["workload"], "--ros-args", "-r", f"__node:={WORKLOAD_NAME}", *tail],
        ))
    for child in children:
        child.pass_fds = tuple(pass_fds)
    return children


class RunningChild:
    """A started child process whose merged output is echoed with a ``[name]`` prefix."""

    def __init__(self, spec: ChildSpec, env: dict[str, str], out: TextIO, out_lock: threading.Lock,
                 driven: bool = False) -> None:
        self.spec = spec
        self.ready = threading.Event()
        self.driven = driven                  # a lifecycle driver decides readiness, not the ready line
        self.failure: str | None = None       # why a lifecycle transition failed
        self.activated = False                # configured and activated by the bringup
        self.proc = subprocess.Popen(
            spec.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, text=True, errors="replace", bufsize=1, start_new_session=True, pass_fds=spec.pass_fds,
        )
        self._reader = threading.Thread(target=self._pump, args=(out, out_lock), daemon=True)
        self._reader.start()

    def _pump(self, out: TextIO, out_lock: threading.Lock) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if READY_PATTERN.search(line) and not self.driven:
                self.ready.set()
            with out_lock:
                out.write(f"[{self.spec.name}] {line.rstrip(chr(10))}\n")
                out.flush()

    def signal(self, sig: int) -> None:
        """Send a signal to the child's process group (ignored when already gone)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def join_output(self, timeout: float = 2.0) -> None:
        """Wait for the child's last output lines to be echoed."""
        self._reader.join(timeout)
