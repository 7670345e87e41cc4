"""Example driver: a point drone whose skills move a kinematic state (x, y, z, yaw) published on ``robot_state``.

What a real drone driver looks like with the executor API: one ``@skill`` method per MiniSpec skill, moving
in small time steps so that a cancel stops it between two steps, and ``halt()`` to stop. Run it with
``python -m timely_llm_ros.ros.executor.kinematic --ros-args -r __ns:=/drone_1``.
"""
from __future__ import annotations

import math
import sys
import threading

from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from rclpy.qos import DurabilityPolicy, QoSProfile

from timely_llm_ros.msg import RobotState

from .base import SkillExecutorNode
from .run import run_executor
from .skills import SkillContext, skill

_STEP_S = 0.02


class KinematicDroneExecutor(SkillExecutorNode):
    """mf/mb/ml/mr/mu/md (cm), tc/tu (degrees), d (s): moves at speed_mps / turns at turn_rate_dps."""

    def __init__(self, **kwargs) -> None:
        super().__init__("executor", **kwargs)
        positive = [FloatingPointRange(from_value=0.001, to_value=1000.0, step=0.0)]
        self.speed = self.declare_parameter("speed_mps", 1.0, ParameterDescriptor(
            description="linear speed (m/s)", floating_point_range=positive, read_only=True)).value
        self.turn_rate = self.declare_parameter("turn_rate_dps", 90.0, ParameterDescriptor(
            description="turn rate (degrees/s)", floating_point_range=positive, read_only=True)).value
        self.x = self.y = self.z = self.yaw = 0.0
        self._skill = ""
        self._state_lock = threading.Lock()
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._pub = self.create_publisher(RobotState, "robot_state", latched)
        self._publish()

    # ---- skills: a move of `cm` centimetres along a heading relative to the robot's yaw
    @skill("mf", estimate="move_time")
    def move_forward(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, 0.0)

    @skill("mb", estimate="move_time")
    def move_backward(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, 180.0)

    @skill("ml", estimate="move_time")
    def move_left(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, 90.0)

    @skill("mr", estimate="move_time")
    def move_right(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, -90.0)

    @skill("mu", estimate="move_time")
    def move_up(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, None, vertical=1.0)

    @skill("md", estimate="move_time")
    def move_down(self, ctx: SkillContext, cm: float) -> None:
        self._move(ctx, cm, None, vertical=-1.0)

    @skill("tc", estimate="turn_time")
    def turn_cw(self, ctx: SkillContext, degrees: float) -> None:
        self._turn(ctx, -float(degrees))

    @skill("tu", estimate="turn_time")
    def turn_ccw(self, ctx: SkillContext, degrees: float) -> None:
        self._turn(ctx, float(degrees))

    @skill("d", estimate=lambda a: float(a[0]) if a else 0.0)
    def delay(self, ctx: SkillContext, seconds: float) -> None:
        ctx.sleep(float(seconds))

    def halt(self) -> None:
        """A real drone would command a hover here (also called after each move); the point drone stops."""
        with self._state_lock:
            self._skill = ""
        self._publish()

    def move_time(self, args: tuple) -> float:
        return abs(float(args[0])) / 100.0 / self.speed

    def turn_time(self, args: tuple) -> float:
        return abs(float(args[0])) / self.turn_rate

    # ---- motion in steps of _STEP_S, publishing the state; ctx.sleep raises when cancelled
    def _move(self, ctx: SkillContext, cm: float, heading: float | None, vertical: float = 0.0) -> None:
        metres = float(cm) / 100.0
        steps = max(1, math.ceil(abs(metres) / self.speed / _STEP_S))
        for _ in range(steps):
            ctx.sleep(abs(metres) / self.speed / steps)
            with self._state_lock:
                self._skill = ctx.name
                if heading is None:
                    self.z += vertical * metres / steps
                else:
                    a = math.radians(self.yaw + heading)
                    self.x += math.cos(a) * metres / steps
                    self.y += math.sin(a) * metres / steps
            self._publish()
        self.halt()

    def _turn(self, ctx: SkillContext, degrees: float) -> None:
        steps = max(1, math.ceil(abs(degrees) / self.turn_rate / _STEP_S))
        for _ in range(steps):
            ctx.sleep(abs(degrees) / self.turn_rate / steps)
            with self._state_lock:
                self._skill = ctx.name
                self.yaw = (self.yaw + degrees / steps + 180.0) % 360.0 - 180.0
            self._publish()
        self.halt()

    def _publish(self) -> None:
        with self._state_lock:
            msg = RobotState(x=self.x, y=self.y, z=self.z, yaw=self.yaw, current_skill=self._skill)
        msg.stamp = self.get_clock().now().to_msg()
        self._pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    return run_executor(KinematicDroneExecutor, args)


if __name__ == "__main__":
    sys.exit(main())
