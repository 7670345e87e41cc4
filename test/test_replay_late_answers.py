"""A workload replay that stops waiting reports each unanswered goal as "no result", keeps that row as reported,
and cancels the goal, whether the server's goal response or its result comes after the wait ended.

The replay (ros/fleet/workload_replay.py) runs with its real action client over DDS against a /plan action server
written here, in this process, whose acceptance or result is slow on purpose: a test server, since the point is
an answer that comes after the client's wait, which the real server gives only under a load this test cannot
afford."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.action import ActionServer, CancelResponse, GoalResponse  # noqa: E402
from rclpy.callback_groups import ReentrantCallbackGroup  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402

from timely_llm_ros.action import Plan  # noqa: E402
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadSpec, WorkloadTask  # noqa: E402
from timely_llm_ros.ros.action_client import deep_queues  # noqa: E402
from timely_llm_ros.ros.fleet.workload_replay import ReplayRun  # noqa: E402

from ros_harness import SpinningActionClient, Spun, poll_until  # noqa: E402

SLOW_S = 1.5        # how late the test server answers
WAIT_S = 0.4        # how long the replay waits for results after its last goal


class SlowPlanServer:
    """A /plan server that accepts after ``accept_delay_s`` and, once accepted, ends a goal when its client cancels
    it or after ``result_delay_s`` (succeeded); it records the cancels it gets."""

    def __init__(self, accept_delay_s: float, result_delay_s: float) -> None:
        self.accept_delay_s, self.result_delay_s = accept_delay_s, result_delay_s
        self.cancelled: list[str] = []
        self.spun = Spun(lambda ctx: rclpy.create_node("slow_plan_server", context=ctx),
                         lambda context: MultiThreadedExecutor(4, context=context))
        self.server = ActionServer(self.spun.node, Plan, "/plan", self._execute, goal_callback=self._goal,
                                   cancel_callback=self._cancel, callback_group=ReentrantCallbackGroup(),
                                   **deep_queues(server=True))
        self.spun.start()

    def _goal(self, goal) -> GoalResponse:
        time.sleep(self.accept_delay_s)
        return GoalResponse.ACCEPT

    def _cancel(self, goal_handle) -> CancelResponse:
        self.cancelled.append(goal_handle.request.task)
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle) -> Plan.Result:
        end = time.monotonic() + self.result_delay_s
        while time.monotonic() < end and not goal_handle.is_cancel_requested:
            time.sleep(0.01)
        if goal_handle.is_cancel_requested:
            goal_handle.canceled()
            return Plan.Result(error_code=Plan.Result.CANCELLED, request_id="r", error_message="cancelled")
        goal_handle.succeed()
        return Plan.Result(error_code=Plan.Result.ERROR_NONE, request_id="r", plan="mf(50);")

    def close(self) -> None:
        self.server.destroy()
        self.spun.close()


def _replay(accept_delay_s: float, result_delay_s: float):
    """One goal replayed against the slow server; the rows as reported, then as they are SLOW_S later, and the
    cancels the server got."""
    server = SlowPlanServer(accept_delay_s, result_delay_s)
    client = SpinningActionClient("replay_client", Plan, "/plan", **deep_queues())
    try:
        assert client.client.wait_until_answering(timeout_sec=30.0), "the test server did not answer"
        reported: list = []

        def report(rows) -> int:
            reported.extend((r.status, r.message) for r in rows)
            return 0
        host = SimpleNamespace(client=client.client, stop=threading.Event(), result_timeout_s=WAIT_S,
                               record_bag="", get_logger=client.node.get_logger, give_up=lambda: False,
                               report=report)
        spec = WorkloadSpec(name="late-answers", eps=1.0, max_tpe=1, trace_ids=(1,), agents=1, duration_s=1.0)
        task = WorkloadTask("late-0", 0.0, 0, "drone_1", 1, "drone", "normal", "look for the cat", "cat, sofa", "", 0)
        replay = ReplayRun(host, Workload(spec, [task], 0, 1))
        replay.run()
        poll_until(lambda: server.cancelled, SLOW_S + 5.0)
        time.sleep(0.2)     # a late result, were it counted, has come by now
        later = [(r.status, r.message) for r in replay.rows.values()]
        return reported, later, list(server.cancelled)
    finally:
        client.close()
        server.close()


def test_a_goal_accepted_after_the_wait_ended_is_cancelled_and_stays_reported_as_no_goal_response():
    reported, later, cancelled = _replay(accept_delay_s=SLOW_S, result_delay_s=5.0)
    assert reported == [("no result", "no goal response from /plan")]
    assert later == reported
    assert cancelled == ["look for the cat"]


def test_a_goal_whose_result_comes_after_the_wait_ended_is_cancelled_and_its_row_is_not_overwritten():
    reported, later, cancelled = _replay(accept_delay_s=0.0, result_delay_s=SLOW_S)
    assert reported == [("no result", "timed out waiting for the result")]
    assert later == reported
    assert cancelled == ["look for the cat"]
