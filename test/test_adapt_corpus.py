"""Training corpora for adapting a model to a skill set (timely_llm_ros/adapt): examples drawn from a robot type's task
patterns with objects from the vocabulary. Every plan runs on the robot and names only objects the scene lists or
the task says (what grounded decoding admits); objects are drawn anew, so a model must copy them; no evaluation task
is in a corpus, and the vocabulary holds none of the heldout split's objects."""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from timely_llm_ros.adapt.corpus import build_corpus, generate
from timely_llm_ros.adapt.patterns import load_patterns
from timely_llm_ros.adapt.templates import TemplateError, evaluate
from timely_llm_ros.adapt.vocabulary import load_vocabulary
from timely_llm_ros.core.robot_types import load_robot_types
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.context import parse_context
from timely_llm_ros.evaluation.evalset import load_eval_tasks
from timely_llm_ros.evaluation.plan_checks import string_arguments
from timely_llm_ros.paths import config_dir

REPO = Path(__file__).resolve().parent.parent
ROVER = REPO / "examples" / "rover"
OBJECT_ARGUMENT_SKILLS = {"drone": {"s", "g", "iv", "od", "ox", "oy", "ow", "oh"}, "arm": {"sc", "gt", "pi", "tk"},
                          "rover": {"look", "go", "sees", "dist"}}


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.fixture(scope="module")
def skill_sets():
    return load_robot_types(ROVER).skill_sets


@pytest.fixture(scope="module")
def corpus(skill_sets):
    examples, report = build_corpus(skill_sets, ["drone", "arm"], 1500, seed=7)
    rover, _ = build_corpus(skill_sets, ["rover"], 200, seed=7, skills_dir=ROVER)
    return examples + rover, report


def test_every_plan_runs_on_its_robot_and_names_only_what_the_scene_lists_or_the_task_says(corpus, skill_sets):
    examples, _ = corpus
    assert {e.robot_type for e in examples} == {"drone", "arm", "rover"}
    for ex in examples:
        assert skill_sets[ex.robot_type].validate_plan(ex.plan) == [], ex
        listed = set(parse_context(ex.scene).objects)
        task = _words(ex.task)
        calls = re.findall(r"([a-z_]+)\('([^']*)'", ex.plan)
        for skill, name in calls:
            if skill in OBJECT_ARGUMENT_SKILLS[ex.robot_type]:
                assert name in listed or re.search(rf"\b{re.escape(_words(name))}\b", task), (name, ex)


def test_every_pattern_of_the_built_in_robot_types_is_drawn(corpus):
    _, report = corpus
    for robot in ("drone", "arm"):
        names = {p.name for p in load_patterns(config_dir() / "skills" / f"{robot}.tasks.yaml").patterns}
        assert names <= set(report.per_pattern), names - set(report.per_pattern)


def test_objects_are_drawn_anew_for_every_example_so_a_model_must_copy_them(corpus):
    examples, _ = corpus
    named = defaultdict(list)
    for ex in examples:
        if ex.pattern in ("find_absent", "photo", "put_in", "stack_two"):
            named[ex.pattern].append(string_arguments(ex.plan)[0])
    for pattern, objects in named.items():
        assert len(objects) >= 20, pattern
        assert len(set(objects)) >= 0.85 * len(objects), (pattern, Counter(objects).most_common(3))


def test_a_sort_plan_moves_the_items_in_the_order_the_scene_lists_them(corpus):
    examples, _ = corpus
    sorts = [e for e in examples if e.pattern in ("sort_two_kinds", "tidy")]
    assert sorts
    for ex in sorts:
        listed = parse_context(ex.scene).groups[0][1]
        picked = re.findall(r"pi\('([^']*)'\)", ex.plan)
        assert picked == list(listed), ex


def test_an_avoid_plan_never_moves_toward_the_hazard(corpus):
    toward = {"front": "mf", "behind": "mb", "left": "ml", "right": "mr", "above": "mu", "below": "md"}
    examples, _ = corpus
    avoids = [e for e in examples if e.pattern.startswith("avoid_")]
    assert len(avoids) >= 30
    for ex in avoids:
        (placed,) = parse_context(ex.scene).placements
        moves = re.findall(r"(m[fblrud])\(", ex.plan)
        assert moves and toward[placed.direction] not in moves, ex


