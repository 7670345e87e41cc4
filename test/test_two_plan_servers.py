"""Two servers of the same /plan on one ROS domain (a second `ros2 run` of the server, another team's fleet)
would each plan every goal sent there and send its segments to the robot: each server says so in its log, naming
the action and what to do, and says when it has the action to itself again."""
from __future__ import annotations

import pytest

pytest.importorskip("rclpy")

from ros_harness import start_server  # noqa: E402

SAYS = "other action server(s) serve /plan on ROS domain"


def test_a_second_server_of_the_same_plan_action_is_named_in_both_logs() -> None:
    first = start_server("autostart:=false", ready="timely_server up")
    try:
        second = start_server("autostart:=false", ready="timely_server up")
        try:
            for server in (first, second):
                server.wait_for(SAYS, 30.0)
        finally:
            second.stop()
        first.wait_for("/plan has one server again", 60.0)
        assert first.proc.poll() is None, "the first server stopped"
        [line] = [line for line in first.output().splitlines() if SAYS in line]
        assert "[ERROR]" in line and "stop the other server, or give this one a namespace" in line
    finally:
        first.stop()
