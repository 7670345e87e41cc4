"""A simulated scene: objects in a room or on a table and one robot's pose; it answers the robot's queries, its actions
change it, and it keeps a log of what happened (evaluation/goals.py judges a plan on that log).

Frame: metres, x forward from the robot's start, y to its left, z up; yaw in degrees, counter-clockwise from +x.

The drone. Its camera looks along the robot's yaw with a horizontal field of view of ``FOV_DEG`` and recognises an
object up to ``RANGE_M`` away (or the object's own ``range``: a small thing is recognised only from near). An object
with ``below`` set (a toy under the bed) is seen only from at most that height; one with ``behind`` set is hidden
while the object it is behind stands in the line of sight (unless the drone is above that object's top).

The arm. Its gripper moves over the table (``pose.x``, ``pose.y``); every object on the table is in its camera's
view. An object rests on the table, or ``on`` another object or in a ``fixture`` (a bin, basket, drawer or tray:
a place things go into, which the gripper cannot lift). ``holding`` is the object in the gripper.

What a skill needs to succeed, with a real robot in mind (a ``strict`` scene raises ``SkillImpossible`` otherwise):

- drone goto ``g(x)``: the drone knows where x is: its context listed x (``known``) or its camera has seen x during
  the plan (a scan that found it, or x in view). It cannot fly to what it has never seen.
- arm scan ``sc(x)``: x is on the table (or is a fixture): a scan finds what is there and nothing else.
- arm goto ``gt(x)``: x is on the table (or is a fixture) and not in the gripper.
- arm pick ``pi(x)``: the gripper is above x (within ``GRASP_TOLERANCE_M``), holds nothing, x is not a fixture and
  nothing rests on x; ``tk(x)`` is goto and pick in one motion.
- arm drop ``dr()``: what is held goes into the fixture the gripper is above (beside what is in it already), or onto
  the object it is above (on top of whatever rests on that); above nothing, onto the table where the gripper is.
  Dropping with an empty gripper does nothing.
- queries ``ox oy ow oh od`` need the object in view (LookupError, as a camera that does not see it).

The empty room (``load_scene("")``: the executor's default) is not strict: nothing is in it, and actions on objects
do nothing rather than fail, so a fleet run without a simulated world still runs its plans.

A scene comes from YAML (a file, a name in config/scenes, or the text itself)::

    robot: {x: 0, y: 0, z: 1.0, yaw: 0}          # optional; this is the default
    objects:
      - {name: keys, x: 2.0, y: 0.3, z: 0.4, size: 0.1}
      - {name: toy, x: 3.0, y: -1.0, z: 0.1, below: 0.5}
      - {name: sock, x: 3.6, y: 0.0, z: 0.3, behind: sofa, range: 2.0}
      - {name: bin, x: 0.2, y: 0.6, fixture: true}
    known: [keys]                                # objects the robot knows of before seeing them (its context)
    answers: {"book title?": "Dune"}             # what probe p(question) answers
    strict: true                                 # default for every scene but the empty room

Not thread-safe: the caller serialises calls.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, fields
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
OVER_TOP_M = 0.2        # the drone sees past an object it is this much above the top of
GRASP_TOLERANCE_M = 0.03  # the arm grasps an object whose centre is this close to the gripper
UNKNOWN_ANSWER = "unknown"


class SkillImpossible(LookupError):
    """The robot cannot do what the skill asks in this scene; the message says why and what would work."""


@dataclass
class Pose:
    x: float = 0.0
    y: float = 0.0
    z: float = 1.0
    yaw: float = 0.0

    def position(self) -> tuple[float, float, float]:
        return (self.x, self.y, self.z)


@dataclass
class SceneObject:
    name: str
    x: float
    y: float
    z: float = 0.0
    size: float = 0.3                # metres across (image width and height come from it)
    below: float | None = None       # visible only from a height of at most this (m)
    range: float | None = None       # recognised only this close (m); None: RANGE_M
    behind: str | None = None        # hidden behind this object while it stands in the line of sight
    on: str | None = None            # arm: what it rests on or in; None: the table
    fixture: bool = False            # a place things go into (bin, basket, drawer, tray); cannot be lifted

    def position(self) -> tuple[float, float, float]:
        return (self.x, self.y, self.z)


_TEXT_FIELDS = ("name", "behind", "on")


@dataclass(frozen=True)
class Picture:
    """A picture taken: where from, and the objects in view."""

    pose: Pose
    in_view: frozenset[str]


@dataclass
class SceneLog:
    """What happened in the scene since it was built: the robot's positions after each action (the first one is the
    start; straight lines between them), the pictures taken, the total turn and what was dropped where."""

    positions: list[tuple[float, float, float]] = field(default_factory=list)
    pictures: list[Picture] = field(default_factory=list)
    turned_deg: float = 0.0          # sum of the turns, counter-clockwise positive
    turned_abs_deg: float = 0.0      # sum of their sizes
    picked: list[str] = field(default_factory=list)
    drops: list[tuple[str, str | None]] = field(default_factory=list)   # (object, what it went onto; None: table)
    not_found: list[str] = field(default_factory=list)   # arm: what a scan looked for and the table lacked


@dataclass
class Scene:
    """Objects, the robot's pose, probe answers, what an arm holds, and the log of what happened."""

    objects: dict[str, SceneObject] = field(default_factory=dict)
    pose: Pose = field(default_factory=Pose)
    answers: dict[str, str] = field(default_factory=dict)
    name: str = "empty room"
    holding: str | None = None       # arm: the object in the gripper
    known: set[str] = field(default_factory=set)   # objects whose place the robot knows (listed, or seen)
    strict: bool = True              # skills that ask the impossible raise SkillImpossible
    above: str | None = None         # arm: the object or fixture the gripper was last sent above (gt)
    log: SceneLog = field(default_factory=SceneLog)

    def __post_init__(self) -> None:
        if not self.log.positions:
            self.log.positions.append(self.pose.position())
        self._look()

    # ---- loading and saving
    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, name: str = "") -> "Scene":
        """Build from a parsed YAML mapping; ValueError names the bad entry."""
        cfg = cfg or {}
        if not isinstance(cfg, Mapping):
            raise ValueError(f"scene {name!r}: expected a mapping with objects, robot, answers; got {cfg!r}")
        allowed = {"name", "robot", "objects", "answers", "known", "strict"}
        unknown = sorted(set(cfg) - allowed)
        if unknown:
            raise ValueError(f"scene {name!r}: unknown fields {unknown}; known: {', '.join(sorted(allowed))}")
        try:
            pose = Pose(**{k: float(v) for k, v in (cfg.get("robot") or {}).items()})
            objects: dict[str, SceneObject] = {}
            for entry in cfg.get("objects") or []:
                obj = SceneObject(**{k: _field_value(k, v) for k, v in entry.items()})
                if obj.name in objects:
                    raise ValueError(f"object {obj.name!r} appears twice")
                objects[obj.name] = obj
            answers = {str(k): str(v) for k, v in (cfg.get("answers") or {}).items()}
            known = {str(k) for k in cfg.get("known") or []}
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"scene {name!r}: {exc} (objects need name, x, y; optional z, size, below, range, "
                             "behind, on, fixture)") from None
        missing = sorted((known | {o.on for o in objects.values() if o.on} | {o.behind for o in objects.values()
                                                                              if o.behind}) - set(objects))
        if missing:
            raise ValueError(f"scene {name!r}: {missing} named in known, on or behind but not among its objects")
        return cls(objects, pose, answers, str(cfg.get("name") or name or "scene"), known=known,
                   strict=bool(cfg.get("strict", True)))

    def to_config(self) -> dict[str, Any]:
        """The scene as it stands, in the YAML form ``from_config`` reads (fields at their default left out)."""
        defaults = {f.name: f.default for f in fields(SceneObject)}
        objects = [{k: v for k, v in vars(o).items() if k in ("name", "x", "y") or v != defaults[k]}
                   for o in self.objects.values()]
        out: dict[str, Any] = {"name": self.name, "robot": vars(self.pose).copy(), "objects": objects}
        if self.known:
            out["known"] = sorted(self.known)
        if self.answers:
            out["answers"] = dict(self.answers)
        if not self.strict:
            out["strict"] = False
        return out

    def copy(self) -> "Scene":
        return copy.deepcopy(self)

    # ---- what the camera sees
    def _relative(self, obj: SceneObject) -> tuple[float, float, float]:
        """(horizontal distance, bearing in degrees left of the heading, height difference) of an object."""
        dx, dy = obj.x - self.pose.x, obj.y - self.pose.y
        bearing = (math.degrees(math.atan2(dy, dx)) - self.pose.yaw + 180.0) % 360.0 - 180.0
        return math.hypot(dx, dy), bearing, obj.z - self.pose.z

    def visible(self, name: str) -> bool:
        """iv: the object is in the field of view, in range, and not hidden from here (by height or by what it is
        behind); an object in the gripper is not."""
        obj = self.objects.get(name)
        if obj is None or (obj.below is not None and self.pose.z > obj.below) or name == self.holding:
            return False
        dist, bearing, dz = self._relative(obj)
        reach = RANGE_M if obj.range is None else min(obj.range, RANGE_M)
        return math.hypot(dist, dz) <= reach and abs(bearing) <= FOV_DEG / 2 and not self._hidden(obj)

    def _hidden(self, obj: SceneObject) -> bool:
        """Whether the object it is behind stands between the camera and it (seen from above its top, it does not)."""
        blocker = self.objects.get(obj.behind or "")
        if blocker is None or self.pose.z > blocker.z + blocker.size / 2 + OVER_TOP_M:
            return False
        return _segment_distance((self.pose.x, self.pose.y), (obj.x, obj.y), (blocker.x, blocker.y)) < blocker.size / 2

    def in_view(self) -> frozenset[str]:
        """Every object the camera sees now."""
        return frozenset(n for n in self.objects if self.visible(n))

    def _look(self) -> None:
        """What is in view becomes known (the robot remembers where it saw it)."""
        self.known |= self.in_view()

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

    # ---- what the drone's actions do
    def turn(self, degrees_ccw: float) -> None:
        self.pose.yaw = (self.pose.yaw + degrees_ccw + 180.0) % 360.0 - 180.0
        self.log.turned_deg += degrees_ccw
        self.log.turned_abs_deg += abs(degrees_ccw)
        self._look()

    def move(self, forward_m: float, left_m: float = 0.0, up_m: float = 0.0) -> None:
        """Move in the robot's frame (forward along its yaw, left, up); the drone never goes below the floor."""
        a = math.radians(self.pose.yaw)
        self.pose.x += forward_m * math.cos(a) - left_m * math.sin(a)
        self.pose.y += forward_m * math.sin(a) + left_m * math.cos(a)
        self.pose.z = max(0.0, self.pose.z + up_m)
        self.log.positions.append(self.pose.position())
        self._look()

    def scan(self, name: str) -> int:
        """s: turn SCAN_STEP_DEG at a time until the object is visible, at most SCAN_STEPS times; returns the turns."""
        for turns in range(SCAN_STEPS + 1):
            if self.visible(name) or turns == SCAN_STEPS:
                return turns
            self.turn(SCAN_STEP_DEG)
        return SCAN_STEPS

    def scan_abstract(self, question: str) -> int:
        """sa: scan until any object the question names (whole words, case ignored; the longest name where one
        holds another) is visible (a full turn if none is)."""
        text = " ".join(re.findall(r"[a-z0-9']+", question.lower()))
        named = [n for n in self.objects if re.search(rf"(?<![a-z0-9']){re.escape(n.lower())}(?![a-z0-9'])", text)]
        named = [n for n in named if not any(n != m and n.lower() in m.lower() for m in named)]   # "coin purse"
        for turns in range(SCAN_STEPS + 1):
            if any(self.visible(n) for n in named) or turns == SCAN_STEPS:
                return turns
            self.turn(SCAN_STEP_DEG)
        return SCAN_STEPS

    def take_picture(self) -> None:
        """tp: a picture of what is in view now (kept in the log)."""
        self.log.pictures.append(Picture(copy.copy(self.pose), self.in_view()))

    def approach(self, name: str) -> tuple[float, float] | None:
        """Where goto g(name) ends: (distance to fly forward after facing it, degrees to turn); None if the scene has
        no such object (the robot stays where it is)."""
        obj = self.objects.get(name)
        if obj is None:
            return None
        dist, bearing, _ = self._relative(obj)
        return max(0.0, dist - APPROACH_M), bearing

    def goto(self, name: str) -> bool:
        """g: face the object and stop APPROACH_M in front of it, at the same height. The drone must know where it
        is (SkillImpossible in a strict scene; elsewhere no move and False)."""
        if name not in self.known or name not in self.objects:
            if self.strict:
                raise SkillImpossible(f"g({name!r}): the drone has not seen {name!r} and its context does not list "
                                      f"it, so it does not know where to fly (look for it first: s({name!r}))")
            return False
        forward, bearing = self.approach(name)
        self.turn(bearing)
        self.move(forward)
        return True

    # ---- an arm
    def arm_goto(self, name: str) -> bool:
        """gt: the gripper goes above the object or fixture (SkillImpossible if the table has none, or it is held)."""
        obj = self.objects.get(name)
        if obj is None or name == self.holding:
            if self.strict:
                why = "it is in the gripper" if obj is not None else "there is no such object on the table"
                raise SkillImpossible(f"gt({name!r}): {why}")
            return False
        self.pose.x, self.pose.y = obj.x, obj.y
        self.above = name
        self.log.positions.append(self.pose.position())
        return True

    def arm_move(self, x_m: float, y_m: float) -> None:
        """mv: the gripper goes to a point of the table, above nothing in particular."""
        self.pose.x, self.pose.y = x_m, y_m
        self.above = None
        self.log.positions.append(self.pose.position())

    def pick(self, name: str) -> bool:
        """pi: grasp the object under the gripper; it is held from now on (see the module docstring for what it
        needs). In a scene that is not strict, an impossible pick holds nothing and returns False."""
        problem = self._pick_problem(name)
        if problem:
            if self.strict:
                raise SkillImpossible(f"pi({name!r}): {problem}")
            return False
        self.objects[name].on = None
        self.holding = name
        self.log.picked.append(name)
        return True

    def _pick_problem(self, name: str) -> str:
        obj = self.objects.get(name)
        if obj is None:
            return "there is no such object on the table"
        if self.holding is not None:
            return f"the gripper already holds {self.holding!r} (drop it first: dr())"
        if obj.fixture:
            return f"{name!r} is a fixed place things go into; the gripper cannot lift it"
        if math.hypot(obj.x - self.pose.x, obj.y - self.pose.y) > GRASP_TOLERANCE_M:
            return f"the gripper is not above {name!r} (move there first: gt({name!r}), or use tk({name!r}))"
        resting = sorted(o.name for o in self.objects.values() if o.on == name)
        if resting:
            return f"{resting} rest on {name!r}; take them off first"
        return ""

    def take(self, name: str) -> bool:
        """tk: goto and pick in one motion."""
        return self.arm_goto(name) and self.pick(name)

    def drop(self) -> str | None:
        """dr: the held object goes into the fixture or onto the object (the top of its stack) the gripper is above,
        or onto the table where the gripper is; returns its name (None with an empty gripper: nothing happens)."""
        name, self.holding = self.holding, None
        if name is None:
            return None
        obj = self.objects[name]
        target = self.above if self.above in self.objects and self.above != name else None
        if target is not None and not self.objects[target].fixture:
            target = self.top_of(target)
        obj.on = target
        obj.x, obj.y = self.pose.x, self.pose.y
        self.log.drops.append((name, target))
        return name

    def top_of(self, name: str) -> str:
        """The object at the top of the stack that rests on ``name`` (``name`` itself if nothing does)."""
        seen = {name}
        while True:
            upper = next((o.name for o in self.objects.values() if o.on == name and o.name not in seen), None)
            if upper is None:
                return name
            seen.add(upper)
            name = upper

    def support_chain(self, name: str) -> list[str]:
        """What the object rests on, then what that rests on, down to the table (empty: it is on the table)."""
        chain: list[str] = []
        below = self.objects[name].on
        while below is not None and below not in chain and below in self.objects:
            chain.append(below)
            below = self.objects[below].on
        return chain

    def arm_scan(self, name: str) -> bool:
        """sc: look over the table; an object on it becomes known. One that is not there is not found: the scan
        fails (SkillImpossible in a strict scene), so a plan for something its table lacks stops before it moves
        anything else."""
        if name not in self.objects:
            self.log.not_found.append(name)
            if self.strict:
                raise SkillImpossible(f"sc({name!r}): looked over the table and found no {name}")
            return False
        self.known.add(name)
        return True


