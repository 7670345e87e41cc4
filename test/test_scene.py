"""Simulated scenes (evaluation/scene.py, evaluation/scene_skills.py): what the drone sees from where it is, how its actions change
that, an arm's pick and drop, and how a scene is given (a file, a name in config/scenes, inline YAML)."""
from __future__ import annotations

import math

import pytest

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import FOV_DEG, RANGE_M, SCAN_STEPS, Scene, load_scene
from timely_llm_ros.evaluation.scene_skills import act


def drone(scene: Scene, name: str, *args):
    return act(scene, "drone", SkillCall(name, args))


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


def test_goto_faces_the_object_and_stops_in_front_of_it_and_a_missing_one_moves_nothing():
    scene = load_scene("{objects: [{name: door, x: 0.0, y: 3.0, z: 1.0}]}")
    drone(scene, "g", "door")
    assert (scene.pose.x, scene.pose.y, scene.pose.yaw) == pytest.approx((0.0, 2.5, 90.0))
    assert drone(scene, "od", "door") == pytest.approx(50.0)
    drone(scene, "g", "window")
    assert (scene.pose.x, scene.pose.y) == pytest.approx((0.0, 2.5))


def test_an_object_under_furniture_is_seen_only_from_low_enough():
    scene = load_scene("{objects: [{name: toy, x: 1.0, y: 0.0, z: 0.1, below: 0.5}]}")
    assert not drone(scene, "iv", "toy")
    drone(scene, "md", 60)
    assert drone(scene, "iv", "toy")


def test_the_arm_picks_an_object_and_drops_it_where_the_gripper_is():
    scene = load_scene("table_blocks")
    arm = lambda name, *args: act(scene, "arm", SkillCall(name, args))  # noqa: E731
    arm("gt", "red block")
    arm("pi", "red block")
    assert scene.holding == "red block"
    arm("mv", 90, 10)
    arm("dr")
    assert scene.holding is None and (scene.objects["red block"].x, scene.objects["red block"].y) == (0.9, 0.1)


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
