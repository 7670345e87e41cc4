"""Conversions between the core's dataclasses and the generated ROS messages (no logic here)."""
from __future__ import annotations

import math

from timely_llm_ros.action import ExecuteSegment, Plan
from timely_llm_ros.msg import PlanSegment, Skill

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.request import Segment, SkillCall
from timely_llm_ros.core.scheduler import RequestOutcome
from timely_llm_ros.core.validation import GoalFields


_X = ExecuteSegment.Result
# What a segment's ExecuteSegment result code makes of its plan (docs/server.md has this table). NOT_RUN: an
# earlier segment of the plan ended first and its own code decides; a NOT_RUN alone reads as EXECUTION_FAILED.
EXECUTION_TO_PLAN_CODE: dict[int, ErrorCode] = {
    _X.ERROR_NONE: ErrorCode.NONE,
    _X.UNKNOWN_SKILL: ErrorCode.UNKNOWN_SKILL,
    _X.BUSY: ErrorCode.EXECUTOR_UNAVAILABLE,
    _X.CANCELLED: ErrorCode.EXECUTION_FAILED,     # cancelled at the robot (the server's own cancels end the plan first)
    _X.FAILED: ErrorCode.EXECUTION_FAILED,
    _X.NOT_RUN: ErrorCode.EXECUTION_FAILED,
    _X.PREEMPTED: ErrorCode.PREEMPTED,
}


def plan_error_code(execution_code: int) -> ErrorCode:
    """The Plan error code for a segment that ended with this ExecuteSegment code (an unknown code: failed)."""
    return EXECUTION_TO_PLAN_CODE.get(int(execution_code), ErrorCode.EXECUTION_FAILED)


def skill_to_msg(call: SkillCall) -> Skill:
    return Skill(name=call.name, args=[a if isinstance(a, str) else repr(a) for a in call.args])


def skill_from_msg(msg: Skill) -> SkillCall:
    return SkillCall(msg.name, tuple(_literal(a) for a in msg.args))


def _literal(text: str):
    """Arguments travel as text; numbers come back as numbers."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def segment_to_msg(seg: Segment) -> PlanSegment:
    exec_s = seg.exec_s
    return PlanSegment(index=seg.index, text=seg.text, skills=[skill_to_msg(c) for c in seg.skills],
                       estimated_exec_time=float(seg.est_exec_s),
                       exec_time=float(exec_s) if exec_s is not None else -1.0,
                       executed=bool(seg.ok), executed_skills=[skill_to_msg(c) for c in seg.executed_skills])


def goal_fields(goal: Plan.Goal) -> GoalFields:
    return GoalFields(agent_id=goal.agent_id, robot_type=goal.robot_type, task=goal.task, context=goal.context,
                      urgency_class=goal.urgency_class, ert=goal.ert, alpha=goal.alpha, beta=goal.beta,
                      max_new_tokens=goal.max_new_tokens, time_budget=goal.time_budget,
                      tpot_slo_ms=goal.tpot_slo_ms, ttft_slo_ms=goal.ttft_slo_ms, unconstrained=goal.unconstrained,
                      objects=tuple(goal.objects))


def execute_goal(req_id: str, seg: Segment, preempts: bool = False) -> ExecuteSegment.Goal:
    return ExecuteSegment.Goal(request_id=req_id, index=seg.index, text=seg.text,
                               skills=[skill_to_msg(c) for c in seg.skills], expected_duration=float(seg.est_exec_s),
                               preempts=preempts)


def _finite(x: float) -> float:
    return float(x) if x is not None and math.isfinite(x) else -1.0


def outcome_to_result(req_id: str, outcome: RequestOutcome) -> Plan.Result:
    return Plan.Result(error_code=int(outcome.error_code), error_message=outcome.message, request_id=req_id,
                       plan=outcome.plan_text, segments=[segment_to_msg(s) for s in outcome.segments],
                       response_time=_finite(outcome.response_time), waiting_time=_finite(outcome.waiting_time),
                       completion_time=_finite(outcome.completion_time), utility=float(outcome.utility),
                       segment_utility=float(outcome.total_utility),
                       tokens_generated=outcome.tokens, returned=outcome.returned,
                       return_value=outcome.return_value)


def error_result(req_id: str, code: int, message: str) -> Plan.Result:
    return Plan.Result(error_code=int(code), error_message=message, request_id=req_id,
                       response_time=-1.0, waiting_time=-1.0, completion_time=-1.0)
