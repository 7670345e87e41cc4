"""A whole plan run on a simulated scene without ROS, as the fleet would: cut into segments as the planner server
cuts it (the skill set's segmenter, trailing statements without an action as the last segment) and each segment
run by the robot's interpreter on one plan state, its skills answered by the scene (evaluation/scene_skills.py).

``tools/plan_branches.py`` tabulates it for the demo plans; tests compare it with what the executors report over ROS.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import Scene
from timely_llm_ros.evaluation.scene_skills import act
from timely_llm_ros.core.skills import SkillSet
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState, SegmentRun, format_value
from timely_llm_ros.core.skills.minispec import parse


@dataclass
class PlanRun:
    """What a plan did in a scene."""

    segments: list[tuple[str, SegmentRun]] = field(default_factory=list)   # (text, what it ran), in order
    returned: bool = False
    value: Any = None
    error: str = ""     # why it stopped early ("" when it ran to its end or returned)

    @property
    def executed(self) -> list[SkillCall]:
        return [c for _, run in self.segments for c in run.executed]

    @property
    def branches(self) -> list[tuple[str, bool]]:
        return [b for _, run in self.segments for b in run.branches]

    def outcome(self) -> str:
        """One line: the returned value, the failure, or that it ran to its end."""
        if self.error:
            return f"failed: {self.error}"
        return f"returned {format_value(self.value)!r}" if self.returned else "ran to its end"


def segment_texts(skill_set: SkillSet, text: str) -> list[str]:
    """The segments the planner server sends for this plan text (see PlanScheduler._generation_done)."""
    segmenter = skill_set.segmenter()
    texts = [s.text for s in segmenter.feed(text)]
    last = segmenter.finish()
    if last is not None:
        texts.append(last.text)
    if segmenter.error:
        raise ValueError(f"invalid {skill_set.name} plan: {segmenter.error}")
    if segmenter.pending.strip():
        texts.append(segmenter.pending)
    return texts


def run_plan(skill_set: SkillSet, text: str, scene: Scene) -> PlanRun:
    """Run a statement-mode plan on ``scene`` (its actions change it), segment by segment, until it returns, fails
    or ends."""
    returns = {name: spec.returns for name, spec in skill_set.skills.items() if spec.returns}
    interpreter = Interpreter(lambda call: act(scene, skill_set.name, call), returns)
    state, out = PlanState(), PlanRun()
    for index, segment in enumerate(segment_texts(skill_set, text)):
        run = SegmentRun()
        out.segments.append((segment, run))
        try:
            interpreter.run_segment(parse(segment, skill_set.skills, skill_set.statement_forms).program, state,
                                    index, run)
        except (PlanError, LookupError, TypeError) as exc:   # TypeError: a value of the wrong kind for a skill
            out.error = str(exc)
            return out
        if state.returned:
            out.returned, out.value = True, state.value
            return out
    return out
