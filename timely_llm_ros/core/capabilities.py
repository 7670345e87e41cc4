"""What a robot's executor says it is and can do (its ExecutorStatus, as plain data), and the server's checks of a
goal and of a generated segment against it (ROS-free: ros/server/robot_directory.py converts the messages)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.request import SkillCall

PLAN_RULES = ("queue", "urgent_preempts")
DEFAULT_PLAN_RULE = "queue"


@dataclass(frozen=True)
class RobotStatus:
    """One executor's latest status: its robot type, the skills it has, whether it runs segments by their meaning
    (``interprets``: an executor of this package always does; one that does not would run every conditional's body
    and ignore query answers), its plan rule, and what it is doing."""

    robot_type: str
    skills: frozenset[str]
    interprets: bool = False
    plan_rule: str = DEFAULT_PLAN_RULE
    state: str = "idle"             # idle | busy | stopping
    request_id: str = ""            # the plan running now ("" when idle)
    segment_index: int = 0          # its segment running now
    segments_waiting: int = 0       # segments accepted behind it

    @property
    def busy(self) -> bool:
        return self.state == "busy"


def check_robot_type(agent: str, goal_robot_type: str, status: RobotStatus | None) -> None:
    """RequestError WRONG_ROBOT_TYPE when the agent's executor does not interpret plans (its status says so) or
    serves another robot type than the goal names (nothing to check without a status: a team's plain
    ExecuteSegment server publishes none)."""
    if status is None:
        return
    if not status.interprets:
        serves = f"robot type {status.robot_type!r}" if status.robot_type else "no robot type"
        raise RequestError(ErrorCode.WRONG_ROBOT_TYPE,
                           f"{agent}'s executor does not interpret plans (its executor_status says interprets: "
                           f"false, {serves}): it would run every conditional's body whatever its queries answer, so nothing is "
                           f"planned for it; start it with a robot type (-p robot_type:={goal_robot_type}) on this "
                           "package's executor base (ros/executor/base.py)")
    if status.robot_type != goal_robot_type:
        raise RequestError(ErrorCode.WRONG_ROBOT_TYPE,
                           f"{agent}'s executor serves robot type {status.robot_type!r}, but the goal's robot_type is "
                           f"{goal_robot_type!r}: send robot_type {status.robot_type!r} to {agent}, or the goal to an "
                           f"agent of type {goal_robot_type!r}")


def missing_skills(calls: Iterable[SkillCall], status: RobotStatus | None) -> list[str]:
    """The skills among ``calls`` the executor does not have, in order of first use ([] without a status)."""
    if status is None:
        return []
    missing: list[str] = []
    for call in calls:
        if call.name not in status.skills and call.name not in missing:
            missing.append(call.name)
    return missing


def unknown_skill_error(agent: str, index: int, missing: list[str], status: RobotStatus) -> RequestError:
    """UNKNOWN_SKILL naming the skills segment ``index`` calls that the agent's executor lacks."""
    names = ", ".join(repr(m) for m in missing)
    return RequestError(ErrorCode.UNKNOWN_SKILL,
                        f"segment {index} calls skill(s) {names}, which {agent}'s executor "
                        f"({status.robot_type or 'no robot type'}) does not have (it has: "
                        f"{', '.join(sorted(status.skills))}); nothing of it was sent: give the robot the skill, or "
                        "plan with a skill set that matches it (skills_dir)")
