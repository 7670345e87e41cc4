"""Which branch each demo plan takes in which scene: a markdown table (docs/robots.md).

    PYTHONPATH=. .venv/bin/python tools/plan_branches.py [--model PATH]

The plans are what the planner generates for the tasks of config/fleet_tasks.yaml (the scheduler with the embedded
planner, dry: no robot; each goal validated and grounded as the server does). Each drone and arm plan then runs,
without ROS, as the simulated executor runs it (evaluation/scene_run.py: the server's segments, the robot's
interpreter, skills answered by the scene) in the empty room and in every scene of config/scenes that holds an
object the plan names.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from timely_llm_ros.core.composition import PolicyChoice  # noqa: E402
from timely_llm_ros.core.exec_time import load_exec_models  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.evaluation.scene import Scene, load_scene  # noqa: E402
from timely_llm_ros.evaluation.scene_run import run_plan  # noqa: E402
from timely_llm_ros.core.dry_run import dry_request, plan_dry  # noqa: E402
from timely_llm_ros.core.skills import SkillSet, load_skill_sets  # noqa: E402
from timely_llm_ros.core.validation import GoalFields  # noqa: E402
from timely_llm_ros.paths import config_dir  # noqa: E402


def generate_plans(tasks: list[tuple[str, dict]], model_path: str | None) -> list[str]:
    """The planner's plan for each (robot type, task entry), generated one at a time by the scheduler, dry."""
    from timely_llm_ros.engine.factory import make_engine
    from timely_llm_ros.stack import StackOptions, build_stack

    engine = make_engine("transformers", model_path=model_path, device="cpu")   # the embedded planner's format
    sched = build_stack(StackOptions(model=model_spec("embedded"), policy=PolicyChoice("fcfs", max_batch=1),
                                     warm_up=False), load_skill_sets(), load_exec_models(), engine=engine).scheduler
    plans = []
    for robot_type, entry in tasks:     # each goal as the server would take it: grounded, under the entry's grammar
        goal = GoalFields(agent_id=f"{robot_type}_1", robot_type=robot_type, task=entry["task"],
                          context=entry.get("context", ""), urgency_class=entry["urgency"])
        outcome = plan_dry(sched, dry_request(goal, sched.skill_sets, model_spec("embedded").grammar))
        plans.append(outcome.plan_text.strip())
    return plans


def named_objects(skill_set: SkillSet, plan: str) -> set[str]:
    """The string arguments of the plan's calls (the objects it looks for or goes to)."""
    return {a for c in skill_set.parse_skills(plan) for a in c.args if isinstance(a, str)}


def scenes_for(skill_set: SkillSet, plan: str, scenes: list[Scene]) -> list[Scene]:
    """The empty room and every scene holding an object the plan names."""
    wanted = named_objects(skill_set, plan)
    return [Scene()] + [s for s in scenes if wanted & set(s.objects)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[tuple[str, str, str, str, str, str]]) -> str:
    head = "| task | plan | scene | conditions (held?) | skills run | outcome |\n|---|---|---|---|---|---|\n"
    return head + "".join("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in rows)


def branch_rows(skill_set: SkillSet, task: str, plan: str, scenes: list[Scene]) -> list[tuple[str, ...]]:
    """One row per scene: the conditions reached and whether they held, the calls run, how the plan ended."""
    rows = []
    for scene in scenes_for(skill_set, plan, scenes):
        run = run_plan(skill_set, plan, scene.copy())
        conditions = ", ".join(f"`{text}` {'yes' if held else 'no'}" for text, held in run.branches) or "-"
        calls = " ".join(c.name for c in run.executed)
        first = not rows   # the task and its plan once, on the first of its rows
        rows.append((task if first else "", f"`{plan}`" if first else "", scene.name, conditions, calls,
                     run.outcome()))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="planner model folder (default: the embedded planner)")
    opts = ap.parse_args(argv)
    with open(config_dir() / "fleet_tasks.yaml", encoding="utf-8") as f:
        fleet = yaml.safe_load(f)
    sets = load_skill_sets()
    tasks = [(rt, e) for rt, entries in fleet.items() if sets[rt].mode == "statements" for e in entries]
    plans = generate_plans(tasks, opts.model)
    scenes = [load_scene(str(p)) for p in sorted((config_dir() / "scenes").glob("*.yaml"))]
    rows = list(itertools.chain.from_iterable(
        branch_rows(sets[rt], entry["task"], plan, scenes) for (rt, entry), plan in zip(tasks, plans)))
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
