"""fleet_workload: drives a fleet of agents that send Plan goals and reports every outcome.

Closed loop (default): each agent sends its tasks one after another, the next when the
previous plan has been executed. Prints a table of every request at the end and exits
(exit code 1 if any request could not be sent or got no result).
"""
from __future__ import annotations

import csv
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
import yaml
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.action import ActionClient
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from timely_llm_ros.action import Plan

from ..core.errors import ErrorCode
from ..paths import config_dir
from .outcome_table import OutcomeRow, format_table



@dataclass
class AgentSpec:
    name: str
    robot_type: str
    tasks: list[dict] = field(default_factory=list)


def parse_agents(entries: list[str], tasks: dict, per_agent: int) -> list[AgentSpec]:
    """'drone_1:drone' entries -> agents, each given `per_agent` tasks of its robot type (round robin)."""
    agents = []
    for i, entry in enumerate(entries):
        name, _, robot_type = entry.partition(":")
        if not robot_type:
            raise ValueError(f"agent entry {entry!r} must look like 'drone_1:drone'")
        pool = tasks.get(robot_type) or []
        if not pool:
            raise ValueError(f"no tasks for robot type {robot_type!r} in the tasks file")
        chosen = [pool[(i + k) % len(pool)] for k in range(per_agent)]
        agents.append(AgentSpec(name, robot_type, chosen))
    return agents


class FleetWorkloadNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("fleet_workload", **kwargs)
        d = ParameterDescriptor
        self.agent_entries = list(self.declare_parameter(
            "agents", ["drone_1:drone"], d(description="agents as 'namespace:robot_type'")).value)
        self.per_agent = self.declare_parameter("requests_per_agent", 2, d(description="tasks each agent sends")).value
        tasks_file = self.declare_parameter(
            "tasks_file", "", d(description="YAML of tasks per robot type; empty = config/fleet_tasks.yaml")).value
        self.stagger_s = self.declare_parameter(
            "stagger_s", 0.3, d(description="delay between agents' first requests")).value
        self.server_timeout_s = self.declare_parameter(
            "server_timeout_s", 60.0, d(description="wait this long for the /plan server")).value
        self.results_csv = self.declare_parameter(
            "results_csv", "", d(description="also write the outcome table to this CSV file")).value
        path = Path(tasks_file) if tasks_file else config_dir() / "fleet_tasks.yaml"
        self.tasks = yaml.safe_load(path.read_text())
        self.agents = parse_agents(self.agent_entries, self.tasks, int(self.per_agent))
        self.client = ActionClient(self, Plan, "/plan")
        self.rows: list[OutcomeRow] = []
        self._rows_lock = threading.Lock()

    def run(self) -> int:
        log = self.get_logger()
        if not self.client.wait_for_server(timeout_sec=float(self.server_timeout_s)):
            log.error("no /plan action server; start timely_server first")
            return 1
        log.info(f"fleet of {len(self.agents)} agents, {sum(len(a.tasks) for a in self.agents)} requests")
        threads = []
        for i, agent in enumerate(self.agents):
            t = threading.Thread(target=self._agent_loop, args=(agent, i * float(self.stagger_s)), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        rows = sorted(self.rows, key=lambda r: r.sent_at)
        print(format_table(rows), flush=True)
        if self.results_csv:
            with open(self.results_csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(OutcomeRow.__dataclass_fields__))
                w.writeheader()
                for r in rows:
                    w.writerow(r.__dict__)
        return 0 if all(r.status != "no result" for r in rows) else 1

    def _agent_loop(self, agent: AgentSpec, delay: float) -> None:
        time.sleep(delay)
        for task in agent.tasks:
            self._send(agent, task)

    def _send(self, agent: AgentSpec, task: dict) -> None:
        log = self.get_logger()
        goal = Plan.Goal(agent_id=agent.name, robot_type=agent.robot_type, task=task["task"],
                         context=task.get("context", ""), urgency_class=task.get("urgency", "normal"))
        row = OutcomeRow(agent=agent.name, robot_type=agent.robot_type, task=task["task"],
                         urgency=goal.urgency_class, sent_at=time.monotonic())
        handle = _wait(self.client.send_goal_async(goal, feedback_callback=lambda fb: self._on_feedback(agent, fb)), 30)
        if handle is None or not handle.accepted:
            row.status = "no result"
            row.message = "goal not accepted by /plan"
        else:
            wrapped = _wait(handle.get_result_async(), 600)
            if wrapped is None:
                row.status, row.message = "no result", "timed out waiting for the result"
            else:
                res = wrapped.result
                row.fill(res, _code_name(res.error_code))
        with self._rows_lock:
            self.rows.append(row)
        log.info(f"{agent.name}: {row.status} '{row.task}' segments={row.segments} "
                 f"response={row.response_time:.2f}s waiting={row.waiting_time:.2f}s utility={row.utility:.2f}")

    def _on_feedback(self, agent: AgentSpec, msg) -> None:
        fb = msg.feedback
        if fb.new_segment:
            self.get_logger().info(f"{agent.name}: segment {fb.segment.index} -> robot: {fb.segment.text.strip()!r}")


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _wait(future, timeout: float):
    """Block until an rclpy future is done (the executor spins in another thread)."""
    end = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > end or not rclpy.ok():
            return None
        time.sleep(0.01)
    return future.result()


def main(args: list[str] | None = None) -> int:
    rclpy.init(args=args if args is not None else sys.argv)
    node = None
    code = 1
    try:
        node = FleetWorkloadNode()
        executor = MultiThreadedExecutor(num_threads=4)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        code = node.run()
        executor.shutdown()
    except (KeyboardInterrupt, ExternalShutdownException):
        code = 130
    finally:
        if node is not None:
            node.client.destroy()
            node.destroy_node()
        if rclpy.ok():
            rclpy.try_shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
