"""Example driver: a point drone whose skills move a kinematic state (x, y, z, yaw) published on ``robot_state``.

What a real drone driver looks like with the executor API: one ``@skill`` method per MiniSpec skill, moving
in small time steps so that a cancel stops it between two steps, ``@skill(..., returns=...)`` queries answered by
its camera -- here a simulated scene (parameter ``scene``, evaluation/scene.py) seen from the drone's pose --, and
``halt()`` to stop. Run it with ``python -m timely_llm_ros.ros.executor.kinematic --ros-args -r __ns:=/drone_1``.
"""
from __future__ import annotations

import math
import sys
import threading

from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from rclpy.qos import DurabilityPolicy, QoSProfile

from timely_llm_ros.msg import RobotState

from timely_llm_ros.evaluation.scene import SCAN_STEP_DEG, SCAN_STEPS, load_scene
from timely_llm_ros.ros.executor.base import SkillExecutorNode
from timely_llm_ros.ros.executor.run import run_executor
from timely_llm_ros.ros.executor.skills import SkillContext, skill

_STEP_S = 0.02


class KinematicDroneExecutor(SkillExecutorNode):
    """mf/mb/ml/mr/mu/md (cm), tc/tu (degrees), d (s), g goto, s scan: moves at speed_mps / turns at turn_rate_dps;
    iv/ox/oy/ow/oh/od/p: what the camera sees of the scene from the current pose; tp, l: logged."""

    ROBOT_TYPE = "drone"

    def __init__(self, **kwargs) -> None:
        super().__init__("executor", **kwargs)
        positive = [FloatingPointRange(from_value=0.001, to_value=1000.0, step=0.0)]
        self.speed = self.declare_parameter("speed_mps", 1.0, ParameterDescriptor(
            description="linear speed (m/s)", floating_point_range=positive, read_only=True)).value
        self.turn_rate = self.declare_parameter("turn_rate_dps", 90.0, ParameterDescriptor(
            description="turn rate (degrees/s)", floating_point_range=positive, read_only=True)).value
        self.scene = load_scene(self.declare_parameter("scene", "", ParameterDescriptor(
            description="what the camera sees: a YAML file, a name in config/scenes, or inline YAML; empty: an "
                        "empty room", read_only=True)).value)
        self.pose = self.scene.pose   # moved by the skills below, published on robot_state
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

    @skill("g")
    def goto(self, ctx: SkillContext, name: str) -> None:
        """Face the object and fly up to half a metre in front of it (an object the scene lacks: stay)."""
        with self._state_lock:
            way = self.scene.approach(name)
        if way is not None:
            self._turn(ctx, way[1])
            self._move(ctx, 100.0 * way[0], 0.0)

    @skill("s")
    def scan(self, ctx: SkillContext, name: str) -> None:
        """Turn 45 degrees at a time, up to a full turn, until the object is in view."""
        for _ in range(SCAN_STEPS):
            if self._query(self.scene.visible, name):
                return
            self._turn(ctx, SCAN_STEP_DEG)

    @skill("tp")
    def take_picture(self, ctx: SkillContext) -> None:
        ctx.logger.info(f"picture at {self.pose}")

    @skill("l")
    def log(self, ctx: SkillContext, text: str) -> None:
        ctx.logger.info(f"plan log: {text}")

    # ---- queries: what the camera sees from here
    @skill("iv", returns=bool)
    def is_visible(self, ctx: SkillContext, name: str) -> bool:
        return self._query(self.scene.visible, name)

    @skill("ox", returns=float)
    def object_x(self, ctx: SkillContext, name: str) -> float:
        return self._query(self.scene.image_x, name)

    @skill("oy", returns=float)
    def object_y(self, ctx: SkillContext, name: str) -> float:
        return self._query(self.scene.image_y, name)

    @skill("ow", returns=float)
    def object_width(self, ctx: SkillContext, name: str) -> float:
        return self._query(self.scene.width, name)

    @skill("oh", returns=float)
    def object_height(self, ctx: SkillContext, name: str) -> float:
        return self._query(self.scene.height, name)

    @skill("od", returns=float)
    def object_distance(self, ctx: SkillContext, name: str) -> float:
        return self._query(self.scene.distance_cm, name)

    @skill("p", returns=str)
    def probe(self, ctx: SkillContext, question: str) -> str:
        return self._query(self.scene.probe, question)

    def _query(self, ask, arg):
        with self._state_lock:
            return ask(arg)

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
                    self.pose.z += vertical * metres / steps
                else:
                    a = math.radians(self.pose.yaw + heading)
                    self.pose.x += math.cos(a) * metres / steps
                    self.pose.y += math.sin(a) * metres / steps
            self._publish()
        self.halt()

    def _turn(self, ctx: SkillContext, degrees: float) -> None:
        steps = max(1, math.ceil(abs(degrees) / self.turn_rate / _STEP_S))
        for _ in range(steps):
            ctx.sleep(abs(degrees) / self.turn_rate / steps)
            with self._state_lock:
                self._skill = ctx.name
                self.scene.turn(degrees / steps)
            self._publish()
        self.halt()

    def _publish(self) -> None:
        with self._state_lock:
            p = self.pose
            msg = RobotState(x=p.x, y=p.y, z=p.z, yaw=p.yaw, current_skill=self._skill)
        msg.stamp = self.get_clock().now().to_msg()
        self._pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    return run_executor(KinematicDroneExecutor, args)


if __name__ == "__main__":
    sys.exit(main())
