"""The worked example of docs/robots.md, over DDS with real processes: a team's ground rover (examples/rover: its
skill set, execution-time profile and executor subclass, loaded through ``skills_dir``, nothing of the package's
config/ edited), planned by a real model (SmolLM2-135M-Instruct under the rover's grammar, the server's default for
it) and run by two rovers in two rooms: the same plan takes its conditional's body in the room with the cat and
skips it in the room without."""
from __future__ import annotations


import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402

from timely_llm_ros.core.request import SkillCall  # noqa: E402
from timely_llm_ros.core.robot_types import load_robot_types  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402
from timely_llm_ros.core.skills.program import Conditional, Return, worst_case_calls  # noqa: E402

from ros_harness import REPO, NodeProcess, plan_client, start_server, wait_until  # noqa: E402

ROVER_DIR = REPO / "examples" / "rover"
ROOMS = {"rover_1": "lounge_cat", "rover_2": "lounge"}      # examples/rover/scenes: with and without the cat
# the worked task of docs/robots.md; the scene text is what the model reads, the same for both rovers
TASK = dict(robot_type="rover", task="is there a cat here? if so, take a photo of it",
            context="room: living room; objects: sofa, table, lamp", urgency_class="normal")


def start_rover(agent: str, room: str) -> NodeProcess:
    """The example's executor, started as docs/robots.md says (the script, the robot's namespace, skills_dir),
    driving 8x faster than its default 0.25 m/s so the test is quick."""
    node = NodeProcess(str(ROVER_DIR / "rover_executor.py"),
                       ["-r", f"__ns:=/{agent}", "-p", f"skills_dir:={ROVER_DIR}",
                        "-p", f"scene:={ROVER_DIR / 'scenes' / f'{room}.yaml'}",
                        "-p", "speed_mps:=2.0", "-p", "turn_rate_dps:=720.0"], "executor ready")
    node.wait_ready()
    return node


@pytest.fixture(scope="module")
def rovers():
    nodes = []
    try:
        nodes.append(start_server("model:=smollm2", f"skills_dir:={ROVER_DIR}", "executor_discovery_timeout_s:=8.0",
                                  f"expected_agents:=[{','.join(ROOMS)}]"))
        nodes += [start_rover(agent, room) for agent, room in ROOMS.items()]
        with plan_client() as client:
            yield client
    finally:
        for n in reversed(nodes):
            n.stop()


def _ran(result) -> list[tuple[str, tuple[str, ...]]]:
    """The calls the robot reported running, over all segments, arguments as text."""
    return [(s.name, tuple(s.args)) for seg in result.segments for s in seg.executed_skills]


def _as_call(msg) -> SkillCall:
    return SkillCall(msg.name, tuple(float(a) if a.replace(".", "", 1).isdigit() else a for a in msg.args))


def test_smollm2_plans_the_rover_and_the_plans_conditional_follows_the_room_the_rover_is_in(rovers):
    """One goal per rover with the same task and scene text: SmolLM2 writes the same plan for both (greedy), it
    parses with the rover's skill set and has a conditional; the rover in the room with the cat runs the
    conditional's body, the one in the room without skips it. Each segment's estimate is the team's profile's
    (exec_time/rover.yaml), and the rover's ExecutorStatus says rover, its skills, busy with the plan, then idle."""
    from timely_llm_ros.msg import ExecutorStatus
    from timely_llm_ros.ros.executor_status import status_qos

    client = rovers
    statuses: list[ExecutorStatus] = []
    assert client.node.create_subscription(ExecutorStatus, "/rover_1/executor_status", statuses.append, status_qos())
    # matched before the goals go out: a subscription discovered late gets only the last status (idle), and the
    # rover's busy ones are gone by then
    wait_until(lambda: statuses, 20, "no executor_status from rover_1 reached the test's subscription")
    results = {}
    for agent in ROOMS:
        status, result = client.send(agent_id=agent, **TASK).result(180)
        assert status == GoalStatus.STATUS_SUCCEEDED, (agent, result.error_code, result.error_message, result.plan)
        results[agent] = result
    cat, no_cat = results["rover_1"], results["rover_2"]
    assert cat.plan == no_cat.plan, (cat.plan, no_cat.plan)

    robot_types = load_robot_types(ROVER_DIR)
    rover = robot_types.skill_sets["rover"]
    parsed = parse(cat.plan, rover.skills, rover.statement_forms)
    assert not parsed.problems, parsed.problems
    conditionals = [s for s in parsed.program if isinstance(s, Conditional)]
    assert conditionals, f"SmolLM2's plan has no conditional: {cat.plan!r} (docs/robots.md: improve the examples)"
    body = worst_case_calls(conditionals[0].body)
    first_in_body = (body[0].name, tuple(str(a) for a in body[0].args))
    assert first_in_body in _ran(cat), (cat.plan, _ran(cat))            # the cat is there: the body ran
    assert first_in_body not in _ran(no_cat), (no_cat.plan, _ran(no_cat))   # no cat: skipped
    assert len(_ran(no_cat)) < len(_ran(cat))
    if any(isinstance(s, Return) for s in conditionals[0].body):
        assert cat.returned and cat.return_value, (cat.plan, cat.return_value)
        assert (no_cat.returned, no_cat.return_value) != (cat.returned, cat.return_value)

    profile = robot_types.exec_models[rover.exec_profile]
    for seg in cat.segments:
        # seg.skills is the segment's worst case (every body taken); the estimate is the expected time
        # (core/plan_time.py): equal to it for a segment without a conditional, below it for one with
        worst = profile.min_time([_as_call(s) for s in seg.skills])
        if "?" in seg.text:
            assert 0 < seg.estimated_exec_time < worst, seg
        else:
            assert seg.estimated_exec_time == pytest.approx(worst), seg

    wait_until(lambda: statuses and statuses[-1].state == "idle", 5, lambda: f"the rover never reported idle: {statuses[-1:]}")
    assert statuses[-1].robot_type == "rover" and set(statuses[-1].skills) == set(rover.skills)
    # depth 1: a status replaced before it was taken is skipped, so a short segment's "busy" may be missed
    busy = {m.request_id for m in statuses if m.state == "busy"}
    assert cat.request_id in busy and statuses[-1].state == "idle", [(m.state, m.request_id) for m in statuses]
