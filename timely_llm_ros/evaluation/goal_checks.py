"""Whether a plan does its task, measured the way the robot would live it: run through the robot's interpreter,
segment by segment as the server sends it (evaluation/scene_run.py), in every scene variant of the task
(evaluation/scene_builder.py), and judged by the task's goal condition (evaluation/goals.py).

Five measures per plan:

- parses:        the robot's skill set validates the whole plan, and the server ended it without an error (a plan
                 the server stopped, INVALID_PLAN or PLAN_TOO_LONG, does not parse here);
- runs:          it parses and ran to its end (or returned) in every variant without a run-time error on the robot
                 (a skill it cannot do there, a query about what it does not see, a type error), or ended where the
                 task asks it to (the arm's scan finding no object that the table lacks: ``missing``);
- hallucinated:  the object arguments (the skills' ``object``/``target`` slots) that name nothing in the task's
                 scene, over all its variants, nor an object its goal condition names (read from the text, so plans
                 that do not parse count too);
- roles:         every key object plays its role (the condition's ``roles``: picked, dropped into, approached,
                 sought, measured; not merely mentioned), read from the plan's calls; None when the task gives no
                 object a role (avoid, loops, a tool that is not there);
- achieved:      it runs and the goal condition holds in every variant.

``moved_toward`` marks an avoid task whose plan moved toward the hazard in some variant.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from timely_llm_ros.core.skills import SkillSet
from timely_llm_ros.core.skills.context import normalise_name, parse_context
from timely_llm_ros.core.skills.interpreter import format_value
from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import GoalCondition, Outcome, Variant, Verdict, role_ok
from timely_llm_ros.evaluation.plan_checks import plan_calls
from timely_llm_ros.evaluation.scene import Scene
from timely_llm_ros.evaluation.scene_builder import task_scenes
from timely_llm_ros.evaluation.scene_run import run_plan
from timely_llm_ros.evaluation.scene_skills import act

MEASURES = ("parses", "runs", "hallucinated", "roles", "achieved")


@dataclass(frozen=True)
class VariantRun:
    """One variant's run: its name, what the robot ended with (one line), its run-time error ("" when none, or when
    it is the end the task asks for) and the verdict."""

    variant: str
    ended_with: str
    error: str
    verdict: Verdict


@dataclass(frozen=True)
class GoalCheck:
    """The five measures for one plan, and each variant's run for reading."""

    parses: bool
    runs: bool
    hallucinated: tuple[str, ...]
    roles: bool | None
    achieved: bool
    moved_toward: bool = False
    runs_by_variant: tuple[VariantRun, ...] = ()

    def why(self) -> str:
        """One line: what kept the plan from its goal ("" when achieved)."""
        if self.achieved:
            return ""
        if not self.parses:
            return "does not parse"
        for run in self.runs_by_variant:
            if not run.verdict.achieved:
                return f"{run.variant}: {run.verdict.why}"
        return ""


def object_slots(skill_set: SkillSet) -> dict[str, tuple[int, ...]]:
    """For each skill that takes one, the positions of its arguments that name an object of the scene (its
    ``object_positions``)."""
    return {name: spec.object_positions for name, spec in skill_set.skills.items() if spec.object_positions}


def object_arguments(skill_set: SkillSet, plan: str) -> list[str]:
    """The string arguments of the plan's calls in object slots, in text order."""
    slots = object_slots(skill_set)
    return [args[i] for name, args in plan_calls(plan) for i in slots.get(name, ())
            if i < len(args) and isinstance(args[i], str)]


def hallucinated_arguments(skill_set: SkillSet, plan: str, scene_objects: Iterable[str]) -> tuple[str, ...]:
    """Object arguments naming nothing in the scene (compared as plans write names: case and articles ignored)."""
    known = {normalise_name(o) for o in scene_objects}
    return tuple(dict.fromkeys(a for a in object_arguments(skill_set, plan) if normalise_name(a) not in known))


def judge_outcome(goal: GoalCondition, variant: Variant, outcome: Outcome) -> Verdict:
    """The condition's verdict on one run; a run-time error is a failure whatever the scene shows, unless it is the
    end the task asks for (``right_stop``: the arm's scan finding no object the table lacks)."""
    verdict = goal.judge(outcome, variant)
    if outcome.error and not goal.right_stop(outcome):
        return Verdict(False, f"failed on the robot: {outcome.error}", verdict.moved_toward)
    return verdict


