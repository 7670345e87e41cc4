"""Robots run what the plan means, over DDS between real processes: simulated drones in different scenes and the
kinematic example driver get hand-written segments from an rclpy ActionClient (conditionals, loops, variables across
segments, returns, run-time errors), and the server with the embedded planner brings a plan's return value to the
Plan result."""
from __future__ import annotations

import subprocess
import sys

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile  # noqa: E402

from timely_llm_ros.action import ExecuteSegment, Plan  # noqa: E402
from timely_llm_ros.evaluation.scene import load_scene  # noqa: E402
from timely_llm_ros.evaluation.scene_run import run_plan, segment_texts  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.interpreter import format_value  # noqa: E402
from timely_llm_ros.msg import RobotState, Skill  # noqa: E402
from timely_llm_ros.ros.executor.plans import returns_conflicts  # noqa: E402

from ros_harness import (REPO, NodeProcess, SpinningActionClient, plan_client, ros_env, start_executor,  # noqa: E402
                         start_server, wait, wait_until)

R = ExecuteSegment.Result
DRONE = load_skill_sets()["drone"]
BALL_AHEAD = "{objects: [{name: ball, x: 2.0, y: 0.0, z: 1.0, size: 0.3}]}"


class _Robot(SpinningActionClient):
    """An ExecuteSegment client for one robot namespace, and the robot's published state."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.states: list[RobotState] = []
        super().__init__(f"test_{ns}_client", ExecuteSegment, f"/{ns}/execute_segment")
        assert self.client.wait_until_answering(timeout_sec=30.0)

    def add_entities(self) -> None:
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_subscription(RobotState, f"/{self.ns}/robot_state", self.states.append, latched)

    def settled_state(self, reached=lambda state: True) -> RobotState:
        """The robot's state once it is idle (no current skill) and reached(state) holds: the last state message
        can arrive after the result, and the robot is also idle for a moment between skills."""
        def settled() -> RobotState | None:
            state = self.states[-1] if self.states else None
            return state if state is not None and state.current_skill == "" and reached(state) else None
        return wait_until(settled, 10.0, lambda: f"/{self.ns} did not settle; last states {self.states[-3:]}")

    def run(self, request_id: str, *texts: str, first_index: int = 0, feedback: list | None = None) -> list:
        """Send the segments of one plan at once (as the server streams them); their results, in order."""
        handles = []
        for i, text in enumerate(texts, first_index):
            goal = ExecuteSegment.Goal(request_id=request_id, index=i, text=text, expected_duration=1.0)
            handle = wait(self.client.send_goal_async(goal, feedback_callback=(
                (lambda m: feedback.append(m.feedback)) if feedback is not None else None)), 20.0)
            assert handle is not None and handle.accepted
            handles.append(handle)
        results = [wait(self.client.result_async(h), 30.0) for h in handles]
        assert all(r is not None for r in results), "a segment got no result"
        return [(r.status, r.result) for r in results]


def _names(result) -> list[str]:
    return [s.name for s in result.executed_skills]


@pytest.fixture(scope="module")
def robots():
    nodes = [start_executor("sem_keys", "drone", 0.01, params=("scene:=bedroom_keys",)),
             start_executor("sem_empty", "drone", 0.01)]
    kinematic = NodeProcess("timely_llm_ros.ros.executor.kinematic",
                            ["-r", "__ns:=/sem_kin", "-r", "__node:=executor", "-p", "speed_mps:=10.0",
                             "-p", "turn_rate_dps:=900.0", "-p", f"scene:=\"{BALL_AHEAD}\""], "executor ready")
    nodes.append(kinematic)
    clients = {}
    try:
        kinematic.wait_ready(60)
        clients = {ns: _Robot(ns) for ns in ("sem_keys", "sem_empty", "sem_kin")}
        yield clients
    finally:
        for client in clients.values():
            client.close()
        for node in nodes:
            node.stop()
    for node in nodes:
        assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


def test_the_same_conditional_is_taken_in_one_scene_and_skipped_in_another(robots):
    plan = ("s('keys');", "?iv('keys')==True{g('keys');tp();}")
    feedback: list = []
    taken = robots["sem_keys"].run("cond_keys", *plan)
    skipped = robots["sem_empty"].run("cond_empty", *plan, feedback=feedback)
    assert all(status == GoalStatus.STATUS_SUCCEEDED for status, _ in taken + skipped)
    assert _names(taken[1][1]) == ["iv", "g", "tp"]
    assert _names(skipped[1][1]) == ["iv"]
    assert [a for s in taken[1][1].executed_skills for a in s.args] == ["keys", "keys"]
    last = [f for f in feedback if f.skills_total == 3][-1]   # progress: calls run out of the worst case
    assert last.skills_done == 1 and last.time_remaining == 0.0


def test_a_loop_runs_its_body_n_times_and_the_robot_turns_that_much(robots):
    robot = robots["sem_kin"]
    yaw0 = robot.settled_state().yaw
    [(status, result)] = robot.run("loop", "3{tc(30);}")
    assert status == GoalStatus.STATUS_SUCCEEDED and _names(result) == ["tc", "tc", "tc"]
    turned = robot.settled_state(lambda s: (s.yaw - yaw0 + 180.0) % 360.0 - 180.0 == pytest.approx(-90.0, abs=1e-6))
    assert turned.current_skill == ""
    robot.run("loop_back", "tu(90);")


def test_a_variable_set_in_one_segment_is_read_in_a_later_one_and_returned(robots):
    results = robots["sem_keys"].run("var", "s('keys');_1=od('keys');", "mf(_1);", "->_1;")
    assert all(status == GoalStatus.STATUS_SUCCEEDED for status, _ in results)
    measured = results[0][1].executed_skills[-1]
    assert measured.name == "od"
    moved = results[1][1].executed_skills
    assert len(moved) == 1 and moved[0].name == "mf" and float(moved[0].args[0]) > 0.0   # the value, not "_1"
    assert not results[1][1].returned
    assert results[2][1].returned and results[2][1].return_value == moved[0].args[0]


def test_after_a_return_the_plans_later_segments_end_not_run(robots):
    robot = robots["sem_empty"]
    results = robot.run("ret", "tc(10);->'early';", "tc(10);", "tc(10);")
    assert results[0][1].success and results[0][1].returned and results[0][1].return_value == "early"
    for status, result in results[1:]:
        assert result.error_code == R.NOT_RUN and "returned at segment 0" in result.error_message
        assert not result.executed_skills
    [(_, late)] = robot.run("ret", "tc(10);", first_index=3)
    assert late.error_code == R.NOT_RUN and "returned at segment 0" in late.error_message
    robot.run("ret_back", "tu(20);")


@pytest.mark.parametrize("text, fragment", [
    ("mf(_9);", "variable _9 is not set"),
    ("?iv('keys')=='yes'{tp();}", "cannot compare bool False with str 'yes'"),
    ("_1=od('keys');", "'keys' is not in view"),
    ("mf(10", "is no valid drone plan text: expected ')'"),
])
def test_run_time_errors_end_the_segment_failed_with_what_went_wrong(robots, text, fragment):
    [(status, result)] = robots["sem_empty"].run(f"err {text}", text)
    assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.FAILED
    assert fragment in result.error_message, result.error_message


def test_a_plans_variables_end_with_a_failed_segment(robots):
    """The plan after a failure (replan_on_failure: same request id, later indices) starts with no variables."""
    robot = robots["sem_empty"]
    results = robot.run("fail", "_1=iv('keys');tp();", "mf(_2);")
    assert results[0][1].success and results[1][1].error_code == R.FAILED
    [(_, after)] = robot.run("fail", "->_1;", first_index=2)
    assert after.error_code == R.FAILED and "variable _1 is not set" in after.error_message


def test_the_kinematic_drone_answers_from_its_scene_and_flies_to_what_it_sees(robots):
    robot = robots["sem_kin"]
    results = robot.run("ball", "?iv('ball')==True&od('ball')>100{g('ball');}", "->od('ball');")
    assert _names(results[0][1]) == ["iv", "od", "g"]
    assert results[1][1].returned and float(results[1][1].return_value) == pytest.approx(50.0)
    robot.settled_state(lambda s: (s.x, s.y) == pytest.approx((1.5, 0.0), abs=1e-6))


def test_a_goal_without_text_runs_its_skill_list_as_sent(robots):
    """An old client sends only the flat skill list: the robot runs it, every call, as before."""
    robot = robots["sem_empty"]
    goal = ExecuteSegment.Goal(request_id="old", index=0, expected_duration=1.0,
                               skills=[Skill(name="tc", args=["10"]), Skill(name="iv", args=["keys"]),
                                       Skill(name="tu", args=["10"])])
    handle = wait(robot.client.send_goal_async(goal), 20.0)
    result = wait(robot.client.result_async(handle), 30.0).result
    assert result.success and [(s.name, list(s.args)) for s in result.executed_skills] == [
        ("tc", ["10"]), ("iv", ["keys"]), ("tu", ["10"])]


@pytest.mark.parametrize("skills, says", [
    ([Skill(name="tc", args=[])], "tc (turn_cw) takes 1 argument(s), got 0 in skill 1 of the goal's list"),
    ([Skill(name="tc", args=["10"]), Skill(name="mf", args=["far"])],
     "mf argument 1 must be int, got 'far' in skill 2 of the goal's list"),
])
def test_a_skill_list_with_a_wrong_call_is_refused_before_any_of_it_runs(robots, skills, says):
    """A client's skill list (no text) is checked as its text would be: nothing of it runs, and the result says
    which call is wrong, instead of a skill function failing on arguments it cannot take."""
    goal = ExecuteSegment.Goal(request_id="bad_list", index=0, expected_duration=1.0, skills=skills)
    handle = wait(robots["sem_empty"].client.send_goal_async(goal), 20.0)
    result = wait(robots["sem_empty"].client.result_async(handle), 30.0).result
    assert result.error_code == R.FAILED and not result.executed_skills
    assert f"segment 0 is no valid drone skill list: {says}" in result.error_message, result.error_message


@pytest.mark.parametrize("param, says", [
    ("robot_type:=rover", "robot_type 'rover' has no skill set; known: arm, chat, drone"),
    ("scene:=nowhere", "scene 'nowhere': no such file"),
    ("robot_type:=''", "an executor needs a robot type"),
])
def test_an_executor_without_a_language_or_scene_for_its_parameters_stops_at_start_up(param, says):
    proc = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.executor.node", "--ros-args", "-p", param],
                          cwd=REPO, env=ros_env(), capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out and says in out, out[-3000:]


def test_a_skill_declared_with_another_return_kind_than_its_skill_set_is_named():
    assert returns_conflicts(DRONE, {"iv": "float", "od": "float"}) == [
        "skill 'iv' returns float in this executor but bool in the drone skill set"]




@pytest.fixture(scope="module")
def planner():
    nodes = []
    try:
        nodes.append(start_server("executor_discovery_timeout_s:=8.0", "executor_ack_timeout_s:=8.0",
                                  "expected_agents:=[plan_keys,plan_empty]"))
        nodes.append(start_executor("plan_keys", "drone", 0.05, params=("scene:=bedroom_keys",)))
        nodes.append(start_executor("plan_empty", "drone", 0.05))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            yield client
    finally:
        for node in reversed(nodes):
            node.stop()


def test_the_plan_result_carries_the_value_the_robot_returned(planner):
    """The embedded planner's plan for "check for keys or wallet" has conditionals and returns; each robot's value
    is what the interpreter gives for the segments it received, in that robot's scene."""
    runs = {agent: planner.send(agent_id=agent, robot_type="drone", task="check for keys or wallet",
                                context="room: bedroom; objects: bed, wallet, lamp", urgency_class="normal")
            for agent in ("plan_keys", "plan_empty")}
    values = {}
    for agent, scene in (("plan_keys", "bedroom_keys"), ("plan_empty", "")):
        status, result = runs[agent].result()
        assert status == GoalStatus.STATUS_SUCCEEDED and result.error_code == Plan.Result.ERROR_NONE, \
            (result.error_code, result.error_message)
        sent = "".join(s.text for s in result.segments)
        assert [s.text for s in result.segments] == segment_texts(DRONE, sent)   # what the robot received
        expected = run_plan(DRONE, sent, load_scene(scene))
        assert result.returned and expected.returned
        assert result.return_value == format_value(expected.value)
        ran = [s for s in result.segments if s.executed]
        assert len(ran) == len(expected.segments)   # nothing after the segment that returned
        assert [c.name for s in ran for c in s.executed_skills] == [c.name for c in expected.executed]
        values[agent] = result.return_value
    assert values["plan_keys"] != values["plan_empty"], values
