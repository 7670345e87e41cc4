"""A server that has answered thousands of goals holds nothing of them once they ended, beyond its declared
histories (issue 40: an exposed server's RSS grew ~8.5 KB a goal and never came back).

The server node runs in this process (the real node, engine, scheduler and dispatcher; a real executor process on
loopback; a real client in its own rclpy context), so the test counts what the server retains directly, per
container, instead of reading RSS: every per-goal entry in the action server, the goal intake, the scheduler,
the engine and the per-robot action clients. Plan goals are cancelled at once or a moment later, so that segments
are withdrawn while their goal response is still on its way and after the robot accepted them."""
from __future__ import annotations

import random
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.action import ActionServer, CancelResponse, GoalResponse  # noqa: E402
from rclpy.callback_groups import ReentrantCallbackGroup  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from ros_harness import PlanClient, start_executor, wait  # noqa: E402

from timely_llm_ros.action import ExecuteSegment  # noqa: E402

AGENT = "keep_1"
GOALS = 2000
OUTSTANDING = 24
RESULT_KEEP_S = 1.0
SLOW_GOALS = 60
LENIENT = dict(urgency_class="", ert=60.0, alpha=-0.01, beta=1.0)


def _goal(rng: random.Random) -> tuple[str, dict]:
    """One goal of a mix like an exposed server's: most of them invalid, some to robots nobody serves."""
    kind = rng.choices(["invalid", "unknown agent", "dry-run", "valid", "cancel now", "cancel later"],
                       [0.35, 0.05, 0.15, 0.15, 0.15, 0.15])[0]
    base = dict(agent_id=AGENT, robot_type="drone", task="look for the cat", context="cat, chair, table", **LENIENT)
    if kind == "invalid":
        base.update(rng.choice([dict(alpha=1.0), dict(ert=-1.0), dict(task=""), dict(robot_type="submarine"),
                                dict(urgency_class="x" + str(rng.randrange(10**6)))]))
    elif kind == "unknown agent":
        base["agent_id"] = "nobody_" + "".join(rng.choice("abcdefgh") for _ in range(8))
    elif kind == "dry-run":
        base["dry_run"] = True
    return kind, base


def _retained(node) -> dict[str, int]:
    """Per-goal entries the server still holds, by container."""
    counts = {"action server goal handles": len(node.action_server._goal_handles),
              "action server result futures": len(node.action_server._result_futures),
              "goal sessions": len(node.intake.sessions),
              "dispatcher segments": len(node.runtime.dispatcher._goals)}
    scheduler = node.runtime.loop.call(lambda s: s).result(10.0)
    counts["scheduler tracks"] = len(scheduler._tracks)
    counts["engine generations"] = len(scheduler.engine._gens)
    for agent in node.runtime.dispatcher.known():
        client = node.runtime.dispatcher.client(agent)
        for name in ("_feedback_callbacks", "_goal_handles", "_pending_goal_requests", "_pending_cancel_requests",
                     "_pending_result_requests", "_goal_sequence_number_to_goal_id",
                     "_result_sequence_number_to_goal_id", "_awaited", "_futures"):
            counts[f"{agent} client {name}"] = len(getattr(client, name))
    return counts


