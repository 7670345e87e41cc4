"""Replanning after a failed segment (`replan_on_failure`) through the real server, an executor process and the
embedded model, over DDS on loopback."""
from __future__ import annotations

import re

import pytest

rclpy = pytest.importorskip("rclpy")

from timely_llm_ros.action import Plan  # noqa: E402

from ros_harness import plan_client, start_executor, start_server  # noqa: E402

R = Plan.Result


def test_a_failed_segment_is_planned_again_and_the_robot_never_runs_the_rest_of_the_old_plan():
    """Every segment fails half-way (abort_probability 1): the first plan's segment 0 fails while the streamed
    rest of that plan waits at the robot; the server plans again once (its context names the failed skill) and
    that plan's first segment fails too, so the request ends EXECUTION_FAILED. The robot must have started
    exactly two segments: 0 and the new plan's first. Before, it went on with the old plan's segment 1."""
    nodes = []
    try:
        nodes.append(start_server("replan_on_failure:=1", "policy:=fcfs-stream", "executor_ack_timeout_s:=8.0",
                                  "executor_discovery_timeout_s:=8.0", "expected_agents:=[drone_r]"))
        nodes.append(start_executor("drone_r", "drone", 3.0, params=("abort_probability:=1.0",)))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            run = client.send(agent_id="drone_r", robot_type="drone", task="look for the cat",
                              context="cat, chair, table, lamp", ert=60.0, alpha=-0.01, beta=1.0)
            status, result = run.result(120.0)
        robot = nodes[1].output()
    finally:
        for node in reversed(nodes):
            node.stop()
    assert result.error_code == R.EXECUTION_FAILED, (result.error_code, result.error_message)
    assert "injected fault" in result.error_message
    req = re.escape(result.request_id)
    # "[id] segment k: mf['50']" when k starts; "[id] segment k: skill mf['50'] failed: ..." when it fails
    started = [int(i) for i in re.findall(rf"\[{req}\] segment (\d+): (?!skill )", robot)]
    withdrawn = re.findall(rf"\[{req}\] segments \[([\d, ]+)\] not run: segment 0 ended", robot)
    assert withdrawn, f"the old plan's later segments were not waiting at the robot (started {started}):\n{robot}"
    dropped = [int(i) for i in withdrawn[0].split(",")]
    assert len(started) == 2 and started[0] == 0 and started[1] > max(dropped), (started, dropped)
    assert all(node.proc.returncode == 0 for node in nodes)
