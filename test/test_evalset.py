"""The labelled plan-quality set (config/eval/): every reference plan is valid, names its keys and achieves its
goal in every scene variant; the set is large enough, split dev/test/heldout, written by its generator and phrased
unlike the embedded planner's corpus."""
from collections import Counter
from pathlib import Path

import pytest
import yaml

from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.evaluation.evalset import load_eval_tasks
from timely_llm_ros.evaluation.goal_checks import check_goal
from timely_llm_ros.evaluation.plan_checks import check_plan
from tools.evalset import make_evalset

TASKS = load_eval_tasks()
SETS = load_skill_sets()


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_every_reference_plan_parses_and_passes_every_check_against_itself(task):
    check = check_plan(task, task.plan, SETS[task.robot_type])
    assert check.problems == ()
    assert check.as_dict() == {"parses": True, "known_skills": True, "keys": True, "exact": True,
                               "same_skills": True}, task.plan


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_every_reference_plan_achieves_its_goal_in_every_scene_variant(task):
    check = check_goal(task, task.plan, SETS[task.robot_type])
    assert check.runs and check.achieved, (task.plan, check.why())
    assert check.hallucinated == () and check.roles in (True, None)
    assert check.runs_by_variant, "no scene variant was run"


def test_every_key_object_is_in_the_scene_or_the_task():
    """A planner can only name what its prompt shows."""
    missing = [(t.id, k) for t in TASKS for k in t.key_objects if k not in t.scene and k not in t.task]
    assert not missing


def test_each_robot_type_has_150_dev_or_test_tasks_a_third_in_dev_and_50_heldout():
    for robot_type in ("drone", "arm"):
        tasks = [t for t in TASKS if t.robot_type == robot_type and t.split != "heldout"]
        dev = sum(t.split == "dev" for t in tasks)
        assert len(tasks) >= 150
        assert 0.3 <= dev / len(tasks) <= 0.4, (robot_type, dev, len(tasks))
        assert sum(t.split == "heldout" and t.robot_type == robot_type for t in TASKS) >= 50


def test_every_task_kind_has_dev_test_and_heldout_tasks():
    splits = Counter((t.robot_type, t.kind, t.split) for t in TASKS)
    kinds = {(t.robot_type, t.kind) for t in TASKS}
    assert all(splits[(rt, k, s)] for rt, k in kinds for s in ("dev", "test", "heldout")), splits


def test_reference_plans_fit_the_plan_cap_in_the_embedded_planners_tokens():
    from transformers import AutoTokenizer

    from timely_llm_ros.paths import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    over = [t.id for t in TASKS if len(tokenizer.encode(" " + t.plan)) > SETS[t.robot_type].max_plan_tokens]
    assert not over


def test_no_task_is_a_template_of_the_embedded_planners_corpus():
    overlap = make_evalset.overlap(TASKS, sample=5_000)
    assert overlap.template == []
    assert overlap.verbatim == []


def test_the_committed_files_are_what_the_generator_writes(tmp_path):
    for robot_type in ("drone", "arm"):
        written = make_evalset.write(robot_type, make_evalset.draft_tasks(robot_type), tmp_path)
        committed = Path(make_evalset.eval_dir()) / f"{robot_type}.yaml"
        assert written.read_text() == committed.read_text(), f"run python -m tools.evalset.make_evalset ({robot_type})"


def _entry(**changes) -> dict:
    entry = {"id": "t1", "kind": "find", "split": "dev", "urgency": "normal", "scene": "room: kitchen; objects: cup",
             "task": "find the cup", "plan": "g('cup');tp();", "key_objects": ["cup"], "key_skills": [],
             "goal": {"photograph": "cup"}}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize("entries, fragment", [
    ([_entry(split="train")], "split must be one of"),
    ([_entry(plan=None)], "missing fields ['plan']"),
    ([_entry(colour="red")], "unknown fields ['colour']"),
    ([_entry(key_objects=[])], "no key object and no key skill"),
    ([_entry(), _entry()], "used twice"),
    ([_entry(task="  ")], "non-empty strings"),
    ([_entry(goal=None)], "missing fields ['goal']"),
    ([_entry(goal={"photograph": "cup", "either": ["a"]})], "goal: a goal needs exactly one of"),
    ([_entry(goal={"approach": "cup"})], "beyond_cm must be a number"),
    ([_entry(goal={"placed": {"cup": "tray"}})], "goal 'placed' is for the arm, not the drone"),
])
def test_a_malformed_task_file_is_rejected_naming_the_task_and_the_problem(tmp_path, entries, fragment):
    (tmp_path / "drone.yaml").write_text(yaml.safe_dump({"robot_type": "drone", "tasks": entries}))
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        load_eval_tasks(directory=tmp_path)


def test_loading_filters_by_robot_type_and_split_and_names_unknown_types():
    dev_arm = load_eval_tasks(["arm"], "dev")
    assert dev_arm and all(t.robot_type == "arm" and t.split == "dev" for t in dev_arm)
    assert len(dev_arm) == sum(t.robot_type == "arm" and t.split == "dev" for t in TASKS)
    with pytest.raises(ValueError, match="no evaluation tasks for robot types \\['boat'\\]"):
        load_eval_tasks(["boat"])