def run_in_scene(skill_set: SkillSet, plan: str, scene: Scene) -> tuple[Outcome, str]:
    """Run the plan in (a copy of) a scene: the outcome, and one line of what the robot ended with."""
    start, end = scene, scene.copy()
    run = run_plan(skill_set, plan, end)
    value = format_value(run.value) if run.returned else None
    return Outcome(start, end, run.executed, value, run.error), run.outcome()


def replay(robot_type: str, scene: Scene, calls: Sequence[Any]) -> Scene:
    """Apply the skill calls a robot reports it ran (queries included, with their arguments' values) to a copy of
    the scene it started in: the scene as the robot left it (the same skills, so the same effects). A call the scene
    refuses ends the replay there, as it ended the robot's plan."""
    end = scene.copy()
    for call in calls:
        try:
            act(end, robot_type, call)
        except (LookupError, TypeError, ValueError):
            break
    return end


def judge_robot_run(goal: GoalCondition, variant: Variant, scene: Scene, robot_type: str, calls: Sequence[Any],
                    value: str | None, error: str = "") -> Verdict:
    """Judge what a robot reports it did (its executed calls, the value it returned as text or None, its error
    message) in the scene it started in: the demo's "achieved" column."""
    return judge_outcome(goal, variant, Outcome(scene, replay(robot_type, scene, calls), calls, value, error))


def check_goal(task: EvalTask, plan: str, skill_set: SkillSet, ended: bool = True) -> GoalCheck:
    """Every measure of ``plan`` for ``task``. ``ended``: the server ended the request without an error (False for
    INVALID_PLAN, PLAN_TOO_LONG, a goal it refused)."""
    if skill_set.name != task.robot_type:
        raise ValueError(f"task {task.id} is a {task.robot_type} task, checked with the {skill_set.name} skill set")
    text = plan.strip()
    labels = skill_set.context_labels     # the skill set's own context labels, as grounded decoding reads them
    scenes = task_scenes(task.robot_type, task.scene, task.goal, labels)
    objects = {name for _, scene in scenes for name in scene.objects} | set(task.goal.objects())
    hallucinated = hallucinated_arguments(skill_set, text, objects)
    roles = task.goal.roles(parse_context(task.scene, labels).objects)
    calls = plan_calls(text)
    roles_ok = all(role_ok(r, calls) for r in roles) if roles else None
    parses = ended and bool(text) and not skill_set.validate_plan(text)
    if not parses:
        return GoalCheck(False, False, hallucinated, roles_ok, False)
    runs: list[VariantRun] = []
    for variant, scene in scenes:
        outcome, ended_with = run_in_scene(skill_set, text, scene)
        error = "" if task.goal.right_stop(outcome) else outcome.error
        runs.append(VariantRun(variant.name, ended_with, error, judge_outcome(task.goal, variant, outcome)))
    no_error = not any(r.error for r in runs)
    return GoalCheck(True, no_error, hallucinated, roles_ok, all(r.verdict.achieved for r in runs),
                     any(r.verdict.moved_toward for r in runs), tuple(runs))


def goal_rates(checks: Sequence[GoalCheck]) -> dict[str, float | int]:
    """Shares of plans that parse, run, hallucinate (at least one argument), give every key object its role (over
    the plans whose task gives roles: ``n_roles``) and achieve their goal; ``moved_toward``: a count."""
    n = len(checks)
    with_roles = [c for c in checks if c.roles is not None]

    def share(values: list[bool], over: int) -> float:
        return sum(values) / over if over else float("nan")

    return {"n": n, "parses": share([c.parses for c in checks], n), "runs": share([c.runs for c in checks], n),
            "hallucinated": share([bool(c.hallucinated) for c in checks], n),
            "roles": share([bool(c.roles) for c in with_roles], len(with_roles)), "n_roles": len(with_roles),
            "achieved": share([c.achieved for c in checks], n),
            "moved_toward": sum(c.moved_toward for c in checks)}
