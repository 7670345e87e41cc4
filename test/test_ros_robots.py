"""Robots say what they are (ExecutorStatus) and the server acts on it, over DDS with real processes: a team's own
robot type from skills_dir (the example rover of docs/robots.md, planned end to end in test_rover_example.py), a goal
for the wrong robot type, a skill the robot lacks, /diagnostics for a missing expected executor, and a skill set
without an execution-time profile at configure."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402

from timely_llm_ros.action import ExecuteSegment, Plan  # noqa: E402

from ros_harness import REPO, plan_client, poll_until, ros_env, start_executor, start_server, wait_until  # noqa: E402
from test_ros_server import _SilentExecutor  # noqa: E402

R = Plan.Result
DRONE_TASK = dict(agent_id="drone_1", robot_type="drone", task="look for the cat",
                  context="cat, chair, table, lamp", urgency_class="normal")
ROVER_TASK = dict(DRONE_TASK, agent_id="rover_1", robot_type="rover")
LENIENT = dict(urgency_class="", ert=10.0, alpha=-0.1, beta=1.0)   # discovering a new executor may take seconds
ROVER_DIR = REPO / "examples" / "rover"    # the worked example of docs/robots.md (test_rover_example.py runs it)


def _skills_dir(root, skills: dict[str, str], profiles: dict[str, str]):
    for folder, files in (("skills", skills), ("exec_time", profiles)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / f"{name}.yaml").write_text(text)
    return root


def test_a_skill_set_without_a_profile_entry_stops_configure_with_a_message_naming_it(tmp_path):
    """The example rover's folder with the profile's photo entry left out. Runs before the module's server starts
    (its /plan would meet this one's)."""
    shutil.copytree(ROVER_DIR / "skills", tmp_path / "skills")
    profile = (ROVER_DIR / "exec_time" / "rover.yaml").read_text()
    _skills_dir(tmp_path, {}, {"rover": "".join(line for line in profile.splitlines(keepends=True)
                                                if not line.startswith("  photo:"))})
    proc = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.server.node", "--ros-args", "-p",
                           f"skills_dir:={tmp_path}"], cwd=REPO, env=ros_env(), capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "configure failed" in out and "skill set 'rover': skill(s) photo have no entry in execution-time " \
        "profile 'rover'; add them to exec_time/rover.yaml" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]


def test_an_unconfigured_server_says_error_on_diagnostics():
    """No engine loaded (autostart false, nobody configured it): /diagnostics is ERROR and says what to do. Runs
    before the module's server starts."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    server = start_server("autostart:=false", ready="autostart is false")
    try:
        with plan_client() as client:
            diags = []
            assert client.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
            poll_until(lambda: diags, 20, 0.05)
    finally:
        server.stop()
    assert diags, "no /diagnostics from the unconfigured server"
    status = diags[-1].status[0]
    assert status.level == DiagnosticStatus.ERROR and status.message.startswith("unconfigured: no engine loaded"), \
        status.message
    assert "ros2 lifecycle set /timely_server configure" in status.message, status.message


@pytest.fixture(scope="module")
def robots():
    """The embedded planner's server with the example rover's folder (a robot type it cannot plan for well: these
    tests are about the checks around planning), two rovers on the simulated executor and a drone."""
    nodes = []
    team = (f"skills_dir:={ROVER_DIR}",)
    try:
        nodes.append(start_server(*team, "executor_discovery_timeout_s:=8.0", "executor_ack_timeout_s:=8.0",
                                  "expected_agents:=[rover_1,rover_2,drone_1]"))
        nodes.append(start_executor("rover_1", "rover", 0.05, params=team))
        nodes.append(start_executor("drone_1", "drone", 0.05))
        with plan_client() as client:
            client.start_rover_2 = lambda: nodes.append(start_executor("rover_2", "rover", 0.05, params=team))
            yield client
    finally:
        for n in reversed(nodes):
            n.stop()


def test_diagnostics_are_error_naming_a_missing_expected_executor_and_ok_once_it_appears(robots):
    """rover_2 is expected and not running: /diagnostics is ERROR and names it; once its executor runs (its
    ExecutorStatus is alive) the level is OK with the robots counted (WARN at most, for a standing hardware-fit
    warning on a loaded machine). First in the module: nothing has failed yet,
    so no rate warning can mask the OK."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    client = robots
    diags = []
    assert client.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)

    def latest(predicate, timeout: float):
        found = poll_until(lambda: [d.status[0] for d in list(diags) if predicate(d.status[0])], timeout, 0.05)
        return found[-1] if found else None

    # once the running executors' statuses reached the server, only rover_2 is missing
    status = latest(lambda s: s.name == "timely_server: scheduler" and "rover_1" not in s.message
                    and "drone_1" not in s.message, 20.0)
    assert status is not None and status.level == DiagnosticStatus.ERROR, [d.status[0].message for d in diags[-3:]]
    assert "expected executor(s) missing: rover_2" in status.message, status.message
    robots.start_rover_2()
    diags.clear()
    # OK, or WARN for what the hardware fit says of this machine alone (an urgency class a loaded machine cannot
    # meet): a standing warning that names no robot
    ok = latest(lambda s: s.level == DiagnosticStatus.OK or (s.level == DiagnosticStatus.WARN
                                                             and "robot" not in s.message and "missing" not in s.message
                                                             and "executor" not in s.message), 30.0)
    assert ok is not None, [d.status[0].message for d in diags[-3:]]
    values = {kv.key: kv.value for kv in ok.values}
    assert values["robots_missing"] == "-" and int(values["robots_alive"]) >= 3, values


