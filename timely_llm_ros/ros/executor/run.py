"""main() for executor nodes: spin until SIGINT/SIGTERM, let open segments report their end, exit 0."""
from __future__ import annotations

import sys
import time
from typing import Callable, Sequence, Union

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import MultiThreadedExecutor

from timely_llm_ros.ros.spin import BAD_PARAMETER_EXIT, parameter_error_message, start_node_process
from timely_llm_ros.ros.executor.base import SkillExecutorNode

Nodes = Union[SkillExecutorNode, Sequence[SkillExecutorNode]]


def run_executor(make_nodes: Callable[[], Nodes], args: list[str] | None = None, num_threads: int = 6) -> int:
    """Run one executor node (or several, e.g. one per robot namespace) until SIGINT/SIGTERM.

    Returns 0 on a signal (no traceback, threads joined), 1 when the node cannot start (bad parameters). Meant as
    a process's main: SIGINT and SIGTERM stay ignored after it returns."""
    # our own handlers (not rclpy's): on a signal the nodes still have to send the results of open segments
    stop = start_node_process(args, refused_prefix="executor: cannot start")
    if stop is None:
        return BAD_PARAMETER_EXIT
    nodes: list[SkillExecutorNode] = []
    executor = None
    try:
        try:
            made = make_nodes()
            nodes = [made] if isinstance(made, SkillExecutorNode) else list(made)
            for node in nodes:
                node.check_skills()
        except ParameterException as exc:   # a -p of the wrong type or out of its range
            print(f"executor: cannot start: {parameter_error_message(exc)}", file=sys.stderr)
            return BAD_PARAMETER_EXIT
        except (ValueError, FileNotFoundError, KeyError) as exc:  # bad parameters: say why, no traceback
            print(f"executor: cannot start: {exc}", file=sys.stderr)
            return BAD_PARAMETER_EXIT
        # a running segment holds a thread (a robot runs one at a time); the pool starts threads as segments need them
        executor = MultiThreadedExecutor(num_threads + 2 * (len(nodes) - 1))
        for node in nodes:
            executor.add_node(node)
            node.publish_status()
            node.get_logger().info(node.ready_message())
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
        for node in nodes:
            node.begin_shutdown()
        deadline = time.monotonic() + max(n.shutdown_grace_s for n in nodes)
        while not all(n.idle() for n in nodes) and time.monotonic() < deadline and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
        end = time.monotonic() + 0.2  # let the last results leave
        while time.monotonic() < end and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
        return 0
    finally:
        if executor is not None:
            executor.shutdown(timeout_sec=5.0)
        for node in nodes:
            node.shutdown()
            node.destroy_node()
        rclpy.try_shutdown()
        stop.restore(ignore=True)   # the process ends now: a late Ctrl-C must not turn exit 0 into -2
