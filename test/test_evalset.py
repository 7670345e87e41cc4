"""The labelled plan-quality set (config/eval/): every reference plan is valid and names its keys; the set is
large enough, split dev/test, written by its generator and phrased unlike the embedded planner's corpus."""
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import make_evalset  # noqa: E402

from timely_llm_ros.evaluation.evalset import load_eval_tasks  # noqa: E402
from timely_llm_ros.evaluation.plan_checks import check_plan  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402

TASKS = load_eval_tasks()
SETS = load_skill_sets()


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_every_reference_plan_parses_and_passes_every_check_against_itself(task):
    check = check_plan(task, task.plan, SETS[task.robot_type])
    assert check.problems == ()
    assert check.as_dict() == {"parses": True, "known_skills": True, "keys": True, "exact": True,
                               "same_skills": True}, task.plan


def test_every_key_object_is_in_the_scene_or_the_task():
    """A planner can only name what its prompt shows."""
    missing = [(t.id, k) for t in TASKS for k in t.key_objects if k not in t.scene and k not in t.task]
    assert not missing


def test_each_robot_type_has_at_least_150_tasks_and_about_a_third_in_dev():
    for robot_type in ("drone", "arm"):
        tasks = [t for t in TASKS if t.robot_type == robot_type]
        dev = sum(t.split == "dev" for t in tasks)
        assert len(tasks) >= 150
        assert 0.3 <= dev / len(tasks) <= 0.4, (robot_type, dev, len(tasks))


def test_every_task_kind_has_dev_and_test_tasks():
    splits = Counter((t.robot_type, t.kind, t.split) for t in TASKS)
    kinds = {(t.robot_type, t.kind) for t in TASKS}
    assert all(splits[(rt, k, "dev")] and splits[(rt, k, "test")] for rt, k in kinds)


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
        assert written.read_text() == committed.read_text(), f"run python benchmarks/make_evalset.py ({robot_type})"


def _entry(**changes) -> dict:
    entry = {"id": "t1", "kind": "find", "split": "dev", "urgency": "normal", "scene": "room: kitchen; objects: cup",
             "task": "find the cup", "plan": "g('cup');tp();", "key_objects": ["cup"], "key_skills": []}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize("entries, fragment", [
    ([_entry(split="train")], "split must be one of"),
    ([_entry(plan=None)], "missing fields ['plan']"),
    ([_entry(colour="red")], "unknown fields ['colour']"),
    ([_entry(key_objects=[])], "no key object and no key skill"),
    ([_entry(), _entry()], "used twice"),
    ([_entry(task="  ")], "non-empty strings"),
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