def test_a_goal_for_another_robot_type_ends_wrong_robot_type_before_any_token(robots):
    """drone_1's executor says (ExecutorStatus) it is a drone: a rover goal for it ends WRONG_ROBOT_TYPE naming
    both types, and the engine ran no step for it (the latched state's engine_steps is unchanged)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile

    from timely_llm_ros.msg import SchedulerState

    client = robots
    states = []
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    assert client.node.create_subscription(SchedulerState, "/timely_server/state", states.append, latched)
    # the latched state can be one period old: wait for one published since, with nothing in flight
    wait_until(lambda: len(states) >= 2 and states[-1].queued + states[-1].running + states[-1].suspended
               + states[-1].executing == 0, 10, "no scheduler state with nothing in flight")
    steps = states[-1].engine_steps
    run = client.send(**dict(ROVER_TASK, agent_id="drone_1"))
    status, result = run.result(30)
    assert status == GoalStatus.STATUS_ABORTED
    assert result.error_code == R.WRONG_ROBOT_TYPE, (result.error_code, result.error_message)
    assert "'drone'" in result.error_message and "'rover'" in result.error_message
    assert result.tokens_generated == 0 and not result.plan and "generating" not in {f.state for f in run.feedback}
    seen = len(states)
    wait_until(lambda: len(states) >= seen + 2, 10, "the server stopped publishing its state")   # two more periods
    assert states[-1].engine_steps == steps


def test_a_plan_calling_a_skill_its_robot_lacks_ends_unknown_skill_naming_it(robots, tmp_path):
    """A team's drone with a small skill set (skills_dir: it can only move forward, wait and log). Grounded, the
    plan may call only what the robot's ExecutorStatus lists. Unconstrained, the server plans with the full drone
    skill set, and the first statement that calls a skill this robot does not list ends the plan UNKNOWN_SKILL
    naming the skill; that statement never reaches the robot."""
    (tmp_path / "skills").mkdir()
    (tmp_path / "exec_time").mkdir()
    (tmp_path / "skills" / "drone.yaml").write_text(
        "name: drone\nexec_profile: drone\nmax_segment_tokens: 10\nskills:\n"
        "  - {short: mf, long: move_forward, args: [int], kind: action}\n"
        "  - {short: d, long: delay, args: [int], kind: action}\n"
        "  - {short: l, long: log, args: [str], kind: action}\n")
    (tmp_path / "exec_time" / "drone.yaml").write_text(
        "profile: drone\nskills:\n  mf: {model: poly, coeffs: [1.8, 0.007]}\n  d: {model: poly, coeffs: [0.0, 1.0]}"
        "\n  l: {model: fixed, value: 0.001}\n")
    client = robots
    robot = start_executor("drone_small", "drone", 0.05, params=(f"skills_dir:={tmp_path}",))
    try:
        grounded = client.send(**dict(DRONE_TASK, agent_id="drone_small", max_new_tokens=16, **LENIENT)).result(120)
        run = client.send(**dict(DRONE_TASK, agent_id="drone_small", unconstrained=True, **LENIENT))
        status, result = run.result(60)
    finally:
        robot.stop()
    assert grounded[1].error_code != R.UNKNOWN_SKILL, grounded[1].error_message
    assert all(c.name in ("mf", "d", "l") for s in grounded[1].segments for c in s.skills), grounded[1].plan
    assert status == GoalStatus.STATUS_ABORTED
    assert result.error_code == R.UNKNOWN_SKILL, (result.error_code, result.error_message)
    assert "which the robot's executor does not have (it has: d, l, mf)" in result.error_message, \
        result.error_message
    assert all(c.name in ("mf", "d", "l") for s in result.segments for c in s.skills)   # sent: only its skills


def test_a_goal_for_an_executor_that_does_not_interpret_ends_before_any_token(robots):
    """A robot whose ExecutorStatus says it does not interpret plans (a team's server that runs the skill lists it
    is sent) would run every conditional's body: its goal ends WRONG_ROBOT_TYPE before anything is generated, and
    the robot receives nothing."""
    from rclpy.qos import DurabilityPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.duration import Duration

    from timely_llm_ros.msg import ExecutorStatus

    received = []

    def execute(goal_handle):
        received.append(goal_handle.request.text)
        goal_handle.succeed()
        return ExecuteSegment.Result(success=True)

    robot = _SilentExecutor("drone_blind", execute)
    qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE,
                     liveliness=LivelinessPolicy.AUTOMATIC, liveliness_lease_duration=Duration(seconds=1.0))
    status = robot.node.create_publisher(ExecutorStatus, "executor_status", qos)
    status.publish(ExecutorStatus(robot_type="drone", skills=["mf", "tc", "s", "g", "tp", "iv"], interprets=False,
                                  plan_rule="queue", state="idle"))
    try:
        run = robots.send(**dict(DRONE_TASK, agent_id="drone_blind", **LENIENT))
        goal_status, result = run.result(60)
    finally:
        robot.node.destroy_publisher(status)
        robot.close()
    assert goal_status == GoalStatus.STATUS_ABORTED
    assert result.error_code == R.WRONG_ROBOT_TYPE, (result.error_code, result.error_message)
    assert "does not interpret plans" in result.error_message and "robot_type:=drone" in result.error_message
    assert result.tokens_generated == 0 and not received


def test_an_executors_unknown_skill_result_ends_the_plan_unknown_skill_not_execution_failed(robots):
    """A robot that publishes no ExecutorStatus (a team's plain ExecuteSegment server) is not checked before
    sending; its own UNKNOWN_SKILL answer becomes the plan's UNKNOWN_SKILL (docs/server.md has the mapping)."""
    client = robots

    def refuse(goal_handle):
        goal_handle.abort()
        return ExecuteSegment.Result(success=False, error_code=ExecuteSegment.Result.UNKNOWN_SKILL,
                                     error_message="this robot has no skill(s) ['g']")

    robot = _SilentExecutor("drone_plain", refuse)
    try:
        run = client.send(**dict(DRONE_TASK, agent_id="drone_plain", **LENIENT))
        status, result = run.result(60)
    finally:
        robot.close()
    assert result.error_code == R.UNKNOWN_SKILL, (result.error_code, result.error_message)
    assert "['g']" in result.error_message


def test_a_requests_utility_so_far_is_the_eq3_sum_over_its_executed_segments():
    """SchedulerState.requests[].utility_so_far: 0 before the robot ran anything, then TUF_0 of the first segment's
    wait plus TUF_1 of each later one's."""
    from timely_llm_ros.core.request import Generation, PlanRequest, Segment
    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    from timely_llm_ros.ros.server.state_message import utility_so_far

    tuf = DEFAULT_URGENCY_CLASSES["normal"]
    gen = Generation(PlanRequest("r", "drone_1", "drone", "look", tuf, arrival=0.0), prompt_ids=[1])
    gen.segments = [Segment(0, "g('cat');", [], 0.1, 0.3, 2.5), Segment(1, "tp();", [], 0.3, 0.5, 0.001)]
    assert utility_so_far(gen) == 0.0
    gen.segments[0].exec_started, gen.segments[0].exec_finished = 1.25, 3.0      # waited 1.25 s: TUF_0 = 0.5
    assert utility_so_far(gen) == pytest.approx(0.5)
    gen.segments[1].exec_started, gen.segments[1].exec_finished = 3.25, 3.3      # waited 0.25 s after: TUF_1 = 0.5
    assert utility_so_far(gen) == pytest.approx(1.0)
