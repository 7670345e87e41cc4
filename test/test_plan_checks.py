"""Plan-quality checks (evaluation/plan_checks.py) on hand-made plans."""
import math

import pytest

from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import Avoid, Photograph, Placed
from timely_llm_ros.evaluation.plan_checks import (called_skills, check_plan, normalise, plan_calls, rates,
                                                   string_arguments)

SETS = load_skill_sets()
FIND_CAT = EvalTask(id="d1", robot_type="drone", kind="find", split="dev", urgency="normal",
                    scene="room: kitchen; objects: lamp", task="where is my cat?",
                    plan="s('cat');?iv('cat')==True{g('cat');tp();->'found';}->'not found';",
                    key_objects=("cat",), key_skills=(), goal=Photograph("cat"))
EVADE = EvalTask(id="d2", robot_type="drone", kind="evade", split="test", urgency="urgent",
                 scene="bird in front, 60 cm away", task="dodge the bird", plan="mb(80);md(40);",
                 key_objects=(), key_skills=("mb",), goal=Avoid("bird"))
STACK = EvalTask(id="a1", robot_type="arm", kind="stack2", split="dev", urgency="normal",
                 scene="table: red block, blue block", task="put the red block on the blue block",
                 plan="sc('red block');sc('blue block');gt('red block');pi('red block');gt('blue block');dr();",
                 key_objects=("red block", "blue block"), key_skills=(), goal=Placed((("red block", "blue block"),)))


def check(task, plan):
    return check_plan(task, plan, SETS[task.robot_type]).as_dict()


def test_the_reference_with_other_whitespace_passes_every_check():
    spaced = " s( 'cat' ) ;\n?iv('cat') == True {g('cat'); tp(); ->'found';} ->'not found'; "
    assert check(FIND_CAT, spaced) == dict.fromkeys(["parses", "known_skills", "keys", "exact", "same_skills"], True)


def test_whitespace_inside_a_string_literal_is_part_of_the_plan():
    assert not check(FIND_CAT, FIND_CAT.plan.replace("'not found'", "'not  found'"))["exact"]


def test_a_missing_semicolon_fails_parsing_but_not_the_textual_checks():
    result = check(FIND_CAT, "s('cat')?iv('cat')==True{g('cat');tp();->'found';}->'not found';")
    assert result == {"parses": False, "known_skills": True, "keys": True, "exact": False, "same_skills": True}


def test_an_unknown_skill_fails_parsing_and_known_skills():
    result = check(FIND_CAT, "s('cat');fly('cat');")
    assert not result["parses"] and not result["known_skills"]


def test_an_arm_plan_with_a_drone_skill_is_not_known_skills():
    assert not check(STACK, "sc('red block');tp();")["known_skills"]


def test_prose_and_empty_plans_pass_nothing():
    for plan in ("I will look for the cat.", "", "   "):
        assert not any(check(FIND_CAT, plan).values()), plan


def test_other_arguments_keep_the_skill_sequence_but_not_exactness():
    result = check(FIND_CAT, "s('dog');?iv('dog')==True{g('dog');tp();->'found';}->'not found';")
    assert result["same_skills"] and not result["exact"] and not result["keys"] and result["parses"]


@pytest.mark.parametrize("plan, named", [
    ("g('the cat');tp();", True),           # a leading article is ignored
    ("g(' Cat ');tp();", True),             # so are case and surrounding whitespace
    ("g('lamp');->'cat';", False),          # a return value is not a call argument
    ("sa('where is the cat?');", False),    # a question mentioning it does not name it
    ("g('cats');", False),
])
def test_a_key_object_counts_only_as_a_call_argument_of_its_own(plan, named):
    assert check(FIND_CAT, plan)["keys"] is named


def test_every_key_object_must_be_named():
    half = "sc('red block');gt('red block');pi('red block');gt('table');dr();"
    assert not check(STACK, half)["keys"]
    assert check(STACK, half.replace("'table'", "'blue block'"))["keys"]


def test_a_key_skill_must_be_called():
    assert check(EVADE, "mb(50);mu(40);")["keys"]
    assert not check(EVADE, "mf(80);md(40);")["keys"]


def test_calls_and_arguments_inside_string_literals_are_text_not_calls():
    plan = "sa('what is (here)? g(x)');l('s(cat)');"
    assert called_skills(plan) == ["sa", "l"]
    assert string_arguments(plan) == ["what is (here)? g(x)", "s(cat)"]


def test_arguments_of_nested_calls_and_conditions_are_found():
    assert string_arguments("_1=od('cup');?iv('cup')==True&p('why?')!='no'{g('cup');}") == ["cup", "cup", "why?",
                                                                                          "cup"]


def test_plan_calls_reads_each_call_with_its_literal_arguments_even_in_a_plan_that_does_not_parse():
    assert plan_calls("_1=od('a, b');?_1>2{mv(30, 4.5);}l(p('why?'));g('cat'") == [
        ("od", ("a, b",)), ("mv", (30, 4.5)), ("l", ("p('why?')",)), ("p", ("why?",)), ("g", ("cat",))]


def test_normalise_removes_whitespace_outside_literals_only():
    assert normalise(" mv(5, 10);\n sc( 'red  block' ); ") == "mv(5,10);sc('red  block');"


def test_checking_with_another_robot_types_skill_set_is_refused():
    with pytest.raises(ValueError, match="arm task"):
        check_plan(STACK, STACK.plan, SETS["drone"])


def test_rates_are_shares_of_plans_passing_each_check():
    checks = [check_plan(FIND_CAT, p, SETS["drone"]) for p in (FIND_CAT.plan, "g('cat');tp();", "bad")]
    r = rates(checks)
    assert r["parses"] == pytest.approx(2 / 3) and r["exact"] == pytest.approx(1 / 3)
    assert r["keys"] == pytest.approx(2 / 3)
    assert all(math.isnan(v) for v in rates([]).values())
