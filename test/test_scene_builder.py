"""Scenes built from a task's context and goal (evaluation/scene_builder.py): what the context lists is in view and
known, placements stand where the context says, what only the task names is out of view, under, on or behind what
the goal says, and the arm's table holds items and fixtures."""
from __future__ import annotations

import math

import pytest

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.goals import Approach, Check, Either, Photograph, Placed
from timely_llm_ros.evaluation.scene_builder import (UNDER_VIEW_M, context_scene, scene_objects, task_scenes,
                                                     variant_scene)
from timely_llm_ros.evaluation.scene_skills import act


def drone(scene, name, *args):
    return act(scene, "drone", SkillCall(name, args))


def only(goal, context="room: kitchen; objects: fridge, mug, table"):
    [(variant, scene)] = task_scenes("drone", context, goal)
    return variant, scene


def test_listed_objects_stand_in_view_and_the_drone_knows_them():
    scene = context_scene("drone", "room: kitchen; objects: fridge, mug, table, sink, oven")
    assert set(scene.objects) == {"fridge", "mug", "table", "sink", "oven"}
    assert scene.in_view() == set(scene.objects) and scene.known == set(scene.objects)
    assert len({(o.x, o.y) for o in scene.objects.values()}) == 5


@pytest.mark.parametrize("context, position", [
    ("lamp on the right, 50 cm away", (0.0, -0.5, 1.0)),
    ("child in front, 60 cm away", (0.6, 0.0, 1.0)),
    ("bird above, 120 cm away", (0.0, 0.0, 2.2)),
    ("dog behind", (-1.0, 0.0, 1.0)),                    # no distance: 100 cm
])
def test_a_placement_stands_at_its_direction_and_distance_and_is_known(context, position):
    scene = context_scene("drone", context)
    [obj] = scene.objects.values()
    assert obj.position() == pytest.approx(position) and obj.name in scene.known


def test_a_hazard_below_raises_the_drone_so_it_is_above_the_floor():
    scene = context_scene("drone", "cat below, 150 cm away")
    assert scene.pose.z == pytest.approx(1.7) and scene.objects["cat"].z == pytest.approx(0.2)


def test_a_target_the_context_does_not_list_is_out_of_view_until_a_scan():
    variant, scene = only(Photograph("scarf"))
    assert variant.present == {"scarf"} and "scarf" in scene.objects
    assert not drone(scene, "iv", "scarf") and "scarf" not in scene.known
    drone(scene, "s", "scarf")
    assert drone(scene, "iv", "scarf") and "scarf" in scene.known


def test_a_listed_target_is_just_in_view():
    variant, scene = only(Photograph("mug"))
    assert variant.name == "in view" and drone(scene, "iv", "mug")


def test_either_runs_each_unlisted_option_alone_and_none():
    variants = task_scenes("drone", "room: hall; objects: keys, lamp", Either(("keys", "wallet")))
    assert [(v.name, sorted(v.present), "wallet" in s.objects) for v, s in variants] == [
        ("wallet there", ["keys", "wallet"], True), ("only the listed", ["keys"], False)]


def test_an_object_on_furniture_is_recognised_only_from_near_it():
    there, scene = task_scenes("drone", "room: office; objects: shelf", Check("cup", "on", "shelf"))[0]
    cup, shelf = scene.objects["cup"], scene.objects["shelf"]
    assert (cup.x, cup.y) == (shelf.x, shelf.y) and cup.z > shelf.z
    assert not drone(scene, "iv", "cup")
    drone(scene, "g", "shelf")
    assert drone(scene, "iv", "cup")


def test_an_object_under_furniture_is_seen_only_from_low():
    _, scene = task_scenes("drone", "room: bedroom; objects: bed", Check("toy", "under", "bed"))[0]
    drone(scene, "g", "bed")
    assert not drone(scene, "iv", "toy")
    drone(scene, "md", 100 * (scene.pose.z - UNDER_VIEW_M))
    assert drone(scene, "iv", "toy")


def test_an_object_behind_furniture_lies_on_its_far_side():
    _, scene = task_scenes("drone", "room: den; objects: lamp, sofa", Check("sock", "behind", "sofa"))[0]
    sock, sofa = scene.objects["sock"], scene.objects["sofa"]
    assert math.hypot(sock.x, sock.y) > math.hypot(sofa.x, sofa.y) and sock.behind == "sofa"
    drone(scene, "g", "sofa")
    assert not drone(scene, "iv", "sock")


def test_furniture_the_context_does_not_list_is_added_out_of_view():
    _, scene = task_scenes("drone", "room: den; objects: lamp", Check("sock", "under", "sofa"))[0]
    assert "sofa" in scene.objects and not drone(scene, "iv", "sofa")


def test_approach_puts_the_object_straight_ahead_at_each_variants_distance():
    variants = task_scenes("drone", "room: hall; objects: clock, door", Approach("clock", 120))
    assert [drone(s, "od", "clock") for _, s in variants] == [220.0, 60.0]


def test_the_arm_table_holds_the_items_and_the_places_are_fixtures():
    scene = context_scene("arm", "desk: paper, pen, cup; places: trash bin, drawer, tray")
    assert [o.name for o in scene.objects.values() if not o.fixture] == ["paper", "pen", "cup"]
    assert [o.name for o in scene.objects.values() if o.fixture] == ["trash bin", "drawer", "tray"]
    assert all(o.on is None for o in scene.objects.values()) and scene.holding is None
    baskets = context_scene("arm", "table: kale; baskets: fruit basket, vegetable basket")
    assert baskets.objects["fruit basket"].fixture and not baskets.objects["kale"].fixture


def test_a_destination_the_context_does_not_list_is_added_as_a_fixture():
    goal = Placed((("cup", "sink"),))
    scene = variant_scene("arm", "table: cup", goal, goal.variants(["cup"])[0])
    assert scene.objects["sink"].fixture and not scene.objects["cup"].fixture


def test_scene_objects_are_every_variants_objects():
    assert scene_objects("drone", "room: hall; objects: lamp", Either(("keys", "wallet"))) == {"lamp", "keys", "wallet"}


def test_a_skill_sets_own_context_labels_shape_the_arm_scene_as_grounded_decoding_reads_it():
    """A team's arm whose contexts say "cell: 4" (where it is) and "racks: ..." (places things go into): with the
    skill set's labels the scene has no object "4" and the racks are fixtures; read with the standard labels the
    same context puts 4 and the rack on the table as items. The fleet's scene staging reads it the same way."""
    from timely_llm_ros.core.skills.context import ContextLabels
    from timely_llm_ros.ros.fleet.scene_staging import StagedTask

    labels = ContextLabels.of(places=["cell"], fixed_places=["racks"])
    context = "cell: 4; bench: bolt, hex nut; racks: parts rack"
    scene = context_scene("arm", context, labels=labels)
    assert [o.name for o in scene.objects.values() if not o.fixture] == ["bolt", "hex nut"]
    assert [o.name for o in scene.objects.values() if o.fixture] == ["parts rack"]
    plain = context_scene("arm", context)
    assert "4" in plain.objects and not plain.objects["parts rack"].fixture
    staged = StagedTask.build("arm", {"task": "rack the bolt", "context": context,
                                      "goal": {"placed": {"bolt": "parts rack"}}}, labels)
    assert staged.scene.objects["parts rack"].fixture and "4" not in staged.scene.objects
