"""Turn raw Plan goal fields into a PlanRequest, or a RequestError saying what is wrong and what to do."""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Mapping

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.request import MAX_PLAN_CALLS, PlanRequest
from timely_llm_ros.core.skills.context import (NO_LABELS, fixed_places, grounded_objects, hazard_sides, scene_objects,
                                                task_hazards)
from timely_llm_ros.core.tuf import TimeUtility

_AGENT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/")
# the agent's executor serves /<agent_id>/execute_segment, whose hidden action topics must stay within
# DDS's 256-character topic names with the longest prefix and suffix ROS adds
MAX_AGENT_CHARS = 100
MAX_OBJECTS = 256        # a goal's object list (each name becomes an alternative of its grammar)
MAX_OBJECT_CHARS = 100


def agent_problem(agent_id: str) -> str | None:
    """Why agent_id (leading/trailing '/' stripped) is not a valid ROS namespace, or None."""
    agent = agent_id.strip().strip("/")
    if not agent:
        return "is empty"
    if len(agent) > MAX_AGENT_CHARS:
        return f"is {len(agent)} characters, over the limit of {MAX_AGENT_CHARS}"
    if not set(agent) <= _AGENT_CHARS:
        return "may hold only letters, digits, '_' and '/'"
    for token in agent.split("/"):
        if not token:
            return "has an empty namespace token ('//')"
        if token[0].isdigit():
            return f"has a token starting with a digit ({token!r})"
    return None


