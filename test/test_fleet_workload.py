"""fleet_workload waits for the server's first contact with its robots' executors before its first goal, and exits
non-zero, saying why, when it executed no plan."""
from __future__ import annotations

import re
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from ros_harness import NodeProcess, start_executor, start_server  # noqa: E402

from timely_llm_ros.ros.fleet.workload_node import executors_unmet  # noqa: E402


def test_unmet_executors_are_the_driven_robots_the_server_still_lists():
    assert executors_unmet({"drone_1", "arm_1"}, None) is None           # no server state yet
    assert executors_unmet({"drone_1", "arm_1"}, []) == []
    assert executors_unmet({"drone_1", "arm_1"}, ["/arm_1", "drone_9", "drone_1"]) == ["arm_1", "drone_1"]
    assert executors_unmet({"drone_1"}, ["drone_2"]) == []                 # another fleet's robot: not ours


def test_first_goals_wait_until_the_server_has_met_their_executors():
    """make demo once dropped an urgent first goal that had waited 0.93 s for the server's handshake with its
    robot's executor. Here drone_2's executor starts only once the workload has said it waits for it, so a
    workload that sent at once would never print that line and its drone_2 goal would wait in the server."""
    nodes = []
    try:
        nodes.append(start_server("expected_agents:=[drone_1,drone_2]", "executor_discovery_timeout_s:=30.0"))
        nodes.append(start_executor("drone_1", "drone", 0.05))
        workload = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                               ["-r", "__node:=fleet_workload", "-p", "agents:=['drone_1:drone','drone_2:drone']",
                                "-p", "requests_per_agent:=1", "-p", "stagger_s:=0.0"], "no ready line")
        nodes.append(workload)
        workload.wait_for("waiting for the server to meet the executors of drone_2", 60.0)
        time.sleep(1.0)
        nodes.append(start_executor("drone_2", "drone", 0.05))
        workload.wait_for("the server has met every executor of this fleet", 60.0)
        assert workload.proc.wait(120) == 0, workload.output()
        waited = float(re.search(r"every executor of this fleet \(waited ([\d.]+) s\)", workload.output()).group(1))
        assert waited >= 1.0, workload.output()
        assert "dropped" not in workload.output() and "TIMEOUT" not in workload.output(), workload.output()
    finally:
        for n in reversed(nodes):
            n.stop()


def test_a_run_that_executes_no_plan_exits_1_and_says_how_its_goals_ended():
    """A demo whose every goal ends without a plan executed (issue 30: SmolLM2 on the embedded planner's urgency
    classes, all DROPPED) must not look like a success: here the robot's executor never runs."""
    nodes = []
    try:
        nodes.append(start_server("executor_discovery_timeout_s:=1.0"))
        workload = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                               ["-r", "__node:=fleet_workload", "-p", "agents:=['ghost_1:drone']",
                                "-p", "requests_per_agent:=2", "-p", "stagger_s:=0.0"], "no ready line")
        nodes.append(workload)
        assert workload.proc.wait(120) == 1, workload.output()
        workload.wait_for("no plan was executed: 2 goals: 2 EXECUTOR_UNAVAILABLE (first: no executor at "
                          "/ghost_1/execute_segment", 5.0)
        assert "0/2 plans executed" in workload.output()
    finally:
        for n in reversed(nodes):
            n.stop()
