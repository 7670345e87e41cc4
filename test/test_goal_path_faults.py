"""Every goal is answered, and what it held is freed, when the engine dies under it; and a goal is EXECUTING from its
acceptance to its result.

The real server node runs in this process (the embedded planner, its scheduler thread, its goal intake), with a
simulated robot's executor node, also in this process, and a plain rclpy client over DDS; so each test can read the
server's state afterwards. The engine's death is real: with engine_process the engine runs in a child process, and
the test SIGKILLs it (what the OOM killer or a crash in native code does) while a goal generates, then sends more."""
from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from timely_llm_ros.action import Plan  # noqa: E402

from ros_harness import Spun, plan_client, poll_until, wait_until  # noqa: E402


R = Plan.Result
AGENT = "drone_f"
GOAL = dict(agent_id=AGENT, robot_type="drone", task="look for the cat", context="cat, chair, table, lamp",
            urgency_class="", ert=20.0, alpha=-0.05, beta=1.0)


@contextlib.contextmanager
def _world(*params: Parameter):
    """The server (configured and active) and the robot's executor, spun in this process, and a plan client."""
    from timely_llm_ros.ros.executor.sim import SimulatedExecutorNode
    from timely_llm_ros.ros.server.node import PlanServerNode

    robot = Spun(lambda ctx: SimulatedExecutorNode(context=ctx, namespace=f"/{AGENT}", parameter_overrides=[
        Parameter("time_scale", value=1.0)]), lambda context: MultiThreadedExecutor(4, context=context))
    robot.node.publish_status()
    robot.start()
    server = Spun(lambda ctx: PlanServerNode(context=ctx, parameter_overrides=[
        Parameter("autostart", value=False), Parameter("hardware_fit", value=False),
        Parameter("expected_agents", value=[AGENT]), Parameter("num_threads", value=1), *params]),
        SingleThreadedExecutor)
    node = server.node
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
    server.start()
    try:
        with plan_client() as client:
            wait_until(lambda: node.runtime.discovery.known(AGENT), 30, "the server did not discover the robot", 0.05)
            yield node, robot.node, client
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


def _idle(robot) -> bool:
    """What the robot's executor status would say: idle, with no segment waiting."""
    status = robot._status_snapshot()
    return status.state == "idle" and status.segments_waiting == 0


def _serves_a_normal_goal(client) -> None:
    """The robot is not blocked by a phantom plan: the next goal for it runs to its end."""
    status, result = client.send(**GOAL).result(120)
    assert result.error_code == R.ERROR_NONE, (result.error_code, result.error_message)
    assert status == GoalStatus.STATUS_SUCCEEDED and result.segments


def test_a_goal_is_executing_from_acceptance_to_its_result():
    with _world() as (_, _, client):
        run = client.send(**GOAL)
        seen = set()
        while not run.result_future.done():
            seen.add(run.handle.status)
            time.sleep(0.005)
        status, result = run.result(120)
    assert result.error_code == R.ERROR_NONE, result.error_message
    assert GoalStatus.STATUS_EXECUTING in seen and GoalStatus.STATUS_ACCEPTED not in seen - {GoalStatus.STATUS_UNKNOWN}
    assert status == GoalStatus.STATUS_SUCCEEDED


def test_an_engine_that_dies_mid_plan_answers_that_goal_and_every_later_one_and_frees_what_they_held():
    """Before this test the scheduler's release of the dead engine's generation raised, and the goal whose engine
    died under it was never answered."""
    with _world(Parameter("engine_process", value=True)) as (node, robot, client):
        _serves_a_normal_goal(client)
        engine = node.runtime.scheduler.engine
        while not hasattr(engine, "pid"):       # under the wrappers (eviction, routing): the ProcessEngine
            engine = engine.wrapped
        run = client.send(**GOAL)
        # its first segment goes to the robot, which runs it for about a second; the plan's next segment is
        # generated before the robot ends it, in the engine the test kills now
        assert run.wait_for(lambda fb: fb.new_segment, 60), "no segment reached the robot"
        os.kill(engine.pid, signal.SIGKILL)
        status, result = run.result(60)
        assert (result.error_code, status) == (R.GENERATION_FAILED, GoalStatus.STATUS_ABORTED), result.error_message
        assert (f"engine step failed: engine process (pid {engine.pid}) exited with code -9" in result.error_message
                and "restart the server" in result.error_message), result.error_message
        assert _freed(node) == {"goals": 0, "requests": 0, "plans": 0, "robots": 0, "engine_generations": 0}
        # its segment was withdrawn, or had ended: nothing runs, or waits to run, for the dead plan
        assert poll_until(lambda: _idle(robot), 10, 0.05), robot._status_snapshot()
        # an operator sees it on /diagnostics: ERROR, naming the exit and what to do
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        diags: list = []
        client.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
        assert poll_until(lambda: diags and diags[-1].status[0].level == DiagnosticStatus.ERROR, 20, 0.05), \
            [d.status[0].message for d in diags[-3:]]
        message = diags[-1].status[0].message
        assert message.startswith(f"engine process (pid {engine.pid}) exited with code -9") \
            and "restart the server" in message, message
        for _ in range(2):              # the node keeps answering, each goal with the reason and what to do
            status, result = client.send(**GOAL).result(60)
            assert (result.error_code, status) == (R.GENERATION_FAILED, GoalStatus.STATUS_ABORTED)
            assert result.error_message.startswith("the engine could not take the request: EngineError: engine "
                                                   f"process (pid {engine.pid}) exited with code -9"), \
                result.error_message
            assert _freed(node) == {"goals": 0, "requests": 0, "plans": 0, "robots": 0, "engine_generations": 0}


def test_a_goal_past_the_active_check_when_the_server_stops_is_answered_server_shutdown():
    # A goal's intake checks that the server is active, validates the goal, then registers it; a stop's sweep of
    # open goals (end_all) can fall in between. The server is put in exactly that in-between state, with no hook:
    # its real end_all has swept (as finish() does first) while the node still reads active. A goal arriving then
    # used to register after the sweep and was never answered at shutdown (here: served as if nothing stopped);
    # it must be answered SERVER_SHUTDOWN at once.
    with _world() as (node, _, client):
        node.intake.end_all(node.runtime.loop, 10.0)
        assert node.active
        status, result = client.send(**GOAL).result(30)
        assert node.intake.open_goals() == 0
    assert (status, result.error_code) == (GoalStatus.STATUS_ABORTED, R.SERVER_SHUTDOWN), (status, result)
    assert "shutting down" in result.error_message
