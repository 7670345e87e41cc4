"""Whether each plan of a fleet run achieved its task, judged in the scene its robot ran it in.

Before a task that carries a goal condition (``goal:`` in the tasks file, the form of config/eval:
evaluation/goals.py), fleet_workload builds the scene the task's context describes (evaluation/scene_builder.py,
the condition's first variant: its targets there) and sets it as the robot's simulated scene (parameter ``scene`` of
``<agent>/executor``, which the simulated executor takes between plans). After the plan's result it replays the
skills the robot reports it ran on that scene and judges the goal on it, with the value the robot returned: the
outcome table's "achieved" column. Contexts are read with their robot type's own labels (``place_labels``,
``fixed_place_labels`` of its skill set), as the server's grounded decoding reads them. A robot without a settable
scene (a real or kinematic executor) is not staged and its plans are not judged ("?").
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping

import yaml
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node

from timely_llm_ros.core.skills.context import NO_LABELS, ContextLabels, parse_context
from timely_llm_ros.evaluation.goal_checks import judge_robot_run
from timely_llm_ros.evaluation.goals import GoalCondition, Variant, read_goal
from timely_llm_ros.evaluation.scene import Scene
from timely_llm_ros.evaluation.scene_builder import variant_scene
from timely_llm_ros.ros.conversions import skill_from_msg

SERVICE_WAIT_S = 10.0   # the clients exist from the node's start: discovery has had the server's start-up to finish
SET_TIMEOUT_S = 5.0
NOT_JUDGED = "?"      # the achieved column when the robot's scene could not be set
NO_GOAL = "-"         # ... for a task without a goal condition


@dataclass(frozen=True)
class StagedTask:
    """A task's goal and the scene its robot was given for it."""

    robot_type: str
    goal: GoalCondition
    variant: Variant
    scene: Scene

    @classmethod
    def build(cls, robot_type: str, task: dict, labels: ContextLabels = NO_LABELS) -> "StagedTask":
        """The scene of a task entry (task, context, goal), its context read with ``labels``; ValueError names what
        is wrong with its goal."""
        goal = read_goal(task["goal"])
        context = task.get("context", "")
        variant = goal.variants(parse_context(context, labels).objects)[0]
        return cls(robot_type, goal, variant, variant_scene(robot_type, context, goal, variant, labels))

    def judge(self, result, error: str = "") -> str:
        """'yes', or 'no: why', for a Plan result (its segments' executed skills and returned value)."""
        calls = [skill_from_msg(m) for seg in result.segments for m in seg.executed_skills]
        value = result.return_value if result.returned else None
        verdict = judge_robot_run(self.goal, self.variant, self.scene, self.robot_type, calls, value, error)
        return "yes" if verdict.achieved else f"no: {verdict.why}"


class SceneStager:
    """Sets each agent's simulated scene before a task with a goal (one SetParameters client per agent, made at once
    so that discovery runs while the fleet starts). ``labels``: each robot type's context labels (its skill set's
    ``context_labels``; a type not in it reads the standard ones)."""

    def __init__(self, node: Node, agents: list[str], labels: Mapping[str, ContextLabels] | None = None) -> None:
        self._node = node
        self._labels = dict(labels or {})
        self._clients = {a: node.create_client(SetParameters, f"{a}/executor/set_parameters") for a in agents}
        self._unavailable: set[str] = set()

    def stage(self, agent: str, robot_type: str, task: dict, wait,
              stopping: Callable[[], bool] = lambda: False) -> StagedTask | None:
        """Build the task's scene and set it on the agent's executor; None (with a warning) when the task has no
        goal, its goal is malformed, or the robot takes no scene, and None at once when ``stopping()`` turns true
        while the executor's service is awaited. ``wait(future, timeout)`` blocks on a future."""
        if "goal" not in task or agent in self._unavailable:
            return None
        log = self._node.get_logger()
        try:
            staged = StagedTask.build(robot_type, task, self._labels.get(robot_type, NO_LABELS))
        except (ValueError, KeyError) as exc:
            log.warning(f"{agent}: task {task.get('task')!r}: goal not judged: {exc}")
            return None
        client = self._clients[agent]
        start = time.monotonic()
        said = False
        while not client.wait_for_service(timeout_sec=0.1):
            if stopping():
                return None
            waited = time.monotonic() - start
            if waited > 1.0 and not said:
                log.info(f"{agent}: waiting up to {SERVICE_WAIT_S:g} s for {agent}/executor/set_parameters to set "
                         "the scene of its task")
                said = True
            if waited < SERVICE_WAIT_S:
                continue
            self._unavailable.add(agent)
            log.warning(f"{agent}: no {agent}/executor/set_parameters service: its scene cannot be set, so its plans "
                        "are not judged")
            return None
        text = yaml.safe_dump(staged.scene.to_config(), default_flow_style=True, width=100000)
        value = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=text)
        response = wait(client.call_async(SetParameters.Request(parameters=[Parameter(name="scene", value=value)])),
                        SET_TIMEOUT_S)
        if response is None or not response.results or not response.results[0].successful:
            reason = "no answer" if response is None or not response.results else response.results[0].reason
            log.warning(f"{agent}: its scene was not set ({reason}): this plan is not judged")
            return None
        return staged
