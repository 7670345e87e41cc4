"""The labelled plan-quality evaluation set (config/eval/<robot type>.yaml): tasks with reference plans.

Each file holds one robot type's tasks. A task is what a robot's client would send (scene and task text, an
urgency class) plus what it asks the robot to bring about: its goal condition (evaluation/goals.py, judged on what
a plan does in the task's scene), a reference plan in the project's plan conventions (the file's header states
them) that achieves it, the key objects a plan must name as skill arguments and the key skills it must call.
``split`` is ``dev`` (the only tasks anyone may look at while choosing prompts or examples), ``test`` or
``heldout`` (tasks phrased from tables of their own, which no prompt, worked example or training corpus draws from).
The files are written by tools/evalset/make_evalset.py; test/test_evalset.py checks every reference plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from timely_llm_ros.evaluation.goals import GoalCondition, read_goal
from timely_llm_ros.paths import config_dir

SPLITS = ("dev", "test", "heldout")
HEADLINE_SPLITS = ("test", "heldout")   # the splits headline figures are measured on
_FIELDS = ("id", "kind", "split", "urgency", "scene", "task", "plan", "key_objects", "key_skills", "goal")


@dataclass(frozen=True)
class EvalTask:
    """One labelled planning task."""

    id: str
    robot_type: str
    kind: str                        # task family, e.g. "find", "stack3" (the file's header lists them)
    split: str                       # one of SPLITS
    urgency: str                     # urgency class the request is sent with (config/urgency_classes.yaml)
    scene: str                       # the context the planner sees
    task: str                        # the request in natural language
    plan: str                        # the reference plan
    key_objects: tuple[str, ...]     # each must be a string argument of some call in the plan
    key_skills: tuple[str, ...]      # each must be called somewhere in the plan
    goal: GoalCondition              # what the plan must bring about in the task's scene

    @classmethod
    def from_config(cls, robot_type: str, entry: Mapping[str, Any], where: str) -> "EvalTask":
        """Build from one YAML entry; ValueError names the file, the task and what is wrong."""
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: each task must be a mapping, got {type(entry).__name__}")
        name = entry.get("id", "?")
        missing = [f for f in _FIELDS if f not in entry]
        unknown = sorted(set(entry) - set(_FIELDS))
        if missing or unknown:
            raise ValueError(f"{where}: task {name!r}: missing fields {missing}, unknown fields {unknown}")
        if entry["split"] not in SPLITS:
            raise ValueError(f"{where}: task {name!r}: split must be one of {SPLITS}, got {entry['split']!r}")
        keys = {k: entry[k] for k in ("key_objects", "key_skills")}
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in keys.values()):
            raise ValueError(f"{where}: task {name!r}: key_objects and key_skills must be lists of strings")
        if not keys["key_objects"] and not keys["key_skills"]:
            raise ValueError(f"{where}: task {name!r} has no key object and no key skill: give at least one")
        text = {f: entry[f] for f in ("id", "kind", "urgency", "scene", "task", "plan")}
        empty = [f for f, v in text.items() if not isinstance(v, str) or not v.strip()]
        if empty:
            raise ValueError(f"{where}: task {name!r}: {empty} must be non-empty strings")
        try:
            goal = read_goal(entry["goal"])
        except ValueError as exc:
            raise ValueError(f"{where}: task {name!r}: goal: {exc}") from None
        if goal.robot_type != robot_type:
            raise ValueError(f"{where}: task {name!r}: goal {goal.key!r} is for the {goal.robot_type}, not the "
                             f"{robot_type} of this file")
        return cls(id=text["id"], robot_type=robot_type, kind=text["kind"], split=entry["split"],
                   urgency=text["urgency"], scene=text["scene"], task=text["task"], plan=text["plan"],
                   key_objects=tuple(keys["key_objects"]), key_skills=tuple(keys["key_skills"]), goal=goal)


def eval_dir() -> Path:
    """config/eval/: one file per robot type."""
    return config_dir() / "eval"


def load_eval_tasks(robot_types: Iterable[str] | None = None, split: str | None = None,
                    directory: Path | None = None) -> list[EvalTask]:
    """The tasks of the chosen robot types (default: every file) and split (None: all), in file order."""
    directory = Path(directory) if directory is not None else eval_dir()
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None (both), got {split!r}")
    paths = sorted(directory.glob("*.yaml"))
    wanted = None if robot_types is None else list(robot_types)
    if wanted is not None:
        known = {p.stem for p in paths}
        absent = [rt for rt in wanted if rt not in known]
        if absent:
            raise ValueError(f"no evaluation tasks for robot types {absent} in {directory}; "
                             f"there are: {', '.join(sorted(known)) or 'none'}")
        paths = [p for p in paths if p.stem in wanted]
    tasks: list[EvalTask] = []
    seen: set[str] = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
        if not isinstance(cfg, Mapping) or not isinstance(cfg.get("tasks"), list):
            raise ValueError(f"{path}: expected a mapping with a 'tasks' list")
        robot_type = str(cfg.get("robot_type", path.stem))
        for entry in cfg["tasks"]:
            task = EvalTask.from_config(robot_type, entry, str(path))
            if task.id in seen:
                raise ValueError(f"{path}: task id {task.id!r} is used twice")
            seen.add(task.id)
            if split is None or task.split == split:
                tasks.append(task)
    if not tasks:
        raise FileNotFoundError(f"no evaluation tasks (robot types {wanted or 'all'}, split {split or 'all'}) "
                                f"in {directory}")
    return tasks