def visible(text: str) -> bool:
    """True if text has at least one visible character (not whitespace, control or format, e.g. U+200B)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn")
               for ch in text)


@dataclass(frozen=True)
class GoalLimits:
    """Input bounds the server enforces (ROS parameters)."""

    max_task_chars: int = 2000
    max_context_chars: int = 8000
    max_new_tokens: int = 512
    max_plan_calls: int = MAX_PLAN_CALLS   # skill calls a plan may make with its loops unrolled


@dataclass(frozen=True)
class GoalFields:
    """The Plan goal as plain Python values."""

    agent_id: str
    robot_type: str
    task: str
    context: str = ""
    urgency_class: str = ""
    ert: float = 0.0
    alpha: float = 0.0
    beta: float = 0.0
    max_new_tokens: int = 0
    time_budget: float = 0.0    # s; 0 = none
    tpot_slo_ms: float = 0.0    # 0 = policy default
    ttft_slo_ms: float = 0.0    # 0 = none
    unconstrained: bool = False  # decode without the skill-set grammar even where the server applies one
    objects: tuple[str, ...] = ()  # the objects a plan may name (() = the ones the context lists, if any)


def validate_goal(goal: GoalFields, req_id: str, arrival: float, robot_types: Mapping[str, object],
                  urgency_classes: Mapping[str, TimeUtility], limits: GoalLimits = GoalLimits(),
                  grammar: bool = False) -> PlanRequest:
    """Check every field; raise RequestError(code, message) on the first problem. ``grammar``: the server
    constrains decoding to the skill-set grammar (its parameter ``grammar``); the request is constrained unless
    the goal says ``unconstrained``, and its object arguments take the goal's objects, else those its context lists
    (with the task's phrases: core/skills/context.py), else free strings."""
    agent = goal.agent_id.strip().strip("/")
    problem = agent_problem(goal.agent_id)
    if problem:
        shown = goal.agent_id if len(goal.agent_id) <= 60 else goal.agent_id[:60] + "..."
        raise RequestError(ErrorCode.UNKNOWN_AGENT,
                           f"agent_id {shown!r} {problem}: it must be a valid ROS namespace (e.g. 'drone_3')")
    if goal.robot_type not in robot_types:
        raise RequestError(ErrorCode.UNKNOWN_ROBOT_TYPE,
                           f"unknown robot_type {goal.robot_type!r}; known: {', '.join(sorted(robot_types))}")
    task = goal.task.strip()
    if not visible(task):
        raise RequestError(ErrorCode.INVALID_TASK, "task has no visible characters; say what the robot should do")
    if len(goal.task) > limits.max_task_chars:
        raise RequestError(ErrorCode.INVALID_TASK,
                           f"task is {len(goal.task)} characters, over the limit of {limits.max_task_chars}")
    if len(goal.context) > limits.max_context_chars:
        raise RequestError(ErrorCode.INVALID_TASK,
                           f"context is {len(goal.context)} characters, over the limit of {limits.max_context_chars}")
    if goal.max_new_tokens < 0 or goal.max_new_tokens > limits.max_new_tokens:
        raise RequestError(ErrorCode.INVALID_LIMITS,
                           f"max_new_tokens must be 0 (server default) .. {limits.max_new_tokens}, got {goal.max_new_tokens}")
    if len(goal.objects) > MAX_OBJECTS:
        raise RequestError(ErrorCode.INVALID_TASK, f"objects lists {len(goal.objects)} names, over the limit of "
                           f"{MAX_OBJECTS}: list the objects in the robot's scene, or none")
    bad = next((i for i, o in enumerate(goal.objects) if not visible(o) or len(o) > MAX_OBJECT_CHARS), None)
    if bad is not None:
        raise RequestError(ErrorCode.INVALID_TASK,
                           f"objects[{bad}] is {goal.objects[bad][:40]!r}{'...' if len(goal.objects[bad]) > 40 else ''}"
                           f": each object name must have 1..{MAX_OBJECT_CHARS} characters, a visible one among them")
    tuf = _time_requirement(goal, urgency_classes)
    for name in ("time_budget", "tpot_slo_ms", "ttft_slo_ms"):
        v = getattr(goal, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise RequestError(ErrorCode.INVALID_TIME_REQUIREMENT, f"{name} must be a finite number >= 0 "
                               f"(0 = not given), got {v!r}")
    labels = getattr(robot_types.get(goal.robot_type), "context_labels", NO_LABELS)   # its contexts' own labels
    objects = grounded_objects(goal.context, task, tuple(goal.objects), labels)
    hazards = task_hazards(task, objects)
    return PlanRequest(req_id=req_id, agent_id=agent, robot_type=goal.robot_type, task=task, tuf=tuf,
                       arrival=arrival, context=goal.context.strip(), urgency=goal.urgency_class,
                       max_new_tokens=goal.max_new_tokens, task_type=goal.urgency_class or "custom",
                       time_budget_s=goal.time_budget, tpot_slo_ms=goal.tpot_slo_ms, ttft_slo_ms=goal.ttft_slo_ms,
                       constrained=grammar and not goal.unconstrained, max_calls=limits.max_plan_calls,
                       objects=objects, hazards=hazards, hazard_sides=hazard_sides(goal.context, hazards, labels),
                       scene_objects=scene_objects(goal.context, tuple(goal.objects), labels) if objects else (),
                       fixed_places=fixed_places(goal.context, labels) if objects else ())


def _time_requirement(goal: GoalFields, classes: Mapping[str, TimeUtility]) -> TimeUtility:
    if goal.urgency_class:
        if goal.urgency_class not in classes:
            raise RequestError(ErrorCode.UNKNOWN_URGENCY_CLASS,
                               f"unknown urgency_class {goal.urgency_class!r}; known: {', '.join(sorted(classes))};"
                               " or leave it empty and set ert/alpha/beta")
        given = {n: v for n, v in (("ert", goal.ert), ("alpha", goal.alpha), ("beta", goal.beta)) if v != 0.0}
        if given:   # which one the client meant cannot be known (NaN is "given" too: NaN != 0)
            raise RequestError(ErrorCode.INVALID_TIME_REQUIREMENT,
                               f"urgency_class {goal.urgency_class!r} and {', '.join(f'{n}={v!r}' for n, v in given.items())}"
                               " both given: set urgency_class, or leave it empty and set ert/alpha/beta")
        return classes[goal.urgency_class]
    values = (goal.ert, goal.alpha, goal.beta)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise RequestError(ErrorCode.INVALID_TIME_REQUIREMENT, f"ert/alpha/beta must be finite numbers, got {values}")
    if goal.ert == 0.0 and goal.alpha == 0.0 and goal.beta == 0.0:
        if "normal" in classes:  # text-only urgency: the normal TUF; the semantic policy reads urgency from the text
            return classes["normal"]
        raise RequestError(ErrorCode.INVALID_TIME_REQUIREMENT,
                           "no time requirement: set urgency_class (e.g. 'normal') or ert/alpha/beta")
    return TimeUtility(goal.ert, goal.alpha, goal.beta)  # raises INVALID_TIME_REQUIREMENT with the reason
