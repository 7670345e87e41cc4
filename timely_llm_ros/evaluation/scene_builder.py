"""Scenes built from a task's context (core/skills/context.py reads it, as grounded decoding does) and its goal
condition's variants (evaluation/goals.py), for the drone and for the arm. A skill set's own context labels
(``place_labels``, ``fixed_place_labels``: core/skills/context.py ``ContextLabels``) are read as grounded decoding
reads them: pass the robot type's ``SkillSet.context_labels``.

The drone (start: the origin, 1 m up, facing +x):

- listed objects stand in view, spread across the front of the field of view, ``LISTED_DISTANCES_M`` away;
- a placement (``lamp on the right, 50 cm away``) stands at its direction and distance (100 cm when none is given);
  one below the drone raises its start height so the hazard is above the floor;
- every object the context lists or places is ``known``: the drone may fly to it without looking first;
- a target out of view (``hidden``: a "find the scarf" target the context does not list) stands behind the drone's
  left shoulder, near enough to be recognised once it turns (a scan finds it);
- a target ``on`` a piece of furniture lies on its top, recognised only from ``SMALL_RANGE_M`` (the drone has to go
  there); ``under`` it, seen only from ``UNDER_VIEW_M`` high or lower; ``behind`` it, on the far side from the
  drone's start and hidden while the furniture is in the line of sight (the drone has to go round);
- a target ``ahead`` stands straight ahead at the drone's height, at the given distance.

A furniture piece a condition names but the context does not list is added out of view (a scan finds it).

The arm (gripper above the table's origin): the listed objects lie on the table in a row, ``ARM_ITEM_SPACING_M``
apart; the objects of a group whose label names places (``places: drawer, tray``, ``baskets: ...``: see
``context.FIXED_PLACE_LABELS``, what grounded decoding reads too) are fixtures in a second row: things go into them
and the gripper cannot lift them. An object a condition names that the context does not list is added to the table
(a fixture when it is where something goes).
"""
from __future__ import annotations

import math

from timely_llm_ros.core.skills.context import NO_LABELS, ContextLabels, SceneContext, parse_context
from timely_llm_ros.evaluation.goals import GoalCondition, Placed, Target, Variant
from timely_llm_ros.evaluation.scene import Pose, Scene, SceneObject

LISTED_DISTANCES_M = (3.0, 3.75, 4.5)   # listed objects, in turn
LISTED_SPREAD_DEG = 48.0                # they share this much of the 60 degree field of view
LISTED_HEIGHT_M = 0.5
LISTED_SIZE_M = 0.6
DEFAULT_PLACEMENT_CM = 100.0
HIDDEN_BEARINGS_DEG = (135.0, -135.0, 180.0)   # out of view at the start; a scan turning left meets them in turn
HIDDEN_DISTANCE_M = 1.5
SMALL_SIZE_M = 0.15
SMALL_RANGE_M = 2.0      # a small thing the context does not list is recognised only this close
UNDER_VIEW_M = 0.6       # what lies under furniture is seen from this height or lower
BEHIND_GAP_M = 0.8       # how far past the furniture's centre an object behind it lies
DRONE_HEIGHT_M = 1.0
ARM_ITEM_SPACING_M = 0.12
_DIRECTIONS = {"front": (1.0, 0.0, 0.0), "behind": (-1.0, 0.0, 0.0), "left": (0.0, 1.0, 0.0),
               "right": (0.0, -1.0, 0.0), "above": (0.0, 0.0, 1.0), "below": (0.0, 0.0, -1.0)}


def context_scene(robot_type: str, context: str, name: str = "", labels: ContextLabels = NO_LABELS) -> Scene:
    """The scene a context describes (read with ``labels``), before any condition adds to it."""
    read = parse_context(context, labels)
    if robot_type == "arm":
        return _arm_scene(read, name)
    placed = {p.name for p in read.placements}
    listed = [o for o in read.objects if o not in placed]
    start_z = DRONE_HEIGHT_M
    for p in read.placements:
        if p.direction == "below":
            start_z = max(start_z, (p.distance_cm or DEFAULT_PLACEMENT_CM) / 100 + 0.2)
    objects: dict[str, SceneObject] = {}
    for i, obj in enumerate(listed):
        bearing = math.radians(-LISTED_SPREAD_DEG / 2 + LISTED_SPREAD_DEG * (i + 0.5) / len(listed))
        dist = LISTED_DISTANCES_M[i % len(LISTED_DISTANCES_M)]
        objects[obj] = SceneObject(obj, round(dist * math.cos(bearing), 3), round(dist * math.sin(bearing), 3),
                                   LISTED_HEIGHT_M, LISTED_SIZE_M)
    for p in read.placements:
        d = (p.distance_cm or DEFAULT_PLACEMENT_CM) / 100
        ux, uy, uz = _DIRECTIONS[p.direction]
        objects[p.name] = SceneObject(p.name, d * ux, d * uy, start_z + d * uz, 0.5)
    return Scene(objects, Pose(0.0, 0.0, start_z, 0.0), name=name or "context", known=set(objects))


