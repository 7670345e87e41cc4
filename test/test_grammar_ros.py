"""The server's `grammar` parameter and the goal's `unconstrained` flag, through ROS (real server process)."""
from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from timely_llm_ros.action import Plan  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402

from ros_harness import plan_client, start_server  # noqa: E402

R = Plan.Result
# an evaluation-set task (config/eval/arm.yaml, arm-stack2-006) whose unconstrained embedded-planner plan stops parsing
GOAL = dict(agent_id="arm_1", robot_type="arm", task="set the brown brick onto the pink cylinder",
            context="table: blue brick, white cube, pink cylinder, brown brick", urgency_class="normal", dry_run=True)


def test_a_server_given_an_unknown_grammar_mode_says_which_exist_and_exits_1():
    server = start_server("grammar:=maybe", ready="configure failed")
    try:
        assert server.proc.wait(30) == 1
        assert "grammar must be one of auto, on, off, got 'maybe'" in server.output()
        assert "Traceback" not in server.output()
    finally:
        server.stop()


def test_the_server_constrains_goals_under_grammar_on_unless_a_goal_says_unconstrained():
    """Under grammar:=on (the embedded planner entry's default too) the goal's plan parses and ends DONE, while the
    same goal with unconstrained: true ends INVALID_PLAN as the planner alone does."""
    arm = load_skill_sets()["arm"]
    server = start_server("grammar:=on")
    try:
        assert "grammar-constrained decoding on (grammar=on, model entry 'embedded')" in server.output()
        with plan_client() as client:
            _, constrained = client.send(**GOAL).result(120)
            _, free = client.send(**GOAL, unconstrained=True).result(120)
        assert constrained.error_code == R.ERROR_NONE, constrained.error_message
        assert not parse(constrained.plan, arm.skills, arm.statement_forms).problems
        assert free.error_code == R.INVALID_PLAN and "stopped parsing as arm skills" in free.error_message
    finally:
        server.stop()