class _Server:
    """The real server node in this process, spun by its own thread, with a short result_keep_s."""

    def __init__(self, expected: list[str]) -> None:
        from timely_llm_ros.ros.server.node import PlanServerNode

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = PlanServerNode(context=self.context, parameter_overrides=[
            Parameter("autostart", value=False), Parameter("hardware_fit", value=False),
            Parameter("num_threads", value=1), Parameter("log_timing", value=False),
            Parameter("executor_discovery_timeout_s", value=0.3), Parameter("result_keep_s", value=RESULT_KEEP_S),
            *([Parameter("expected_agents", value=expected)] if expected else [])])
        self.spinner = MultiThreadedExecutor(num_threads=4, context=self.context)
        self.spinner.add_node(self.node)
        assert self.node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
        assert self.node.trigger_activate() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
        threading.Thread(target=self.spinner.spin, daemon=True).start()

    def close(self) -> None:
        self.node.trigger_shutdown()
        self.spinner.shutdown(timeout_sec=5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


class _UnreliableRobot:
    """A robot's ExecuteSegment server that answers each goal late (RESPONSE_DELAY_S) and refuses every other one,
    as a third-party executor may (rclpy's own ActionServer in this process, with its own context): segments are
    then refused, or withdrawn while their goal response is on its way."""

    RESPONSE_DELAY_S = 0.3

    def __init__(self, agent: str) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("executor", namespace=agent, context=self.context)
        self.answered = 0
        self._lock = threading.Lock()
        self.server = ActionServer(self.node, ExecuteSegment, "execute_segment", self._execute,
                                   goal_callback=self._on_goal, cancel_callback=lambda _: CancelResponse.ACCEPT,
                                   callback_group=ReentrantCallbackGroup())
        self.spinner = MultiThreadedExecutor(num_threads=8, context=self.context)
        self.spinner.add_node(self.node)
        threading.Thread(target=self.spinner.spin, daemon=True).start()

    def _on_goal(self, _goal) -> GoalResponse:
        time.sleep(self.RESPONSE_DELAY_S)
        with self._lock:
            self.answered += 1
            odd = self.answered % 2 == 1
        return GoalResponse.REJECT if odd else GoalResponse.ACCEPT

    def _execute(self, handle):
        end = time.monotonic() + 0.5
        while time.monotonic() < end and not handle.is_cancel_requested:
            time.sleep(0.01)
        if handle.is_cancel_requested:
            handle.canceled()
            return ExecuteSegment.Result(success=False)
        handle.succeed()
        return ExecuteSegment.Result(success=True, execution_time=0.5)

    def close(self) -> None:
        self.spinner.shutdown(timeout_sec=5.0)
        self.server.destroy()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def test_a_server_keeps_nothing_of_thousands_of_ended_goals():
    executor = start_executor(AGENT, "drone", 0.01)
    server = None
    client = None
    try:
        server = _Server([AGENT])
        node = server.node
        client = PlanClient()
        rng = random.Random(40)
        runs: list = []
        cancel_later: list = []
        kinds: dict[str, int] = {}
        for _ in range(GOALS):
            while sum(1 for r in runs if r.result_future is None or not r.result_future.done()) >= OUTSTANDING:
                now = time.monotonic()
                for when, run in [c for c in cancel_later if c[0] <= now]:
                    run.handle.cancel_goal_async()
                cancel_later = [c for c in cancel_later if c[0] > now]
                runs = [r for r in runs if r.result_future is None or not r.result_future.done()]
                time.sleep(0.002)
            kind, fields = _goal(rng)
            kinds[kind] = kinds.get(kind, 0) + 1
            run = client.send(**fields)
            if kind == "cancel now":
                run.handle.cancel_goal_async()
            elif kind == "cancel later":
                cancel_later.append((time.monotonic() + rng.uniform(0.0, 0.5), run))
            runs.append(run)
        for _, run in cancel_later:
            run.handle.cancel_goal_async()
        for run in runs:
            assert wait(run.result_future, 120.0) is not None, "a goal got no result"
        time.sleep(RESULT_KEEP_S + 3.0)   # finished goals expire from the action server; late answers arrive
        retained = _retained(node)
        held = {name: n for name, n in retained.items() if n}
        assert not held, f"after {GOALS} goals ({kinds}) the server still holds: {held}"
        # the declared histories stay within their sizes
        scheduler = node.runtime.loop.call(lambda s: s).result(10.0)
        assert len(scheduler.outcomes) <= scheduler.config.keep_outcomes
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.close()
        executor.stop()


def test_segments_a_robot_refused_or_that_were_withdrawn_before_its_answer_leave_nothing_behind():
    """rclpy's ActionClient lets a goal's feedback callback go only when the goal's result arrives: a segment the
    robot refused, or one withdrawn (its plan cancelled) before the robot's answer came, has no result asked for."""
    robot = _UnreliableRobot("slow_1")
    server = client = None
    try:
        server = _Server([])
        client = PlanClient()
        runs = []
        for i in range(SLOW_GOALS):
            run = client.send(agent_id="slow_1", robot_type="drone", task="look for the cat",
                              context="cat, chair, table", **LENIENT)
            if i % 2:   # withdrawn: cancelled once its first segment went to the robot, before the robot answers
                assert run.wait_for(lambda fb: fb.new_segment, 60.0), "no segment was sent"
                run.handle.cancel_goal_async()
            runs.append(run)
            while sum(1 for r in runs if not r.result_future.done()) >= 8:
                time.sleep(0.005)
        for run in runs:
            assert wait(run.result_future, 120.0) is not None, "a goal got no result"
        time.sleep(RESULT_KEEP_S + 3.0)
        assert robot.answered >= SLOW_GOALS // 2
        held = {name: n for name, n in _retained(server.node).items() if n}
        assert not held, f"after {SLOW_GOALS} goals to a robot that refuses or answers late, the server holds: {held}"
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.close()
        robot.close()