def _arm_scene(read: SceneContext, name: str) -> Scene:
    objects: dict[str, SceneObject] = {}
    fixtures = read.fixed_places
    items = [o for _, group in read.groups for o in group if o not in fixtures]
    for i, obj in enumerate(dict.fromkeys(items)):
        objects[obj] = SceneObject(obj, round(0.1 + ARM_ITEM_SPACING_M * i, 3), 0.3, 0.0, 0.05)
    for j, obj in enumerate(dict.fromkeys(fixtures)):
        objects[obj] = SceneObject(obj, round(0.15 + 0.25 * j, 3), 0.65, 0.0, 0.2, fixture=True)
    return Scene(objects, Pose(0.0, 0.0, 0.3, 0.0), name=name or "context", known=set(objects))


def variant_scene(robot_type: str, context: str, goal: GoalCondition, variant: Variant,
                  labels: ContextLabels = NO_LABELS) -> Scene:
    """The context's scene with one variant's targets added (a listed target moved where the variant puts it)."""
    scene = context_scene(robot_type, context, variant.name, labels)
    if robot_type == "arm":
        destinations = {d for _, d in goal.placements if isinstance(d, str)} if isinstance(goal, Placed) else set()
        for obj in goal.objects():          # those the variant has there (a missing object stays missing)
            if obj in variant.present and obj not in scene.objects:
                _add_to_table(scene, obj, fixture=obj in destinations)
        return scene
    hidden = iter(HIDDEN_BEARINGS_DEG)
    for target in variant.targets:
        if target.ref and target.ref not in scene.objects:     # furniture the context does not list
            _place_drone_hidden(scene, target.ref, next(hidden), LISTED_SIZE_M, None)
        if target.where == "hidden":
            _place_drone_hidden(scene, target.name, next(hidden), SMALL_SIZE_M, SMALL_RANGE_M)
        else:
            scene.objects[target.name] = _placed_target(scene, target)
        scene.known.discard(target.name)
    scene.known = {n for n in scene.known if n in scene.objects} | scene.in_view()
    return scene


def task_scenes(robot_type: str, context: str, goal: GoalCondition, labels: ContextLabels = NO_LABELS
                ) -> list[tuple[Variant, Scene]]:
    """Every variant the goal asks for, with its scene (fresh: nothing has happened in it)."""
    listed = parse_context(context, labels).objects
    return [(v, variant_scene(robot_type, context, goal, v, labels)) for v in goal.variants(listed)]


def scene_objects(robot_type: str, context: str, goal: GoalCondition, labels: ContextLabels = NO_LABELS) -> set[str]:
    """Every object of the task's scenes, over all its variants: what a plan may name without hallucinating."""
    return {name for _, scene in task_scenes(robot_type, context, goal, labels) for name in scene.objects}


def _add_to_table(scene: Scene, name: str, fixture: bool) -> None:
    row = [o for o in scene.objects.values() if o.fixture == fixture]
    x = (0.15 + 0.25 * len(row)) if fixture else (0.1 + ARM_ITEM_SPACING_M * len(row))
    scene.objects[name] = SceneObject(name, round(x, 3), 0.65 if fixture else 0.3, 0.0, 0.2 if fixture else 0.05,
                                      fixture=fixture)
    scene.known.add(name)


def _place_drone_hidden(scene: Scene, name: str, bearing_deg: float, size: float, reach: float | None) -> None:
    b = math.radians(scene.pose.yaw + bearing_deg)
    scene.objects[name] = SceneObject(name, round(scene.pose.x + HIDDEN_DISTANCE_M * math.cos(b), 3),
                                      round(scene.pose.y + HIDDEN_DISTANCE_M * math.sin(b), 3), LISTED_HEIGHT_M,
                                      size, range=reach)


def _placed_target(scene: Scene, target: Target) -> SceneObject:
    """Where a target goes relative to its furniture, or straight ahead."""
    if target.where == "ahead":
        d = target.distance_cm / 100
        a = math.radians(scene.pose.yaw)
        return SceneObject(target.name, round(scene.pose.x + d * math.cos(a), 3),
                           round(scene.pose.y + d * math.sin(a), 3), scene.pose.z, 0.4)
    ref = scene.objects[target.ref]
    if target.where == "on":
        return SceneObject(target.name, ref.x, ref.y, ref.z + ref.size / 2 + SMALL_SIZE_M / 2, SMALL_SIZE_M,
                           range=SMALL_RANGE_M)
    if target.where == "under":
        return SceneObject(target.name, ref.x, ref.y, SMALL_SIZE_M / 2, SMALL_SIZE_M, below=UNDER_VIEW_M,
                           range=SMALL_RANGE_M)
    if target.where == "behind":
        dx, dy = ref.x - scene.pose.x, ref.y - scene.pose.y
        norm = math.hypot(dx, dy) or 1.0
        return SceneObject(target.name, round(ref.x + BEHIND_GAP_M * dx / norm, 3),
                           round(ref.y + BEHIND_GAP_M * dy / norm, 3), LISTED_HEIGHT_M, SMALL_SIZE_M,
                           range=SMALL_RANGE_M, behind=ref.name)
    raise ValueError(f"target {target.name!r}: unknown place {target.where!r} (hidden, ahead, on, under, behind)")
