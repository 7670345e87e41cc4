"""Branch-aware execution-time estimates (core/plan_time.py): a conditional counts its body by the probability it
runs, learned per (robot type, condition) from what the robots ran; a variable argument counts its skill's mean
time; the worst case (every body) stays the bound the robot is held to."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.plan_time import PlanTimeEstimator, branches_taken, condition_name
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.minispec import parse

DRONE = load_skill_sets()["drone"]
MODEL = load_exec_models()["drone"]
FIND = "s('helmet');?iv('helmet')==True{g('helmet');tp();->'found';}->'not found';"


def program(text: str):
    return parse(text, DRONE.skills).program


def calls(*names_args) -> list[SkillCall]:
    return [SkillCall(n, tuple(a)) for n, *a in names_args]


@pytest.mark.parametrize("text, executed, held", [
    (FIND, ["s", "iv", "g", "tp"], [True]),
    (FIND, ["s", "iv"], [False]),
    ("?iv('a')&od('a')<3|iv('b'){tp();}mf(1);", ["iv", "iv", "tp", "mf"], [True]),      # '&' stopped at iv('a')
    ("?iv('a')&od('a')<3|iv('b'){tp();}mf(1);", ["iv", "od", "iv", "mf"], [False]),
    ("2{?iv('a'){tp();}mf(1);}", ["iv", "mf", "iv", "tp", "mf"], [False, True]),
])
def test_the_branches_a_segment_took_are_read_from_the_skills_it_executed(text, executed, held):
    assert [h for _, h in branches_taken(program(text), executed)] == held


def test_calls_that_no_way_through_the_statements_makes_teach_nothing():
    assert branches_taken(program(FIND), ["s", "g"]) is None
    estimator = PlanTimeEstimator()
    assert not estimator.observe("drone", MODEL, program(FIND), {}, calls(("s", "x"), ("g", "x")))
    assert estimator.probability("drone", "iv()==True") == 0.5


def test_a_conditional_rarely_taken_counts_less_and_the_worst_case_stays():
    estimator = PlanTimeEstimator()
    before = estimator.estimate("drone", MODEL, program(FIND), {})
    for _ in range(20):
        estimator.observe("drone", MODEL, program(FIND), {}, calls(("s", "helmet"), ("iv", "helmet")))
    after = estimator.estimate("drone", MODEL, program(FIND), {})
    scan, goto = MODEL.skill_min(SkillCall("s", ("helmet",))), MODEL.skill_min(SkillCall("g", ("helmet",)))
    assert after.worst == before.worst == pytest.approx(MODEL.min_time(parse(FIND, DRONE.skills).skills))
    assert before.expected == pytest.approx(before.worst - 0.5 * (goto + MODEL.skill_min(SkillCall("tp"))))
    assert scan < after.expected < before.expected < before.worst
    assert estimator.probability("drone", "iv()==True") == pytest.approx(1 / 22)


def test_the_statistics_are_per_robot_type_and_condition_not_per_object():
    estimator = PlanTimeEstimator()
    estimator.observe("drone", MODEL, program("?iv('cup')==True{tp();}"), {}, calls(("iv", "cup"), ("tp",)))
    assert estimator.probability("drone", "iv()==True") == pytest.approx(2 / 3)
    assert estimator.probability("drone", "iv()==False") == 0.5
    assert estimator.probability("rover", "iv()==True") == 0.5


def test_a_variable_is_named_by_the_query_that_set_it():
    variables: dict[str, str] = {}
    PlanTimeEstimator().estimate("drone", MODEL, program("_1=od('printer');"), variables)
    assert variables == {"_1": "od"}
    cond = program("?_1>200{g('printer');}")[0].condition
    assert condition_name(cond, variables) == "od()>200"


def test_a_variable_argument_counts_its_skills_mean_time():
    estimator = PlanTimeEstimator()
    floor = estimator.estimate("drone", MODEL, program("_1=od('x');mf(_1);"), {})
    assert floor.expected == pytest.approx(MODEL.skill_min(SkillCall("od", ("x",))) + MODEL.skill_min(
        SkillCall("mf", ())))
    moved = program("mf(100);mf(300);")
    estimator.observe("drone", MODEL, moved, {}, calls(("mf", 100), ("mf", 300)))
    mean = (MODEL.skill_min(SkillCall("mf", (100,))) + MODEL.skill_min(SkillCall("mf", (300,)))) / 2
    later = estimator.estimate("drone", MODEL, program("_1=od('x');mf(_1);"), {})
    assert later.expected == pytest.approx(MODEL.skill_min(SkillCall("od", ("x",))) + mean)
    assert later.worst == pytest.approx(MODEL.skill_min(SkillCall("od", ("x",))) + MODEL.skill_min(
        SkillCall("mf", (300,))))


def test_what_follows_a_body_that_returns_counts_with_the_chance_the_plan_goes_on():
    estimator = PlanTimeEstimator()
    text = "?iv('x')==True{->'found';}mf(100);"
    for _ in range(8):      # the body ran every time: the move after it almost never runs
        estimator.observe("drone", MODEL, program(text), {}, calls(("iv", "x")))
    assert estimator.probability("drone", "iv()==True") == pytest.approx(0.9)
    times = estimator.estimate("drone", MODEL, program(text), {})
    move = MODEL.skill_min(SkillCall("mf", (100,)))
    assert times.expected == pytest.approx(MODEL.skill_min(SkillCall("iv", ("x",))) + 0.1 * move)


def test_without_branch_awareness_every_body_counts():
    estimator = PlanTimeEstimator(branch_aware=False)
    times = estimator.estimate("drone", MODEL, program(FIND), {})
    assert times.expected == pytest.approx(times.worst)