def test_a_pattern_that_phrases_an_evaluation_task_verbatim_is_dropped_from_the_corpus(tmp_path, skill_sets):
    task = next(t for t in load_eval_tasks(["drone"]) if t.kind == "loop")
    (tmp_path / "drone.tasks.yaml").write_text(yaml.safe_dump({"robot_type": "drone", "patterns": [
        {"name": "verbatim", "tasks": [task.task, "fly a circle"], "plan": "4{mf(50);tc(90);}"}]}))
    patterns = load_patterns(tmp_path / "drone.tasks.yaml")
    from timely_llm_ros.adapt.corpus import CorpusReport, eval_exclusion

    report = CorpusReport()
    examples = generate(skill_sets["drone"], patterns, load_vocabulary(), 6, 0, eval_exclusion(), report)
    assert report.dropped_eval > 0
    assert all(_words(e.task) != _words(task.task) for e in examples)


def test_the_vocabulary_is_thousands_of_names_in_the_categories_patterns_sort_by():
    vocabulary = load_vocabulary()
    assert len(vocabulary.all_names()) >= 1000
    for category in ("fruit", "vegetable", "trash", "stationery", "dishes", "animal", "person", "furniture"):
        assert len(vocabulary.categories[category]) >= 40, category


def test_the_vocabulary_holds_no_object_of_the_heldout_split():
    tasks = [t for t in load_eval_tasks() if t.split == "heldout"]
    if not tasks:
        pytest.skip("config/eval has no heldout split yet")
    heldout = {o.lower() for t in tasks for o in (*t.key_objects, *parse_context(t.scene).objects)}
    assert not heldout & load_vocabulary().all_names()


@pytest.mark.parametrize("pattern, fragment", [
    ({"name": "p1", "tasks": ["find the ${nothing}"], "plan": "tp();"}, "unknown slot 'nothing'"),
    ({"name": "p2", "slots": {"x": {"from": "no such kind"}}, "tasks": ["x"], "plan": "tp();"}, "no category"),
    ({"name": "p3", "tasks": ["go"], "plan": "fly(1);"}, "p3"),
    ({"name": "p4", "tasks": ["${__import__('os')}"], "plan": "tp();"}, "only these functions"),
])
def test_a_broken_pattern_fails_naming_it(tmp_path, skill_sets, pattern, fragment):
    path = tmp_path / "drone.tasks.yaml"
    path.write_text(yaml.safe_dump({"robot_type": "drone", "patterns": [pattern]}))
    with pytest.raises(ValueError, match=re.escape(fragment)):
        generate(skill_sets["drone"], load_patterns(path), load_vocabulary(), 3)


def test_pattern_expressions_compute_values_and_refuse_anything_else():
    assert evaluate("360 // k", {"k": 8}) == 45
    assert evaluate("80 if d < 100 else 50", {"d": 120}) == 50
    assert evaluate("words(k)", {"k": 3}) == "three"
    with pytest.raises(TemplateError):
        evaluate("x.__class__", {"x": 1})
    with pytest.raises(TemplateError):
        evaluate("[i for i in y]", {"y": [1]})


def test_task_pattern_files_beside_skill_sets_are_not_read_as_skill_sets(tmp_path):
    source = config_dir() / "skills"
    for name in ("drone.yaml", "drone.tasks.yaml"):
        (tmp_path / name).write_text((source / name).read_text())
    assert list(load_skill_sets(tmp_path)) == ["drone"]


def test_generation_is_deterministic_for_a_seed(skill_sets):
    a, _ = build_corpus(skill_sets, ["arm"], 40, seed=3)
    b, _ = build_corpus(skill_sets, ["arm"], 40, seed=3)
    c, _ = build_corpus(skill_sets, ["arm"], 40, seed=4)
    random.seed(99)                  # the generator's draws do not depend on the global random state
    d, _ = build_corpus(skill_sets, ["arm"], 40, seed=3)
    assert a == b == d and a != c
