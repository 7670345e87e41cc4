"""robot_executor: executes plan segments for one robot, under the robot's namespace.

Serves <namespace>/execute_segment. Each skill takes the time the robot's execution-time
profile gives for it (sampled, scaled by time_scale), with progress feedback; a real robot
driver would replace this node and keep the same action. Segments run one at a time in the
order they arrive (the server sends the next segment while the current one runs); the first
feedback of a segment marks the moment it starts executing.
"""
from __future__ import annotations

import random
import sys
import time

from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment

from ..core.exec_time import ExecTimeModel
from .spin import spin_node
from .conversions import skill_from_msg
from .segment_queue import SegmentQueue

R = ExecuteSegment.Result


class RobotExecutorNode(Node):
    """A simulated robot: one ExecuteSegment action server."""

    def __init__(self, **kwargs) -> None:
        super().__init__("executor", **kwargs)
        self.robot_type = self.declare_parameter(
            "robot_type", "drone", ParameterDescriptor(description="skill set / execution-time profile: drone | arm",
                                                       read_only=True)).value
        self.time_scale = self.declare_parameter(
            "time_scale", 1.0, ParameterDescriptor(description="multiplies every execution time (demos, tests)",
                                                   floating_point_range=[FloatingPointRange(
                                                       from_value=0.0, to_value=100.0, step=0.0)])).value
        seed = self.declare_parameter("seed", 0, ParameterDescriptor(description="execution-time sampling seed")).value
        self.model = ExecTimeModel.load(self.robot_type)
        self._rng = random.Random(f"{self.get_namespace()}:{seed}")
        self._queue = SegmentQueue()
        self._action = ActionServer(self, ExecuteSegment, "execute_segment", execute_callback=self._execute,
                                    goal_callback=self._on_goal,
                                    cancel_callback=lambda g: CancelResponse.ACCEPT,
                                    callback_group=ReentrantCallbackGroup())
        self.get_logger().info(f"executor ready: {self.get_namespace()}/execute_segment "
                               f"robot_type={self.robot_type} time_scale={self.time_scale}")

    def _on_goal(self, goal) -> GoalResponse:
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> ExecuteSegment.Result:
        goal: ExecuteSegment.Goal = goal_handle.request
        skills = [skill_from_msg(s) for s in goal.skills]
        unknown = [s.name for s in skills if not self.model.knows(s.name)]
        cancelled = lambda: goal_handle.is_cancel_requested or not goal_handle.is_active  # noqa: E731
        if not self._queue.acquire(goal.request_id, goal.index, cancelled):
            goal_handle.canceled()
            return R(success=False, error_code=R.CANCELLED, error_message="cancelled while queued")
        try:
            if unknown:
                goal_handle.abort()
                return R(success=False, error_code=R.UNKNOWN_SKILL,
                         error_message=f"{self.robot_type} robot has no skill(s) {unknown}")
            return self._run(goal_handle, goal, skills)
        finally:
            self._queue.release(goal.request_id, goal.index)

    def _run(self, goal_handle, goal, skills) -> ExecuteSegment.Result:
        durations = [self.model.sample_time([s], self._rng) * self.time_scale for s in skills]
        self.get_logger().info(f"[{goal.request_id}] segment {goal.index}: {goal.text.strip()!r} "
                               f"({sum(durations):.2f} s)")
        start = time.monotonic()
        for i, (skill, dur) in enumerate(zip(skills, durations)):
            goal_handle.publish_feedback(ExecuteSegment.Feedback(
                skills_done=i, skills_total=len(skills), current_skill=skill.name,
                time_remaining=float(sum(durations[i:]))))
            if not self._sleep(goal_handle, dur):
                goal_handle.canceled()
                return R(success=False, error_code=R.CANCELLED, error_message="cancelled",
                         execution_time=time.monotonic() - start)
        goal_handle.succeed()
        return R(success=True, error_code=R.ERROR_NONE, execution_time=time.monotonic() - start)

    @staticmethod
    def _sleep(goal_handle, seconds: float) -> bool:
        """Sleep, checking for cancellation every 20 ms; False when cancelled."""
        end = time.monotonic() + seconds
        while True:
            if goal_handle.is_cancel_requested or not goal_handle.is_active:
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.02))

    def shutdown(self) -> None:
        self._action.destroy()


def main(args: list[str] | None = None) -> int:
    # segments queued at the robot each hold an executor thread
    return spin_node(RobotExecutorNode, 32, args)

if __name__ == "__main__":
    sys.exit(main())
