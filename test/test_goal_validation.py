"""Every agent_id the goal validator accepts is a namespace rcl accepts (its executor's action topics
included); the others are refused with UNKNOWN_AGENT. Tasks without a visible character are INVALID_TASK."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.core.validation import GoalFields, validate_goal

rclpy = pytest.importorskip("rclpy")
from rclpy.exceptions import InvalidNamespaceException, InvalidTopicNameException  # noqa: E402
from rclpy.validate_full_topic_name import validate_full_topic_name  # noqa: E402
from rclpy.validate_namespace import validate_namespace  # noqa: E402

CLASSES = {"normal": TimeUtility(2.0, -0.1, 1.0)}


def _validate(agent_id: str = "drone_1", task: str = "look for the cat"):
    return validate_goal(GoalFields(agent_id=agent_id, robot_type="drone", task=task, urgency_class="normal"),
                         "r1", 0.0, {"drone": object()}, CLASSES)


def _rcl_accepts(agent: str) -> bool:
    try:
        validate_namespace("/" + agent)
        # the longest hidden topic of the executor's action server, as DDS sees it
        validate_full_topic_name(f"/{agent}/execute_segment/_action/cancel_goal")
        return len(f"rq/{agent}/execute_segment/_action/get_resultRequest") <= 255
    except (InvalidNamespaceException, InvalidTopicNameException):
        return False


@pytest.mark.parametrize("agent_id", ["a//b", "a/1b", "drone_1//x", "1drone", "d" * 300, "drone 1", "drone-1",
                                      "/", ""])
def test_agent_ids_that_are_no_namespace_are_unknown_agent_with_a_reason(agent_id):
    with pytest.raises(RequestError) as err:
        _validate(agent_id=agent_id)
    assert err.value.code == ErrorCode.UNKNOWN_AGENT
    assert "namespace" in err.value.message


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab_1/", min_size=1, max_size=120))
def test_every_accepted_agent_id_is_a_namespace_rcl_accepts(agent_id):
    try:
        req = _validate(agent_id=agent_id)
    except RequestError as err:
        assert err.code == ErrorCode.UNKNOWN_AGENT
        return
    assert _rcl_accepts(req.agent_id), req.agent_id


@pytest.mark.parametrize("task", ["\u200b", " \u200b\u200d\ufeff ", "\t\n", "\u2028"])
def test_task_without_visible_characters_is_invalid_task(task):
    with pytest.raises(RequestError) as err:
        _validate(task=task)
    assert err.value.code == ErrorCode.INVALID_TASK


def test_nested_namespace_and_task_with_invisible_padding_are_accepted():
    req = _validate(agent_id="/fleet_a/drone_1/", task="\u200blook for the cat")
    assert req.agent_id == "fleet_a/drone_1"


def test_a_goal_that_says_to_keep_away_from_a_listed_object_carries_it_as_a_hazard():
    """The request the scheduler builds its grammar from: its objects (the goal's own list) and, of those, what the
    task says to keep away from (the task's own phrases among them: "looks aggressive" names nothing to fly to
    either); a task that asks for no distance carries none."""
    def goal(task: str):
        return validate_goal(GoalFields(agent_id="drone_1", robot_type="drone", task=task, urgency_class="normal",
                                        objects=["dog", "door"]), "r1", 0.0, {"drone": object()}, CLASSES)
    away = goal("the dog looks aggressive, back off toward the door")
    assert away.objects[:2] == ("dog", "door") and "dog" in away.hazards and "door" not in away.hazards
    assert goal("fly to the dog").hazards == ()
    assert away.scene_objects == ("dog", "door") and "back" in away.objects    # the task's phrases are not the scene's
    assert away.hazard_sides == ()                                  # the goal's objects place nothing
    placed = validate_goal(GoalFields(agent_id="drone_1", robot_type="drone", task="the wasp is coming at you, flee",
                                      urgency_class="normal", context="wasp on the left, 80 cm away; door ahead"),
                           "r3", 0.0, {"drone": object()}, CLASSES)
    assert "wasp" in placed.hazards and "door" not in placed.hazards and placed.hazard_sides == ("left",)
    calm = validate_goal(GoalFields(agent_id="drone_1", robot_type="drone", task="photograph the wasp",
                                    urgency_class="normal", context="wasp on the left, 80 cm away"),
                         "r4", 0.0, {"drone": object()}, CLASSES)
    assert calm.hazards == () and calm.hazard_sides == ()
    listed = validate_goal(GoalFields(agent_id="arm_1", robot_type="arm", task="put the fruit in the basket",
                                      urgency_class="normal", context="table: mango; places: basket"),
                           "r2", 0.0, {"arm": object()}, CLASSES)
    assert listed.scene_objects == ("mango", "basket") and "fruit" in listed.objects
    assert listed.fixed_places == ("basket",)              # what the arm may put things into but never pick up


@pytest.mark.parametrize("fields", [dict(ert=float("nan")), dict(ert=0.5), dict(alpha=-1.0, beta=2.0)])
def test_an_urgency_class_with_its_own_time_values_is_refused_as_ambiguous(fields):
    # which of the two the client meant cannot be known; a NaN beside a class used to be ignored silently
    with pytest.raises(RequestError) as err:
        validate_goal(GoalFields(agent_id="drone_1", robot_type="drone", task="look for the cat",
                                 urgency_class="normal", **fields),
                      "r1", 0.0, {"drone": object()}, CLASSES)
    assert err.value.code == ErrorCode.INVALID_TIME_REQUIREMENT
    assert "both given" in err.value.message and next(iter(fields)) in err.value.message


def test_no_urgency_class_and_no_time_values_is_the_normal_class():
    req = validate_goal(GoalFields(agent_id="drone_1", robot_type="drone", task="look for the cat"),
                        "r1", 0.0, {"drone": object()}, CLASSES)
    assert req.tuf == CLASSES["normal"]


def test_object_names_in_quotes_reach_the_plan_without_their_quotation_marks():
    # '"red" mug' used to become red" mug in plans (only the leading quote was stripped): a name the scene never had
    req = validate_goal(GoalFields(agent_id="arm_1", robot_type="drone", task="pick up the red mug",
                                   context="table: \"red\" mug, 'blue' block, cat's bowl", urgency_class="normal"),
                        "r1", 0.0, {"drone": object()}, CLASSES)
    assert set(req.scene_objects) >= {"red mug", "blue block", "cat's bowl"}, req.scene_objects


CONVEYOR = """name: conveyor
mode: statements
statement_forms: [call]
max_segment_tokens: 10
place_labels: [line, Aisle]
fixed_place_labels: [stations]
skills:
  - {short: pk, args: [object], kind: action, in_scene: true, movable: true}
  - {short: pl, args: [object], kind: action, in_scene: true}
"""


def test_a_robot_types_own_context_labels_name_its_place_and_its_fixed_places(tmp_path):
    """A conveyor's "line: 3" says where it is, "stations: ..." lists places things go into: with the skill set's
    place_labels and fixed_place_labels neither 3 nor the line is an object a plan may name, and a station is never
    lifted; without them (the drone) the same context lists 3 as an object."""
    from timely_llm_ros.core.skills import load_skill_sets

    (tmp_path / "conveyor.yaml").write_text(CONVEYOR)
    conveyor = load_skill_sets(tmp_path)["conveyor"]
    context = "line: 3; aisle: b; parts: bolt, hex nut; stations: scrap bin"
    fields = GoalFields(agent_id="conveyor_1", robot_type="conveyor", task="move the bolt to the scrap bin",
                        urgency_class="normal", context=context)
    req = validate_goal(fields, "r1", 0.0, {"conveyor": conveyor}, CLASSES)
    assert req.scene_objects == ("bolt", "hex nut", "scrap bin") and req.fixed_places == ("scrap bin",)
    assert "3" not in req.objects and "b" not in req.objects
    plain = validate_goal(GoalFields(**{**fields.__dict__, "robot_type": "drone", "agent_id": "drone_1"}), "r2", 0.0,
                          {"drone": object()}, CLASSES)
    assert plain.scene_objects == ("3", "b", "bolt", "hex nut", "scrap bin") and plain.fixed_places == ()


def test_a_context_label_given_both_meanings_is_refused_naming_it(tmp_path):
    (tmp_path / "conveyor.yaml").write_text(CONVEYOR.replace("[stations]", "[stations, line]"))
    from timely_llm_ros.core.skills import load_skill_sets

    with pytest.raises(ValueError, match=r"conveyor.yaml: context label\(s\) \['line'\]"):
        load_skill_sets(tmp_path)
    (tmp_path / "conveyor.yaml").write_text(CONVEYOR.replace("[line, Aisle]", "line"))
    with pytest.raises(ValueError, match="place_labels is a list of context labels"):
        load_skill_sets(tmp_path)
