"""Every goal is answered, and what it held is freed, whatever raises on its way: at intake, while it enters the
scheduler or generates, while its segment is sent, while its result is built. And a goal is EXECUTING from its
acceptance to its result.

The real server node runs in this process (the embedded planner, its scheduler thread, its goal intake), with a
simulated robot's executor node, also in this process, and a plain rclpy client; so each test can swap one function
on the goal's way for a TEST DOUBLE THAT RAISES (monkeypatch), and read the server's state afterwards.

What the double stands in for, and why: a bug at that stage (an engine, dispatcher, validator or result builder that
raises). The real ones cannot be made to fail on demand here, which is the point of the test; everything else (the
node, the scheduler thread, the embedded planner's forward passes, DDS on loopback, the executor) is real, and each
test swaps exactly one function, undone before the next test."""
from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from timely_llm_ros.action import Plan  # noqa: E402

from ros_harness import plan_client, poll_until, wait_until  # noqa: E402

R = Plan.Result
AGENT = "drone_f"
GOAL = dict(agent_id=AGENT, robot_type="drone", task="look for the cat", context="cat, chair, table, lamp",
            urgency_class="", ert=20.0, alpha=-0.05, beta=1.0)


class Injected(RuntimeError):
    """What the test doubles raise."""


def _raises(*args, **kwargs):
    """TEST DOUBLE: stands in for one real function on the goal's way (a bug there, which cannot be provoked on
    demand) and raises."""
    raise Injected("injected fault")


class Spun:
    """A node spun by its own executor on a daemon thread, in a context of its own."""

    def __init__(self, make, executor_type) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = make(self.context)
        self.executor = executor_type(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)

    def start(self) -> "Spun":
        self.thread.start()
        return self

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.fixture(scope="module")
def world():
    from timely_llm_ros.ros.executor.sim import SimulatedExecutorNode
    from timely_llm_ros.ros.server.node import PlanServerNode

    robot = Spun(lambda ctx: SimulatedExecutorNode(context=ctx, namespace=f"/{AGENT}", parameter_overrides=[
        Parameter("time_scale", value=0.05)]), lambda context: MultiThreadedExecutor(4, context=context))
    robot.node.publish_status()
    robot.start()
    server = Spun(lambda ctx: PlanServerNode(context=ctx, parameter_overrides=[
        Parameter("autostart", value=False), Parameter("hardware_fit", value=False),
        Parameter("expected_agents", value=[AGENT]), Parameter("num_threads", value=1)]), SingleThreadedExecutor)
    node = server.node
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
    server.start()
    try:
        with plan_client() as client:
            wait_until(lambda: node.runtime.discovery.known(AGENT), 30, "the server did not discover the robot", 0.05)
            yield node, client
    finally:
        node.trigger_shutdown()
        server.node.shutdown()
        server.close()
        robot.node.shutdown()
        robot.close()


def _freed(node) -> dict:
    """What the server still holds of any goal (all zero / empty when everything was freed)."""
    def scheduler_view(s):
        return {"requests": s.active(), "plans": len(s.execution._plans), "robots": len(s.execution._robots),
                "engine_generations": s.engine.memory().generations}
    def held() -> dict:
        return {"goals": node.intake.open_goals(), **node.runtime.loop.call(scheduler_view).result(10)}

    poll_until(lambda: not any(held().values()), 10, 0.05)
    return held()


def _serves_a_normal_goal(client) -> None:
    """The robot is not blocked by a phantom plan: the next goal for it runs to its end."""
    status, result = client.send(**GOAL).result(120)
    assert result.error_code == R.ERROR_NONE, (result.error_code, result.error_message)
    assert status == GoalStatus.STATUS_SUCCEEDED and result.segments


def test_a_goal_is_executing_from_acceptance_to_its_result(world):
    node, client = world
    run = client.send(**GOAL)
    seen = set()
    while not run.result_future.done():
        seen.add(run.handle.status)
        time.sleep(0.005)
    status, result = run.result(120)
    assert result.error_code == R.ERROR_NONE, result.error_message
    assert GoalStatus.STATUS_EXECUTING in seen and GoalStatus.STATUS_ACCEPTED not in seen - {GoalStatus.STATUS_UNKNOWN}
    assert status == GoalStatus.STATUS_SUCCEEDED


@pytest.mark.parametrize("stage, target, code, says", [
    ("intake", "timely_llm_ros.ros.server.goal_intake.validate_goal", R.GENERATION_FAILED,
     "internal error while taking the goal in"),
    ("entering the scheduler", "engine.add", R.GENERATION_FAILED, "the engine could not take the request"),
    ("generation", "timely_llm_ros.core.skills.statements.StatementSegmenter.feed", R.GENERATION_FAILED,
     "internal error while its output was taken"),
    ("dispatch", "dispatcher.send", R.EXECUTOR_UNAVAILABLE, "internal error while its segment 0 was sent"),
    ("completion", "timely_llm_ros.ros.server.goal_intake.outcome_to_result", R.GENERATION_FAILED,
     "could not build the result"),
])
def test_an_exception_at_each_stage_answers_the_goal_and_frees_what_it_held(world, monkeypatch, stage, target,
                                                                           code, says):
    node, client = world
    # TEST DOUBLE, for what cannot run here on demand: a real engine, segmenter, dispatcher or result builder that
    # raises. Only that one function is swapped (for _raises); the server, its scheduler thread, the embedded planner's
    # engine, the robot's executor and the client are the real ones, over DDS.
    if target == "engine.add":
        monkeypatch.setattr(node.runtime.scheduler.engine, "add", _raises)
    elif target == "dispatcher.send":
        monkeypatch.setattr(node.runtime.dispatcher, "send", _raises)
    else:
        monkeypatch.setattr(target, _raises)
    status, result = client.send(**GOAL).result(120)
    monkeypatch.undo()
    assert (result.error_code, status) == (code, GoalStatus.STATUS_ABORTED), (stage, result.error_message)
    assert says in result.error_message and "Injected" in result.error_message, result.error_message
    assert _freed(node) == {"goals": 0, "requests": 0, "plans": 0, "robots": 0, "engine_generations": 0}
    _serves_a_normal_goal(client)
