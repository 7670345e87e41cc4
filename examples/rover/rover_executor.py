"""A ground rover's executor: the skills of skills/rover.yaml on a point rover that drives through a simulated room.

What a team writes for its own robot type (docs/robots.md walks through it): one ``@skill`` method per skill of its
skill set, moves in small time steps so a cancel stops the rover between two steps, queries (``sees``, ``dist``)
answered by its camera -- here a simulated scene (parameter ``scene``, timely_llm_ros/evaluation/scene.py) seen from the
rover's pose --, and ``halt()``. The base class parses each segment with the skill set and runs it by its meaning
(conditionals, loops, variables, returns), so the same plan takes different branches in different rooms.

    python examples/rover/rover_executor.py --ros-args -r __ns:=/rover_1 -p skills_dir:=examples/rover \\
        -p scene:=examples/rover/scenes/lounge_cat.yaml
"""
from __future__ import annotations

import math
import sys
import threading

from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor

from timely_llm_ros.evaluation.scene import SCAN_STEP_DEG, SCAN_STEPS, load_scene
from timely_llm_ros.ros.executor import SkillContext, SkillExecutorNode, SkillFailed, run_executor, skill

STEP_S = 0.02   # a move or turn advances the pose this often (and checks for a cancel)


class RoverExecutor(SkillExecutorNode):
    """forward/backward (cm) at ``speed_mps``, turn_left/turn_right (degrees) at ``turn_rate_dps``; look turns 45
    degrees at a time until the object is in view; go drives to an object; sees/dist: what the camera sees of the
    scene from the current pose; photo logs what is in view."""

    ROBOT_TYPE = "rover"    # its skill set: <skills_dir>/skills/rover.yaml

    def __init__(self, **kwargs) -> None:
        super().__init__("executor", **kwargs)
        positive = [FloatingPointRange(from_value=0.01, to_value=100.0, step=0.0)]
        self.speed = self.declare_parameter("speed_mps", 0.25, ParameterDescriptor(
            description="driving speed (m/s)", floating_point_range=positive, read_only=True)).value
        self.turn_rate = self.declare_parameter("turn_rate_dps", 90.0, ParameterDescriptor(
            description="turning rate (degrees/s)", floating_point_range=[FloatingPointRange(
                from_value=1.0, to_value=10000.0, step=0.0)], read_only=True)).value
        self.scene = load_scene(self.declare_parameter("scene", "", ParameterDescriptor(
            description="the room the camera sees: a YAML file, a name in config/scenes, or inline YAML; empty: an "
                        "empty room", read_only=True)).value)
        self._lock = threading.Lock()    # the pose: skills move it, queries read it

    # ---- moves and turns
    @skill("forward", estimate="drive_time")
    def forward(self, ctx: SkillContext, cm: float) -> None:
        self._drive(ctx, float(cm))

    @skill("backward", estimate="drive_time")
    def backward(self, ctx: SkillContext, cm: float) -> None:
        self._drive(ctx, -float(cm))

    @skill("turn_left", estimate="turn_time")
    def turn_left(self, ctx: SkillContext, degrees: float) -> None:
        self._turn(ctx, float(degrees))

    @skill("turn_right", estimate="turn_time")
    def turn_right(self, ctx: SkillContext, degrees: float) -> None:
        self._turn(ctx, -float(degrees))

    # ---- actions on objects
    @skill("look")
    def look(self, ctx: SkillContext, name: str) -> None:
        """Turn left 45 degrees at a time until the object is in view, a full turn at most (not finding it is no
        failure: the plan asks sees() next)."""
        for _ in range(SCAN_STEPS):
            if self._ask(self.scene.visible, name):
                return
            self._turn(ctx, SCAN_STEP_DEG)

    @skill("go")
    def go(self, ctx: SkillContext, name: str) -> None:
        """Face the object, then drive until half a metre in front of it."""
        with self._lock:
            way = self.scene.approach(name)
        if way is None:
            raise SkillFailed(f"go({name!r}): there is no {name!r} in this room")
        forward_m, bearing = way
        self._turn(ctx, bearing)
        self._drive(ctx, 100.0 * forward_m)

    @skill("photo")
    def photo(self, ctx: SkillContext) -> None:
        with self._lock:
            pose, seen = self.scene.pose, sorted(n for n in self.scene.objects if self.scene.visible(n))
            where = f"x={pose.x:.2f} y={pose.y:.2f} yaw={pose.yaw:.0f}"
        ctx.logger.info(f"photo at {where}: {', '.join(seen) or 'nothing'}")

    # ---- queries: what the camera sees from here
    @skill("sees", returns=bool)
    def sees(self, ctx: SkillContext, name: str) -> bool:
        return self._ask(self.scene.visible, name)

    @skill("dist", returns=float)
    def dist(self, ctx: SkillContext, name: str) -> float:
        if not self._ask(self.scene.visible, name):
            raise SkillFailed(f"dist({name!r}): {name!r} is not in view (look for it first, or check sees({name!r}))")
        return self._ask(self.scene.distance_cm, name)

    def halt(self) -> None:
        """A real rover would command zero wheel speed here; the point rover stops between two steps anyway."""
        self.get_logger().info("halt: wheels stopped")

    # ---- estimates for progress feedback (the server's come from exec_time/rover.yaml)
    def drive_time(self, args: tuple) -> float:
        return abs(float(args[0])) / 100.0 / self.speed

    def turn_time(self, args: tuple) -> float:
        return abs(float(args[0])) / self.turn_rate

    # ---- motion in steps of STEP_S; ctx.sleep raises SkillCancelled when the segment is cancelled
    def _drive(self, ctx: SkillContext, cm: float) -> None:
        metres = cm / 100.0
        steps = max(1, math.ceil(abs(metres) / self.speed / STEP_S))
        for _ in range(steps):
            ctx.sleep(abs(metres) / self.speed / steps)
            with self._lock:
                self.scene.move(metres / steps)

    def _turn(self, ctx: SkillContext, degrees_left: float) -> None:
        steps = max(1, math.ceil(abs(degrees_left) / self.turn_rate / STEP_S))
        for _ in range(steps):
            ctx.sleep(abs(degrees_left) / self.turn_rate / steps)
            with self._lock:
                self.scene.turn(degrees_left / steps)

    def _ask(self, query, arg):
        with self._lock:
            return query(arg)


if __name__ == "__main__":
    sys.exit(run_executor(RoverExecutor))
