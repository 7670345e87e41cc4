"""The server's segment dispatcher refuses a segment, before sending it, when two executors serve its robot.

A real rclpy node (no spinning needed: a refused segment never reaches DDS); the count of live executors is given,
as the robot directory would from its status liveliness (test_ros_server.py covers that side over DDS)."""
from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup  # noqa: E402

from timely_llm_ros.core.errors import ErrorCode  # noqa: E402
from timely_llm_ros.core.request import Segment  # noqa: E402
from timely_llm_ros.ros.server.segment_dispatcher import SegmentDispatcher  # noqa: E402


class _Scheduler:
    """What the dispatcher posts to the scheduler thread, recorded."""

    def __init__(self) -> None:
        self.finished: list[dict] = []

    def on_execution_finished(self, req_id: str, index: int, now: float, **outcome) -> None:
        self.finished.append(dict(req_id=req_id, index=index, **outcome))


@pytest.mark.parametrize("executors", [1, 2])
def test_a_segment_is_not_sent_while_two_executors_serve_its_robot(executors: int) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("dispatcher_probe", context=context)
    scheduler = _Scheduler()
    dispatcher = SegmentDispatcher(node, lambda event: event(scheduler), MutuallyExclusiveCallbackGroup(),
                                   alive=lambda agent: True, live_executors=lambda agent: executors)
    try:
        dispatcher.send("r1", "drone_x", Segment(1, "tp();", [], 0.0, 0.0, 0.1))
        if executors == 1:      # sent (to nobody yet): nothing is answered at once
            assert scheduler.finished == []
        else:
            [refused] = scheduler.finished
            assert (refused["req_id"], refused["index"], refused["ok"]) == ("r1", 1, False)
            assert refused["code"] == ErrorCode.EXECUTOR_UNAVAILABLE
            assert "2 executors serve /drone_x/execute_segment" in refused["error"]
    finally:
        dispatcher.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)
