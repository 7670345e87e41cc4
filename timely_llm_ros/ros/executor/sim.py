"""The simulated robot: every skill of its execution-time profile (config/exec_time, or a team's skills_dir) sleeps
a sampled time, then acts on a simulated scene (``scene``: evaluation/scene.py; queries answer from it, moves and turns
change what is in view, so the same plan takes different branches in different scenes, and a skill the robot could
not do there fails its segment); faults on request.

``scene`` may be set again between plans (``ros2 param set``, or fleet_workload before each task with a goal
condition: the scene its context describes); a set while a segment is open is refused.

Fault injection (for the stress suite; all 0 by default): ``abort_probability`` (the segment's first skill
fails half-way), ``hang_probability`` (the segment never finishes on its own; cancel still stops it),
``overrun_s`` (seconds added to each segment), ``time_scale`` (multiplies every execution time).
"""
from __future__ import annotations

import random

from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor, SetParametersResult

from timely_llm_ros.core.exec_time import ExecTimeModel
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.robot_types import load_robot_types
from timely_llm_ros.evaluation.scene import load_scene
from timely_llm_ros.evaluation.scene_skills import act
from timely_llm_ros.ros.executor.base import SkillExecutorNode
from timely_llm_ros.ros.executor.skills import SkillContext, SkillFailed


def _probability(description: str) -> ParameterDescriptor:
    return ParameterDescriptor(description=description, read_only=True, floating_point_range=[
        FloatingPointRange(from_value=0.0, to_value=1.0, step=0.0)])


class SimulatedExecutorNode(SkillExecutorNode):
    """A robot whose skills take the time its profile (config/exec_time/<profile>.yaml) samples and act on a scene."""

    ROBOT_TYPE = "drone"

    def __init__(self, **kwargs) -> None:
        super().__init__("executor", **kwargs)
        self.scene = load_scene(self.declare_parameter("scene", "", ParameterDescriptor(
            description="simulated scene: a YAML file, a name in config/scenes, or inline YAML; empty: an empty "
                        "room (nothing in view); may be set again while no segment is open")).value)
        self.add_on_set_parameters_callback(self._on_set_scene)
        self.time_scale = self.declare_parameter(
            "time_scale", 1.0, ParameterDescriptor(description="multiplies every execution time (demos, tests)",
                                                   floating_point_range=[FloatingPointRange(
                                                       from_value=0.0, to_value=100.0, step=0.0)])).value
        seed = self.declare_parameter("seed", 0, ParameterDescriptor(description="execution-time sampling seed")).value
        self.abort_probability = self.declare_parameter(
            "abort_probability", 0.0, _probability("fault injection: chance that a segment fails (FAILED)")).value
        self.hang_probability = self.declare_parameter(
            "hang_probability", 0.0, _probability("fault injection: chance that a segment never finishes")).value
        self.overrun_s = self.declare_parameter("overrun_s", 0.0, ParameterDescriptor(
            description="fault injection: seconds added to every segment's execution", read_only=True,
            floating_point_range=[FloatingPointRange(from_value=0.0, to_value=3600.0, step=0.0)])).value
        self.model = self._profile()
        self._rng = random.Random(f"{self.get_namespace()}:{seed}")
        self._fault: str | None = None
        for name in self.model.skills:
            self.register_skill(name, self._simulated,
                                estimate=lambda args, n=name: self.model.skill_min(SkillCall(n, tuple(args)))
                                * self.time_scale)

    def _profile(self) -> ExecTimeModel:
        """The execution-time profile of this robot type's skill set (the package's or skills_dir's)."""
        profile = self.skill_set.exec_profile
        models = load_robot_types(self.skills_dir or None).exec_models
        if profile not in models:
            raise FileNotFoundError(f"no execution-time profile {profile!r} for robot_type {self.robot_type!r} "
                                    f"(profiles: {', '.join(sorted(models))}); add exec_time/{profile}.yaml to "
                                    "skills_dir")
        return models[profile]

    def _on_set_scene(self, params) -> SetParametersResult:
        """A new scene replaces the current one between plans; a bad one, or one set mid-plan, is refused."""
        for param in params:
            if param.name != "scene":
                continue
            if not self.idle():
                return SetParametersResult(successful=False, reason="the robot has a segment open: set its scene "
                                                                    "between plans")
            try:
                scene = load_scene(str(param.value))
            except (ValueError, FileNotFoundError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            self.scene = scene
            self.get_logger().info(f"scene set: {scene.name!r} ({len(scene.objects)} objects)")
        return SetParametersResult(successful=True)

    def on_segment_start(self, request_id: str, index: int, calls: list[SkillCall]) -> None:
        u = self._rng.random()
        self._fault = "abort" if u < self.abort_probability else \
            "hang" if u < self.abort_probability + self.hang_probability else "overrun"

    def _simulated(self, ctx: SkillContext, *args):
        """Sleep the sampled time, then act on the scene; a query returns what the scene answers."""
        call = SkillCall(ctx.name, args)
        seconds = self.model.sample_time([call], self._rng) * self.time_scale
        fault, self._fault = self._fault, None  # only the segment's first skill carries the fault
        if fault == "hang":
            ctx.sleep(float("inf"))
        if fault == "abort":
            ctx.sleep(seconds / 2)
            raise SkillFailed(f"injected fault (abort_probability {self.abort_probability})")
        ctx.sleep(seconds + (self.overrun_s if fault == "overrun" else 0.0))
        return act(self.scene, self.robot_type, call)

    def ready_message(self) -> str:
        return (f"executor ready: {self.get_namespace().rstrip('/')}/execute_segment "
                f"robot_type={self.robot_type} time_scale={self.time_scale} scene={self.scene.name!r}")
