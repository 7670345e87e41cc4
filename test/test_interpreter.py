"""The plan interpreter (core/skills/interpreter.py) on programs parsed with the drone's skill set, its skills answered
by a simulated scene (evaluation/scene.py): every statement form, the plan-scoped state, and the errors a robot can hit."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import Scene, load_scene
from timely_llm_ros.evaluation.scene_skills import act
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState, Stopped, format_value
from timely_llm_ros.core.skills.minispec import parse

DRONE = load_skill_sets()["drone"]
RETURNS = {name: spec.returns for name, spec in DRONE.skills.items() if spec.returns}
# keys 2 m ahead on the floor, the wallet behind the drone
KEYS_AHEAD = "{objects: [{name: keys, x: 2.0, y: 0.0, z: 0.0, size: 0.1}, {name: wallet, x: -2.0, y: 0.0}]}"


def program(text: str):
    result = parse(text, DRONE.skills, DRONE.statement_forms)
    assert not result.problems, result.problems
    return result.program


class Robot:
    """The interpreter's callback: a scene answers the drone's skills; every call is recorded."""

    def __init__(self, scene: Scene | None = None, stop_after: int | None = None) -> None:
        self.scene = scene if scene is not None else Scene()
        self.calls: list[SkillCall] = []
        self.stop_after = stop_after

    def __call__(self, call: SkillCall):
        self.calls.append(call)
        return act(self.scene, "drone", call)

    def stopped(self) -> bool:
        return self.stop_after is not None and len(self.calls) >= self.stop_after

    def run(self, *segments: str, state: PlanState | None = None):
        state = state if state is not None else PlanState()
        interpreter = Interpreter(self, RETURNS, self.stopped)
        runs = [interpreter.run_segment(program(text), state, i) for i, text in enumerate(segments)]
        return runs, state


def names(calls) -> list[str]:
    return [c.name for c in calls]


def test_a_conditional_runs_its_body_only_when_its_condition_holds_in_the_scene():
    plan = "?iv('keys')==True{g('keys');tp();}"
    seen, _ = Robot(load_scene(KEYS_AHEAD)).run(plan)
    unseen, _ = Robot(Scene()).run(plan)
    assert names(seen[0].executed) == ["iv", "g", "tp"] and seen[0].branches == [("iv('keys')==True", True)]
    assert names(unseen[0].executed) == ["iv"] and unseen[0].branches == [("iv('keys')==True", False)]


def test_a_loop_repeats_its_body_and_the_turns_add_up():
    robot = Robot()
    runs, _ = robot.run("3{tc(30);mf(10);}")
    assert names(runs[0].executed) == ["tc", "mf"] * 3
    assert robot.scene.pose.yaw == pytest.approx(-90.0)


def test_a_variable_set_in_one_segment_is_read_in_a_later_one_of_the_same_plan():
    robot = Robot(load_scene(KEYS_AHEAD))
    runs, state = robot.run("_1=od('keys');tp();", "mf(_1);")
    distance = state.variables["_1"]
    assert isinstance(distance, float) and distance > 100.0
    assert runs[1].executed == [SkillCall("mf", (distance,))]   # the argument arrives as the value, not as "_1"
    assert robot.scene.pose.x == pytest.approx(distance / 100.0)


def test_a_return_ends_the_plan_with_its_value_and_later_statements_do_not_run():
    runs, state = Robot(load_scene(KEYS_AHEAD)).run(
        "s('keys');?iv('keys')==True{tp();->'keys';}l('after');")
    assert names(runs[0].executed) == ["s", "iv", "tp"]
    assert runs[0].returned and state.returned and state.value == "keys" and state.returned_at == 0
    with pytest.raises(PlanError, match="already returned at segment 0"):
        Interpreter(Robot(), RETURNS).run_segment(program("tp();"), state, 1)


def test_a_return_inside_a_loop_stops_the_loop():
    runs, state = Robot().run("5{tc(10);->_x;}", state=PlanState(variables={"_x": 7.5}))
    assert names(runs[0].executed) == ["tc"] and state.value == 7.5 and format_value(state.value) == "7.5"


def test_nested_queries_are_evaluated_before_the_call_that_uses_them():
    robot = Robot(load_scene(KEYS_AHEAD))
    runs, _ = robot.run("l(p('book title?'));")
    assert runs[0].executed == [SkillCall("p", ("book title?",)), SkillCall("l", ("unknown",))]


@pytest.mark.parametrize("condition, held, queried", [
    ("iv('keys')==True&iv('wallet')==True", False, ["iv", "iv"]),
    ("iv('wallet')==True&iv('keys')==True", False, ["iv"]),           # & stops at the first term that fails
    ("iv('keys')==True|iv('wallet')==True", True, ["iv"]),            # | stops at the first that holds
    ("iv('wallet')|od('keys')<300", True, ["iv", "od"]),
    ("iv('wallet')|iv('keys')&od('keys')>300", False, ["iv", "iv", "od"]),   # & binds tighter than |
    ("(iv('wallet')|iv('keys'))&od('keys')<300", True, ["iv", "iv", "od"]),
    ("p('book title?')!='Dune'", True, ["p"]),
    ("ox('keys')>=0.5&ox('keys')<=0.5", True, ["ox", "ox"]),
])
def test_conditions_combine_comparisons_left_to_right(condition, held, queried):
    runs, _ = Robot(load_scene(KEYS_AHEAD)).run(f"?{condition}{{tp();}}")
    assert runs[0].branches == [(condition, held)]
    assert names(runs[0].executed) == queried + (["tp"] if held else [])


@pytest.mark.parametrize("text, fragment", [
    ("mf(_2);", "variable _2 is not set"),
    ("?iv('keys')=='yes'{tp();}", "cannot compare bool True with str 'yes'"),
    ("?p('q')>3{tp();}", "cannot compare str"),
    ("?iv('keys')>False{tp();}", "> needs numbers"),
    ("?od('keys'){tp();}", "a condition needs a bool; od('keys') is float"),
    ("?g('keys')==True{tp();}", "only query skills give values"),
])
def test_run_time_errors_say_what_went_wrong(text, fragment):
    with pytest.raises(PlanError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Robot(load_scene(KEYS_AHEAD)).run(text)


def test_a_query_whose_value_is_not_what_its_skill_declares_is_an_error():
    interpreter = Interpreter(lambda call: "yes", RETURNS)
    with pytest.raises(PlanError, match=r"query iv\('keys'\) gave str 'yes'; its skill declares returns: bool"):
        interpreter.run_segment(program("_1=iv('keys');"), PlanState())
    assert Interpreter(lambda call: 3, RETURNS).run_segment(program("->od('keys');"), PlanState()).value == 3.0


def test_a_query_about_an_object_not_in_view_fails_with_a_hint():
    with pytest.raises(LookupError, match=r"'keys' is not in view \(check iv\('keys'\) first\)"):
        Robot(Scene()).run("_1=od('keys');")


def test_cancellation_is_checked_before_every_call():
    robot = Robot(stop_after=2)
    with pytest.raises(Stopped):
        robot.run("tc(10);tc(10);tc(10);")
    assert len(robot.calls) == 2


def test_a_plan_runs_its_skills_in_the_order_the_robot_would():
    """The worst-case calls the scheduler estimates contain every call the interpreter makes, in the same order."""
    text = "_1=od('keys');2{tc(10);}?_1>100{mf(_1);}->_1;"
    runs, _ = Robot(load_scene(KEYS_AHEAD)).run(text)
    worst = parse(text, DRONE.skills).skills
    assert names(runs[0].executed) == names(worst)
