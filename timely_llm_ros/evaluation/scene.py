"""A simulated scene: objects in a room and one robot's pose; it answers the robot's queries and its actions move it.

Frame: metres, x forward from the robot's start, y to its left, z up; yaw in degrees, counter-clockwise from +x.
The camera looks along the robot's yaw with a horizontal field of view of ``FOV_DEG`` and sees objects up to
``RANGE_M`` away; an object with ``below`` set (a toy under the bed) is seen only from at most that height.
A scene comes from YAML (a file, a name in config/scenes, or the text itself)::

    robot: {x: 0, y: 0, z: 1.0, yaw: 0}          # optional; this is the default
    objects:
      - {name: keys, x: 2.0, y: 0.3, z: 0.4, size: 0.1}
      - {name: toy, x: 3.0, y: -1.0, z: 0.1, below: 0.5}
    answers: {"book title?": "Dune"}             # what probe p(question) answers

The empty scene (an empty room: nothing visible) is the default. Not thread-safe: the caller serialises calls.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from timely_llm_ros.paths import config_dir

FOV_DEG = 60.0          # horizontal field of view
VFOV_DEG = 45.0         # vertical field of view
RANGE_M = 6.0           # farthest object the camera recognises
SCAN_STEP_DEG = 45.0    # scan s(obj): turn this much, up to SCAN_STEPS times, until obj is visible
SCAN_STEPS = 8
APPROACH_M = 0.5        # goto g(obj) stops this far in front of the object, facing it
UNKNOWN_ANSWER = "unknown"


@dataclass
class Pose:
    x: float = 0.0
    y: float = 0.0
    z: float = 1.0
    yaw: float = 0.0


@dataclass
class SceneObject:
    name: str
    x: float
    y: float
    z: float = 0.0
    size: float = 0.3                # metres across (image width and height come from it)
    below: float | None = None       # visible only from a height of at most this (m)


@dataclass
class Scene:
    """Objects, the robot's pose, probe answers, and what an arm holds."""

    objects: dict[str, SceneObject] = field(default_factory=dict)
    pose: Pose = field(default_factory=Pose)
    answers: dict[str, str] = field(default_factory=dict)
    name: str = "empty room"
    holding: str | None = None       # arm: the object in the gripper

    # ---- loading
    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, name: str = "") -> "Scene":
        """Build from a parsed YAML mapping; ValueError names the bad entry."""
        cfg = cfg or {}
        if not isinstance(cfg, Mapping):
            raise ValueError(f"scene {name!r}: expected a mapping with objects, robot, answers; got {cfg!r}")
        unknown = sorted(set(cfg) - {"name", "robot", "objects", "answers"})
        if unknown:
            raise ValueError(f"scene {name!r}: unknown fields {unknown}; known: name, robot, objects, answers")
        try:
            pose = Pose(**{k: float(v) for k, v in (cfg.get("robot") or {}).items()})
            objects: dict[str, SceneObject] = {}
            for i, entry in enumerate(cfg.get("objects") or []):
                obj = SceneObject(**{k: (str(v) if k == "name" else None if v is None else float(v))
                                     for k, v in entry.items()})
                if obj.name in objects:
                    raise ValueError(f"object {obj.name!r} appears twice")
                objects[obj.name] = obj
            answers = {str(k): str(v) for k, v in (cfg.get("answers") or {}).items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"scene {name!r}: {exc} (objects need name, x, y; optional z, size, below)") from None
        return cls(objects, pose, answers, str(cfg.get("name") or name or "scene"))

    def copy(self) -> "Scene":
        return copy.deepcopy(self)

    # ---- what the camera sees
    def _relative(self, obj: SceneObject) -> tuple[float, float, float]:
        """(horizontal distance, bearing in degrees left of the heading, height difference) of an object."""
        dx, dy = obj.x - self.pose.x, obj.y - self.pose.y
        bearing = (math.degrees(math.atan2(dy, dx)) - self.pose.yaw + 180.0) % 360.0 - 180.0
        return math.hypot(dx, dy), bearing, obj.z - self.pose.z

    def visible(self, name: str) -> bool:
        """iv: the object is in the field of view, in range, and not hidden from this height."""
        obj = self.objects.get(name)
        if obj is None or (obj.below is not None and self.pose.z > obj.below) or name == self.holding:
            return False
        dist, bearing, dz = self._relative(obj)
        return math.hypot(dist, dz) <= RANGE_M and abs(bearing) <= FOV_DEG / 2

    def _seen(self, name: str, query: str) -> SceneObject:
        if not self.visible(name):
            raise LookupError(f"{query}({name!r}): {name!r} is not in view (check iv({name!r}) first)")
        return self.objects[name]

    def image_x(self, name: str) -> float:
        """ox: horizontal image position, 0 (left edge) .. 1 (right edge)."""
        _, bearing, _ = self._relative(self._seen(name, "ox"))
        return round(0.5 - bearing / FOV_DEG, 3)

    def image_y(self, name: str) -> float:
        """oy: vertical image position, 0 (top) .. 1 (bottom), clipped to the image."""
        dist, _, dz = self._relative(self._seen(name, "oy"))
        elevation = math.degrees(math.atan2(dz, max(dist, 1e-6)))
        return round(min(1.0, max(0.0, 0.5 - elevation / VFOV_DEG)), 3)

    def width(self, name: str) -> float:
        """ow: the object's width as a share of the image width."""
        return self._share(self._seen(name, "ow"), FOV_DEG)

    def height(self, name: str) -> float:
        """oh: the object's height as a share of the image height."""
        return self._share(self._seen(name, "oh"), VFOV_DEG)

    def _share(self, obj: SceneObject, fov: float) -> float:
        dist, _, dz = self._relative(obj)
        span = 2.0 * max(math.hypot(dist, dz), 1e-6) * math.tan(math.radians(fov / 2))
        return round(min(1.0, obj.size / span), 3)

    def distance_cm(self, name: str) -> float:
        """od: distance from the camera to the object (cm)."""
        dist, _, dz = self._relative(self._seen(name, "od"))
        return round(100.0 * math.hypot(dist, dz), 1)

    def probe(self, question: str) -> str:
        """p: the scene's answer to the question, or UNKNOWN_ANSWER."""
        return self.answers.get(question, UNKNOWN_ANSWER)

    # ---- what actions do
    def turn(self, degrees_ccw: float) -> None:
        self.pose.yaw = (self.pose.yaw + degrees_ccw + 180.0) % 360.0 - 180.0

    def move(self, forward_m: float, left_m: float = 0.0, up_m: float = 0.0) -> None:
        """Move in the robot's frame (forward along its yaw, left, up); the drone never goes below the floor."""
        a = math.radians(self.pose.yaw)
        self.pose.x += forward_m * math.cos(a) - left_m * math.sin(a)
        self.pose.y += forward_m * math.sin(a) + left_m * math.cos(a)
        self.pose.z = max(0.0, self.pose.z + up_m)

    def scan(self, name: str) -> int:
        """s: turn SCAN_STEP_DEG at a time until the object is visible, at most SCAN_STEPS times; returns the turns."""
        for turns in range(SCAN_STEPS + 1):
            if self.visible(name) or turns == SCAN_STEPS:
                return turns
            self.turn(SCAN_STEP_DEG)
        return SCAN_STEPS

    def scan_abstract(self, question: str) -> int:
        """sa: scan until any object named in the question is visible (a full turn if none is)."""
        words = {w.strip("?,.!'\"").lower() for w in question.split()}
        for turns in range(SCAN_STEPS + 1):
            if any(n.lower() in words and self.visible(n) for n in self.objects) or turns == SCAN_STEPS:
                return turns
            self.turn(SCAN_STEP_DEG)
        return SCAN_STEPS

    def approach(self, name: str) -> tuple[float, float] | None:
        """Where goto g(name) ends: (distance to fly forward after facing it, degrees to turn); None if the scene has
        no such object (the robot stays where it is)."""
        obj = self.objects.get(name)
        if obj is None:
            return None
        dist, bearing, _ = self._relative(obj)
        return max(0.0, dist - APPROACH_M), bearing

    def goto(self, name: str) -> bool:
        """g / gt: face the object and stop APPROACH_M in front of it; False (no move) if the scene has none."""
        way = self.approach(name)
        if way is None:
            return False
        forward, bearing = way
        self.turn(bearing)
        self.move(forward)
        return True

    # ---- an arm
    def pick(self, name: str) -> bool:
        """pi / tk: the object is in the gripper from now on (True), if the scene has it."""
        if name not in self.objects or self.holding is not None:
            return False
        self.holding = name
        return True

    def drop(self) -> str | None:
        """dr: the held object is put down where the gripper is; returns its name."""
        name, self.holding = self.holding, None
        if name is not None:
            obj = self.objects[name]
            obj.x, obj.y = self.pose.x, self.pose.y
        return name


def load_scene(source: str = "") -> Scene:
    """A scene from a file path, a name in config/scenes (``bedroom_keys``), or inline YAML; "" = the empty room.

    ValueError / FileNotFoundError say what is wrong (the executor turns them into a start-up error)."""
    source = source.strip()
    if not source:
        return Scene()
    path = Path(source)
    named = config_dir() / "scenes" / f"{source}.yaml"
    for candidate in (path, named):
        if "\n" not in source and candidate.suffix in (".yaml", ".yml") and candidate.is_file():
            with open(candidate, encoding="utf-8") as f:
                return Scene.from_config(yaml.safe_load(f), candidate.stem)
    try:
        cfg = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        raise ValueError(f"scene: not a file, a name in {named.parent} or YAML: {exc}") from None
    if not isinstance(cfg, Mapping):
        known = ", ".join(sorted(p.stem for p in named.parent.glob("*.yaml"))) or "none"
        raise FileNotFoundError(f"scene {source!r}: no such file, no {named} (named scenes: {known}), and not "
                                "inline YAML (write e.g. \"{objects: [{name: cup, x: 1, y: 0}]}\")")
    return Scene.from_config(cfg, "inline")
