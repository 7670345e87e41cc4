"""The plans a model writes for a robot type's tasks, as the server would have it write them (its prompts, its limits,
each goal validated and grounded in its scene as the server does, under its grammar when the model entry decodes
under one): a markdown table, to check a skill set's descriptions and worked examples before robots run them
(docs/robots.md). A task the server would refuse shows its error code.

    PYTHONPATH=. .venv/bin/python tools/robot_plans.py rover examples/rover/tasks.yaml --skills-dir examples/rover

The tasks file is a YAML list of {scene, task}. ROS-free: the scheduler runs dry (no robot), one task at a time.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from timely_llm_ros.core.composition import PolicyChoice  # noqa: E402
from timely_llm_ros.core.dry_run import dry_request, plan_dry  # noqa: E402
from timely_llm_ros.core.errors import RequestError  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.request import PlanRequest  # noqa: E402
from timely_llm_ros.core.robot_types import load_robot_types  # noqa: E402
from timely_llm_ros.core.validation import GoalFields  # noqa: E402


def task_request(robot_type: str, entry: dict, skill_sets: dict, grammar: bool) -> PlanRequest:
    """The server's request for a task entry {scene, task} sent by robot ``<robot_type>_1`` in the normal class;
    RequestError where the server would refuse it."""
    goal = GoalFields(agent_id=f"{robot_type}_1", robot_type=robot_type, task=str(entry["task"]),
                      context=str(entry.get("scene", "")), urgency_class="normal")
    return dry_request(goal, skill_sets, grammar)


def plan_tasks(robot_type: str, tasks: list[dict], skills_dir: str, model: str) -> list[tuple[str, str]]:
    """(plan text, outcome code name) per task, greedy, under the robot type's grammar when the entry says so."""
    from timely_llm_ros.stack import EngineChoice, StackOptions, build_stack

    spec = model_spec(model)
    types = load_robot_types(skills_dir or None)
    if robot_type not in types.skill_sets:
        raise SystemExit(f"no skill set {robot_type!r}; known: {', '.join(sorted(types.skill_sets))}")
    stack = build_stack(StackOptions(model=spec, engine=EngineChoice("transformers"),
                                     policy=PolicyChoice("fcfs", max_batch=1), warm_up=False),
                        {robot_type: types.skill_sets[robot_type]}, types.exec_models)
    skill_set, scheduler = stack.setup.skill_sets[robot_type], stack.scheduler
    out = []
    for entry in tasks:
        try:
            outcome = plan_dry(scheduler, task_request(robot_type, entry, {robot_type: skill_set}, spec.grammar))
        except RequestError as err:
            out.append(("", f"{err.code.name}: {err.message}"))
            continue
        out.append((outcome.plan_text.strip(), outcome.error_code.name))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("robot_type")
    parser.add_argument("tasks", help="YAML list of {scene, task}")
    parser.add_argument("--skills-dir", default="", help="a team's folder with skills/*.yaml and exec_time/*.yaml")
    parser.add_argument("--model", default="smollm2", help="an entry of config/models.yaml (default smollm2)")
    args = parser.parse_args(argv)
    with open(args.tasks, encoding="utf-8") as f:
        tasks = yaml.safe_load(f) or []
    plans = plan_tasks(args.robot_type, tasks, args.skills_dir, args.model)
    print("| scene | task | plan | outcome |\n|---|---|---|---|")
    for entry, (plan, code) in zip(tasks, plans):
        cells = [str(entry.get("scene", "")), str(entry["task"]), f"`{plan}`" if plan else "-", code]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
