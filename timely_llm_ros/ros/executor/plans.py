"""The robot's side of plan semantics, without ROS types: the robot type's language and each plan's state.

A segment's text is parsed with the skill set of the executor's robot type (config/skills/<type>.yaml, read through
``skill_set_for``), the same parser the planner server segments with; the interpreter (core/skills/interpreter.py)
runs it. A plan's variables live from its first segment until it returns, fails, is cancelled or preempted, or a
segment of another plan starts on this robot (which plans returned, and at which segment, is the robot's queue's:
core/execution/robot_queue.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.robot_types import load_robot_types
from timely_llm_ros.core.skills import SkillSet, load_skill_sets
from timely_llm_ros.core.skills.interpreter import PlanState
from timely_llm_ros.core.skills.minispec import call_problems, parse
from timely_llm_ros.core.skills.program import Statement


def skill_set_for(robot_type: str, skills_dir: str | Path | None = None) -> SkillSet:
    """The skill set the executor runs plans in: ``robot_type``'s (config/skills, or a team's ``skills_dir``:
    core/robot_types.py), or, with no robot type, the one skill set ``skills_dir`` defines. An executor needs one: it
    runs each segment by its meaning (without, every conditional body would run and no query would be answered).
    ValueError says what to set, naming the known types."""
    types = load_robot_types(skills_dir)
    sets = types.skill_sets
    if not robot_type:
        own = _own_skill_sets(skills_dir)
        if len(own) == 1:
            return sets[own[0]]
        raise ValueError("an executor needs a robot type: the skill set whose plans it runs by their meaning "
                         f"(known: {', '.join(sorted(sets))}); set -p robot_type:=<one of them> (a subclass: "
                         "ROBOT_TYPE), or -p skills_dir:=<a folder whose skills/ holds one <type>.yaml>"
                         + (f" ({skills_dir} defines {', '.join(own)}: name one)" if own else ""))
    if robot_type not in sets:
        raise ValueError(f"robot_type {robot_type!r} has no skill set; known: {', '.join(sorted(sets))} "
                         "(set -p robot_type:=<one of them>, or put <type>.yaml in <skills_dir>/skills and set "
                         "-p skills_dir:=<that folder>)")
    return sets[robot_type]


def _own_skill_sets(skills_dir: str | Path | None) -> list[str]:
    """The skill sets a team's skills_dir defines (by name)."""
    if not skills_dir:
        return []
    folder = Path(skills_dir).expanduser() / "skills"
    return sorted(load_skill_sets(folder)) if any(folder.glob("*.yaml")) else []


@dataclass
class SegmentProgram:
    """What one goal asks the robot to run."""

    program: list[Statement]    # the statements (for a goal without text: its skill list as call statements)
    calls: list[SkillCall]      # every call it can make, worst case (progress total, the capability check)
    problem: str = ""           # why the text does not parse ("" when it does)


def segment_program(skill_set: SkillSet, text: str, sent_calls: Sequence[SkillCall]) -> SegmentProgram:
    """Parse a segment's text with the robot's language; a goal without text (an old client) or a prose skill set
    (chat: its segments are replies, each one call of its say skill) runs the goal's skill list."""
    if skill_set.mode != "statements" or not text.strip():
        # a skill list is checked as its calls' text would be (arity, argument kinds): a wrong one is refused, not
        # handed to a skill function; one the language lacks is the executor's to name (UNKNOWN_SKILL)
        problems = [p for k, call in enumerate(sent_calls, 1) if call.name in skill_set.skills
                    for p in call_problems(call, skill_set.skills, f"in skill {k} of the goal's list")]
        return SegmentProgram(list(sent_calls), list(sent_calls), "; ".join(problems))
    result = parse(text, skill_set.skills, skill_set.statement_forms)
    return SegmentProgram(result.program, result.skills, "; ".join(result.problems))


def declared_returns(skill_set: SkillSet | None, implemented: Mapping[str, str]) -> dict[str, str]:
    """The kind of value each query gives: the skill set's ``returns``, else what the executor's ``@skill`` says."""
    kinds = dict(implemented)
    if skill_set is not None:
        kinds.update({name: spec.returns for name, spec in skill_set.skills.items() if spec.returns})
    return kinds


def returns_conflicts(skill_set: SkillSet | None, implemented: Mapping[str, str]) -> list[str]:
    """Skills whose ``@skill(returns=...)`` disagrees with the skill set's ``returns`` (each as a sentence)."""
    if skill_set is None:
        return []
    return [f"skill {name!r} returns {kind} in this executor but {skill_set.skills[name].returns} in the "
            f"{skill_set.name} skill set" for name, kind in sorted(implemented.items())
            if name in skill_set.skills and skill_set.skills[name].returns not in (None, kind)]


class PlanStates:
    """Plan-scoped variables on one robot (not thread-safe: the executor holds its lock)."""

    def __init__(self) -> None:
        self._current: tuple[str, PlanState] | None = None

    def state(self, request_id: str) -> PlanState:
        """The state of this plan, for a segment of it that starts now; another plan's state is released."""
        if self._current is None or self._current[0] != request_id:
            self._current = (request_id, PlanState())
        return self._current[1]

    def release(self, request_id: str) -> None:
        """The plan ended (returned, failed, cancelled, refused, preempted): its variables go."""
        if self._current is not None and self._current[0] == request_id:
            self._current = None
