"""Simulated scenes (evaluation/scene.py, evaluation/scene_skills.py): what the drone sees from where it is, how its
actions change that, what a skill needs to succeed (the drone cannot fly to what it has never seen; the arm picks only
what is under its gripper with nothing on it), an arm's stacks and places, the scene's log, and how a scene is given
(a file, a name in config/scenes, inline YAML)."""
from __future__ import annotations

import math

import pytest

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import FOV_DEG, RANGE_M, SCAN_STEPS, Scene, SkillImpossible, load_scene
from timely_llm_ros.evaluation.scene_skills import act


def drone(scene: Scene, name: str, *args):
    return act(scene, "drone", SkillCall(name, args))


def arm(scene: Scene, name: str, *args):
    return act(scene, "arm", SkillCall(name, args))


TABLE = """{robot: {z: 0.3}, objects: [{name: red cube, x: 0.1, y: 0.3}, {name: blue cube, x: 0.3, y: 0.3},
            {name: bin, x: 0.5, y: 0.6, fixture: true}]}"""


def test_an_object_is_visible_only_inside_the_field_of_view_and_range():
    edge_y = 0.99 * math.tan(math.radians(FOV_DEG / 2))
    scene = load_scene(f"""objects:
      - {{name: near, x: 1.0, y: 0.0, z: 1.0}}
      - {{name: edge, x: 1.0, y: {edge_y}, z: 1.0}}
      - {{name: side, x: 1.0, y: 1.0, z: 1.0}}
      - {{name: far, x: {RANGE_M + 0.5}, y: 0.0, z: 1.0}}""")
    assert [drone(scene, "iv", n) for n in ("near", "edge", "side", "far", "none")] == [True, True, False, False, False]
    drone(scene, "tu", 45)   # turning left brings the side object into view and the one ahead out of it
    assert drone(scene, "iv", "side") and not drone(scene, "iv", "near")


def test_image_queries_place_the_object_in_the_picture():
    scene = load_scene("{objects: [{name: cup, x: 2.0, y: 0.5, z: 1.0, size: 0.2}]}")
    assert drone(scene, "ox", "cup") < 0.5          # left of the centre
    assert drone(scene, "oy", "cup") == pytest.approx(0.5)
    assert drone(scene, "od", "cup") == pytest.approx(100 * (2.0 ** 2 + 0.5 ** 2) ** 0.5, abs=0.1)
    width = drone(scene, "ow", "cup")
    drone(scene, "mf", 100)
    assert drone(scene, "ow", "cup") > width        # closer: larger
    with pytest.raises(LookupError, match="'mug' is not in view"):
        drone(scene, "ox", "mug")


def test_scan_turns_until_the_object_is_in_view_or_a_full_turn():
    scene = load_scene("{objects: [{name: cat, x: -2.0, y: 0.1}]}")
    assert not drone(scene, "iv", "cat")
    assert scene.scan("cat") == 4 and drone(scene, "iv", "cat")
    assert scene.scan("cat") == 0
    empty = Scene()
    assert empty.scan("cat") == SCAN_STEPS and empty.pose.yaw == pytest.approx(0.0)


def test_goto_faces_a_known_object_and_stops_in_front_of_it():
    scene = load_scene("{objects: [{name: door, x: 0.0, y: 3.0, z: 1.0}], known: [door]}")
    drone(scene, "g", "door")
    assert (scene.pose.x, scene.pose.y, scene.pose.yaw) == pytest.approx((0.0, 2.5, 90.0))
    assert drone(scene, "od", "door") == pytest.approx(50.0)


def test_the_drone_cannot_fly_to_what_it_has_never_seen_until_a_scan_finds_it():
    scene = load_scene("{objects: [{name: door, x: 0.0, y: 3.0, z: 1.0}]}")    # to the left, out of view
    with pytest.raises(SkillImpossible, match=r"has not seen 'door'.*s\('door'\)"):
        drone(scene, "g", "door")
    with pytest.raises(SkillImpossible, match="has not seen 'window'"):
        drone(scene, "g", "window")
    assert (scene.pose.x, scene.pose.y) == (0.0, 0.0)
    drone(scene, "s", "door")
    drone(scene, "tc", 90)                  # it remembers where it saw the door after looking away
    drone(scene, "g", "door")
    assert (scene.pose.x, scene.pose.y) == pytest.approx((0.0, 2.5))


def test_the_empty_room_is_not_strict_so_a_fleet_without_a_world_still_runs_its_plans():
    empty = load_scene("")
    assert not empty.strict and drone(empty, "g", "cat") is None and (empty.pose.x, empty.pose.y) == (0.0, 0.0)
    assert arm(empty, "pi", "cube") is None and empty.holding is None


def test_a_small_object_is_recognised_only_from_near():
    scene = load_scene("{objects: [{name: ring, x: 3.0, y: 0.0, z: 1.0, size: 0.05, range: 1.5}]}")
    assert not drone(scene, "iv", "ring")
    drone(scene, "mf", 200)
    assert drone(scene, "iv", "ring")


def test_an_object_behind_furniture_is_hidden_until_the_drone_goes_round_or_above_it():
    scene = load_scene("""{objects: [{name: sofa, x: 3.0, y: 0.0, z: 0.5, size: 1.0},
                                     {name: sock, x: 3.8, y: 0.0, z: 0.3, size: 0.1, behind: sofa}]}""")
    assert drone(scene, "iv", "sofa") and not drone(scene, "iv", "sock")
    high = scene.copy()
    drone(high, "mu", 80)
    assert drone(high, "iv", "sock")
    for call in (("g", "sofa"), ("mr", 100), ("mf", 100), ("tu", 90)):
        drone(scene, *call)
    assert drone(scene, "iv", "sock")