def _field_value(key: str, value: Any) -> Any:
    if key in _TEXT_FIELDS:
        return None if value is None else str(value)
    if key == "fixture":
        return bool(value)
    return None if value is None else float(value)


def _segment_distance(a: tuple[float, float], b: tuple[float, float], p: tuple[float, float]) -> float:
    """Distance from point p to the segment a-b (horizontal plane)."""
    ax, ay = a
    dx, dy = b[0] - ax, b[1] - ay
    length2 = dx * dx + dy * dy
    t = 0.0 if length2 == 0 else max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / length2))
    return math.hypot(ax + t * dx - p[0], ay + t * dy - p[1])


def _is_file(path: Path) -> bool:
    """Whether the path is a file; False for a text no file can be named (inline YAML longer than a file name)."""
    try:
        return path.is_file()
    except OSError:
        return False


def load_scene(source: str = "") -> Scene:
    """A scene from a file path, a name in config/scenes (``bedroom_keys``), or inline YAML; "" = the empty room.

    ValueError / FileNotFoundError say what is wrong (the executor turns them into a start-up error)."""
    source = source.strip()
    if not source:
        return Scene(strict=False)
    path = Path(source)
    named = config_dir() / "scenes" / f"{source}.yaml"
    for candidate in (path, named):
        if "\n" not in source and candidate.suffix in (".yaml", ".yml") and _is_file(candidate):
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