def test_the_log_holds_the_path_the_turns_and_what_each_picture_showed():
    scene = load_scene("{objects: [{name: cat, x: 2.0, y: 0.0, z: 1.0}]}")
    drone(scene, "tp")
    drone(scene, "mb", 50)
    drone(scene, "tc", 180)
    drone(scene, "tp")
    assert scene.log.positions == [pytest.approx((0.0, 0.0, 1.0)), pytest.approx((-0.5, 0.0, 1.0))]
    assert [p.in_view for p in scene.log.pictures] == [{"cat"}, set()]
    assert scene.log.turned_deg == -180 and scene.log.turned_abs_deg == 180


def test_an_abstract_scan_turns_until_an_object_the_question_names_is_in_view():
    scene = load_scene("{objects: [{name: coin purse, x: -2.0, y: 0.1}, {name: coin, x: 2.0, y: 0.0}]}")
    assert drone(scene, "sa", "where is my Coin Purse?") is None and drone(scene, "iv", "coin purse")
    assert scene.scan_abstract("anything to cut paper with?") == SCAN_STEPS


def test_an_object_under_furniture_is_seen_only_from_low_enough():
    scene = load_scene("{objects: [{name: toy, x: 1.0, y: 0.0, z: 0.1, below: 0.5}]}")
    assert not drone(scene, "iv", "toy")
    drone(scene, "md", 60)
    assert drone(scene, "iv", "toy")


def test_the_arm_picks_an_object_and_drops_it_where_the_gripper_is():
    scene = load_scene("table_blocks")
    arm(scene, "gt", "red block")
    arm(scene, "pi", "red block")
    assert scene.holding == "red block"
    arm(scene, "mv", 90, 10)
    arm(scene, "dr")
    assert scene.holding is None and (scene.objects["red block"].x, scene.objects["red block"].y) == (0.9, 0.1)
    assert scene.objects["red block"].on is None


def test_a_drop_above_an_object_stacks_on_it_and_above_a_fixture_puts_it_in():
    scene = load_scene(TABLE)
    for call in (("tk", "red cube"), ("gt", "blue cube"), ("dr",), ("tk", "red cube"), ("gt", "bin"), ("dr",)):
        arm(scene, *call)
    assert scene.support_chain("red cube") == ["bin"] and scene.log.drops == [("red cube", "blue cube"),
                                                                              ("red cube", "bin")]
    arm(scene, "tk", "blue cube")
    arm(scene, "gt", "bin")
    arm(scene, "dr")       # beside what is already in the bin
    assert scene.support_chain("blue cube") == ["bin"]


@pytest.mark.parametrize("calls, fragment", [
    ((("pi", "red cube"),), "the gripper is not above 'red cube'"),
    ((("gt", "red cube"), ("pi", "blue cube")), "the gripper is not above 'blue cube'"),
    ((("tk", "red cube"), ("tk", "blue cube")), "already holds 'red cube'"),
    ((("gt", "bin"), ("pi", "bin")), "cannot lift it"),
    ((("gt", "kale"),), "no such object on the table"),
    ((("sc", "red cube"), ("sc", "wrench")), "found no wrench"),      # a scan finds what is there, nothing else
    ((("tk", "red cube"), ("gt", "red cube")), "it is in the gripper"),
    ((("tk", "red cube"), ("gt", "blue cube"), ("dr",), ("tk", "blue cube")), "rest on 'blue cube'"),
])
def test_the_arm_refuses_what_a_real_gripper_could_not_do(calls, fragment):
    scene = load_scene(TABLE)
    with pytest.raises(SkillImpossible, match=fragment.replace("(", r"\(")):
        for call in calls:
            arm(scene, *call)


def test_a_scene_round_trips_through_its_yaml_form():
    scene = load_scene(TABLE)
    arm(scene, "tk", "red cube")
    arm(scene, "gt", "bin")
    arm(scene, "dr")
    again = Scene.from_config(scene.to_config())
    assert again.objects == scene.objects and again.pose == scene.pose and again.known >= scene.known


def test_probe_answers_from_the_scene():
    assert drone(load_scene("office_book"), "p", "book title?") == "Dune"
    assert drone(Scene(), "p", "book title?") == "unknown"


def test_a_scene_comes_from_a_file_a_name_or_inline_yaml(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("objects: [{name: ball, x: 1, y: 0}]\n")
    assert list(load_scene(str(path)).objects) == ["ball"]
    assert "keys" in load_scene("bedroom_keys").objects
    assert list(load_scene("{objects: [{name: ball, x: 1, y: 0}]}").objects) == ["ball"]
    assert load_scene("").objects == {} and load_scene("").name == "empty room"
    many = "{objects: [" + ", ".join(f"{{name: ball {i}, x: {i}, y: 0}}" for i in range(40)) + "]}"
    assert len(load_scene(many).objects) == 40      # one line longer than a file name may be


@pytest.mark.parametrize("source, fragment", [
    ("no_such_scene", "named scenes: "),
    ("{objects: [{name: a, x: 1}]}", "objects need name, x, y"),
    ("{objects: [{name: a, x: 1, y: 0}, {name: a, x: 2, y: 0}]}", "appears twice"),
    ("{things: []}", "unknown fields ['things']"),
    ("{objects: [", "not a file"),
])
def test_a_bad_scene_is_refused_with_what_to_fix(source, fragment):
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        load_scene(source)
    assert fragment in str(info.value)
