"""Goal conditions: what a labelled task asks the robot to bring about, judged on what a plan did in the task's scene.

A condition is a small declarative form in the task's YAML (``goal:``). It names the objects the task is about,
says in which scene variants a plan must be run (``variants``: the scene builder, evaluation/scene_builder.py, adds
the objects the context does not list: a target out of view, an object under or behind a piece of furniture, or no
such object at all), and judges one run in one variant (``judge``) on the scene's log and final state, and on the
value the plan returned. A plan achieves its task when it runs without a run-time error and passes in every variant.
The conditions are semantic: any plan that brings the scene to the goal passes, not only the reference.

Drone (config/skills/drone.yaml):

==========================================  =====================================================================
``{photograph: X}``                          a picture is taken while X is in view (X out of view at the start
                                             unless the context lists it)
``{either: [A, B]}``                         run with each unlisted one there alone, and with none there: the plan
                                             reports one that is there (its returned value names it, or a picture
                                             shows it) and none that is not; with none there it reports none
``{check: X, on|under|behind: F}``           run with X on/under/behind F and with no X (X elsewhere, out of view,
                                             when the context lists it): the plan reports X (a positive answer, X
                                             named, or a picture of X) exactly when it is there
``{tool: [T1, T2]}``                         any of the tools the context lists is photographed or named; when it
                                             lists none, the plan looks around (turns 270 degrees or more), flies to
                                             nothing and names nothing as the tool
``{avoid: H, gain_cm: 30}``                  the distance to the hazard H never falls below its starting value (a
                                             move toward it fails the task) and ends at least ``gain_cm`` larger
``{approach: X, beyond_cm: N}``              run with X ahead at N + 100 cm and at N / 2 cm: the drone flies to
                                             within N cm of X only in the first, and photographs X in both
``{photos_around: k}``                       exactly k pictures whose headings are evenly spaced around the full
                                             circle, taken in place
``{path: {length_cm: L, farthest_cm: D}}``   a flight of L cm (10%) that returns to its start and reaches D cm (10%)
                                             from it at its farthest
==========================================  =====================================================================

Arm (config/skills/arm.yaml): ``{placed: {X: D, Y: [x, y]}, unmoved: [Z]}``: at the end X rests on D (in D, when D
is a fixture such as a bin or basket, directly or on something in it), Y rests on the table within 3 cm of (x, y)
cm, nothing named is left in the gripper, and Z is where it was. ``{missing: X}``: X is not on the table; the arm
moves nothing and holds nothing, and a scan that finds no X is the plan's right end (the robot reports it cannot).

Each condition also gives its objects' roles (``roles``): what a plan must do with each key object, read from its
calls (``role_ok``): approached (the drone's goto), sought (a scan, a visibility check or a goto), measured (a
distance query), picked (the arm's pick or take), dropped into or onto (a goto of it followed by a drop).
"""
from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence

from timely_llm_ros.core.skills.context import normalise_name
from timely_llm_ros.evaluation.scene import Scene

# ---- what a returned value says
_NEGATIVE = frozenset("no not none nothing false absent missing nowhere neither cannot can't couldn't".split())
_POSITIVE = frozenset("yes true found there present seen spotted visible located".split())
_WORD = re.compile(r"[a-z0-9']+")


def answer_polarity(value: str | None) -> int:
    """+1 when a returned value says yes (``'yes'``, ``'found'``, ``True``), -1 when it says no (``'no'``,
    ``'not found'``, ``'none'``, ``False``), 0 otherwise (no value, or a name alone)."""
    words = set(_WORD.findall((value or "").lower()))
    if words & _NEGATIVE:
        return -1
    return 1 if words & _POSITIVE else 0


def names_object(value: str | None, name: str) -> bool:
    """Whether a returned value names the object (whole words, case and articles ignored)."""
    text = " ".join(_WORD.findall((value or "").lower()))
    target = " ".join(_WORD.findall(normalise_name(name)))
    return bool(target) and re.search(rf"(?<![a-z0-9']){re.escape(target)}(?![a-z0-9'])", text) is not None


# ---- what a plan did, as a condition sees it
@dataclass(frozen=True)
class Target:
    """An object a condition needs in a scene variant: ``where`` it goes (``hidden``: out of view, near the robot;
    ``on``/``under``/``behind``: relative to the object ``ref``; ``ahead``: ``distance_cm`` straight ahead)."""

    name: str
    where: str
    ref: str = ""
    distance_cm: float = 0.0


@dataclass(frozen=True)
class Variant:
    """One scene a plan must be run in: the targets added to the context's scene, and which of the condition's
    objects are there."""

    name: str
    targets: tuple[Target, ...] = ()
    present: frozenset[str] = frozenset()


@dataclass
class Outcome:
    """What a plan did in one variant: the scene at the start and at the end (its log), the calls the robot ran,
    the value it returned (as text, None if it returned nothing) and the run-time error ("" if none)."""

    start: Scene
    end: Scene
    calls: Sequence[Any]                 # SkillCall-like: .name, .args
    value: str | None = None
    error: str = ""

    def reported(self, objects: Collection[str]) -> set[str]:
        """The objects the plan told the user about: none when its returned value says no; else those the value
        names, or when it names none, those a picture showed."""
        if answer_polarity(self.value) < 0:
            return set()
        named = {o for o in objects if names_object(self.value, o)}
        if named:
            return named
        return {o for o in objects for p in self.end.log.pictures if o in p.in_view}


@dataclass(frozen=True)
class Verdict:
    """A condition's judgement of one run; ``why`` says what was missing (empty when achieved)."""

    achieved: bool
    why: str = ""
    moved_toward: bool = False


@dataclass(frozen=True)
class Role:
    """What a plan must do with one of the task's objects (any one of ``objects`` will do); ``moved_to`` takes the
    point (cm) instead."""

    objects: tuple[str, ...]
    role: str        # approached | sought | measured | picked | dropped_on | moved_to | not_picked
    point: tuple[float, float] | None = None


# the project's drone and arm skills that give an object each role (config/skills/drone.yaml, arm.yaml)
ROLE_SKILLS = {"approached": {"g"}, "sought": {"s", "iv", "g", "sc"}, "measured": {"od"}, "picked": {"pi", "tk"}}
_GRIPPER_MOVES = ("dr", "gt", "mv", "tk")


def role_ok(role: Role, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> bool:
    """Whether the plan's calls (name, arguments), in text order, give the object its role."""
    wanted = {normalise_name(o) for o in role.objects}

    def names(args: tuple[Any, ...]) -> bool:
        return bool(args) and isinstance(args[0], str) and normalise_name(args[0]) in wanted

    if role.role in ROLE_SKILLS:
        return any(n in ROLE_SKILLS[role.role] and names(a) for n, a in calls)
    if role.role == "not_picked":
        return not any(n in ROLE_SKILLS["picked"] and names(a) for n, a in calls)
    if role.role == "dropped_on":    # a goto of it, then a drop before the gripper goes anywhere else
        return any(n == "gt" and names(a) and _drops_next(calls[i + 1:]) for i, (n, a) in enumerate(calls))
    if role.role == "moved_to":      # a move to the point, then a drop
        return any(n == "mv" and _at(a, role.point) and _drops_next(calls[i + 1:]) for i, (n, a) in enumerate(calls))
    raise ValueError(f"unknown role {role.role!r}")


def _drops_next(calls: Sequence[tuple[str, tuple[Any, ...]]]) -> bool:
    """Whether the gripper's next move among the calls is a drop."""
    moves = [n for n, _ in calls if n in _GRIPPER_MOVES]
    return bool(moves) and moves[0] == "dr"


def _at(args: tuple[Any, ...], point: tuple[float, float] | None) -> bool:
    return (point is not None and len(args) == 2 and all(isinstance(a, (int, float)) for a in args)
            and math.isclose(args[0], point[0]) and math.isclose(args[1], point[1]))


def _plain(value: float) -> float | int:
    """A number as YAML should show it: 40, not 40.0."""
    return int(value) if float(value).is_integer() else value


# ---- the conditions
class GoalCondition(ABC):
    """One kind of goal, written in YAML under its ``key`` (goal_kinds() lists them)."""

    key: ClassVar[str]
    robot_type: ClassVar[str]

    @abstractmethod
    def objects(self) -> tuple[str, ...]:
        """Every object the condition names."""

    @abstractmethod
    def variants(self, listed: Collection[str]) -> list[Variant]:
        """The scenes to run a plan in, given the objects the task's context lists."""

    @abstractmethod
    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        """Whether the run reached the goal in this variant."""

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        """What a plan must do with the task's key objects (() when the task gives no object a role)."""
        return ()

    def right_stop(self, outcome: Outcome) -> bool:
        """Whether the run's run-time error is the end this task asks for (the robot reporting that it cannot do
        the task); False for every condition but ``missing``."""
        return False

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """The YAML form."""


def _as_listed(listed: Collection[str]) -> set[str]:
    return {normalise_name(o) for o in listed}


@dataclass(frozen=True)
class Photograph(GoalCondition):
    key: ClassVar[str] = "photograph"
    robot_type: ClassVar[str] = "drone"
    target: str

    def objects(self) -> tuple[str, ...]:
        return (self.target,)

    def variants(self, listed: Collection[str]) -> list[Variant]:
        if normalise_name(self.target) in _as_listed(listed):
            return [Variant("in view", (), frozenset({self.target}))]
        return [Variant(f"{self.target} out of view", (Target(self.target, "hidden"),), frozenset({self.target}))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        pictures = outcome.end.log.pictures
        if any(self.target in p.in_view for p in pictures):
            return Verdict(True)
        return Verdict(False, f"no picture shows {self.target!r}" if pictures else "took no picture")

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        return (Role((self.target,), "approached"),)

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.target}


@dataclass(frozen=True)
class Either(GoalCondition):
    key: ClassVar[str] = "either"
    robot_type: ClassVar[str] = "drone"
    options: tuple[str, ...]

    def objects(self) -> tuple[str, ...]:
        return self.options

    def variants(self, listed: Collection[str]) -> list[Variant]:
        there = _as_listed(listed)
        shown = [o for o in self.options if normalise_name(o) in there]
        unlisted = [o for o in self.options if normalise_name(o) not in there]
        if not unlisted:
            return [Variant("as listed", (), frozenset(shown))]
        out = [Variant(f"{o} there", (Target(o, "hidden"),), frozenset(shown + [o])) for o in unlisted]
        return out + [Variant("none there" if not shown else "only the listed", (), frozenset(shown))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        reported = outcome.reported(self.options)
        absent = [o for o in self.options if o not in variant.present]
        wrong = sorted(set(reported) & set(absent))
        if wrong:
            return Verdict(False, f"reported {wrong}, which {'is' if len(wrong) == 1 else 'are'} not there")
        if variant.present:
            if reported:
                return Verdict(True)
            return Verdict(False, f"did not report {sorted(variant.present)}, which is there")
        if answer_polarity(outcome.value) > 0:
            return Verdict(False, f"answered {outcome.value!r} with none of {list(self.options)} there")
        return Verdict(True)

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        return tuple(Role((o,), "sought") for o in self.options)

    def to_config(self) -> dict[str, Any]:
        return {self.key: list(self.options)}


RELATIONS = ("on", "under", "behind")


@dataclass(frozen=True)
class Check(GoalCondition):
    key: ClassVar[str] = "check"
    robot_type: ClassVar[str] = "drone"
    target: str
    relation: str        # one of RELATIONS
    furniture: str

    def objects(self) -> tuple[str, ...]:
        return (self.target, self.furniture)

    def variants(self, listed: Collection[str]) -> list[Variant]:
        there = Variant(f"{self.target} {self.relation} the {self.furniture}",
                        (Target(self.target, self.relation, self.furniture),), frozenset({self.target}))
        if normalise_name(self.target) in _as_listed(listed):      # the context says it is here: somewhere else
            return [there, Variant(f"the {self.target} elsewhere", (Target(self.target, "hidden"),), frozenset())]
        return [there, Variant(f"no {self.target}", (), frozenset())]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        reported = bool(outcome.reported([self.target])) or answer_polarity(outcome.value) > 0
        if variant.present and not reported:
            return Verdict(False, f"did not report the {self.target} {self.relation} the {self.furniture}"
                           + (f" (answered {outcome.value!r})" if outcome.value is not None else ""))
        if not variant.present and reported:
            return Verdict(False, f"reported a {self.target} that is not there (answered {outcome.value!r})")
        return Verdict(True)

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        return (Role((self.target,), "sought"), Role((self.furniture,), "approached"))

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.target, self.relation: self.furniture}


LOOK_AROUND_DEG = 270.0


@dataclass(frozen=True)
class Tool(GoalCondition):
    key: ClassVar[str] = "tool"
    robot_type: ClassVar[str] = "drone"
    tools: tuple[str, ...]

    def objects(self) -> tuple[str, ...]:
        return self.tools

    def variants(self, listed: Collection[str]) -> list[Variant]:
        there = _as_listed(listed)
        return [Variant("as listed", (), frozenset(t for t in self.tools if normalise_name(t) in there))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        others = [o for o in outcome.start.objects if o not in self.tools]
        named_other = [o for o in others if names_object(outcome.value, o)]
        if named_other:
            return Verdict(False, f"named {named_other}, which would not do")
        if variant.present:
            if outcome.reported(sorted(variant.present)):
                return Verdict(True)
            return Verdict(False, f"neither photographed nor named any of {sorted(variant.present)}")
        flew = [c for c in outcome.calls if c.name == "g"]
        if flew:
            return Verdict(False, f"flew to {flew[0].args[0]!r}, which would not do (no tool for it here)")
        if answer_polarity(outcome.value) > 0:
            return Verdict(False, f"answered {outcome.value!r} with no such tool here")
        if outcome.end.log.turned_abs_deg < LOOK_AROUND_DEG:
            return Verdict(False, "did not look around for one (no tool is in view at the start)")
        return Verdict(True)

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        there = _as_listed(listed)
        present = tuple(t for t in self.tools if normalise_name(t) in there)
        return (Role(present, "approached"),) if present else ()

    def to_config(self) -> dict[str, Any]:
        return {self.key: list(self.tools)}


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.dist(a, b)


def _segment_distance(a: Sequence[float], b: Sequence[float], p: Sequence[float]) -> float:
    d = [bi - ai for ai, bi in zip(a, b)]
    length2 = sum(x * x for x in d)
    t = 0.0 if length2 == 0 else max(0.0, min(1.0, sum((pi - ai) * di for ai, pi, di in zip(a, p, d)) / length2))
    return math.dist([ai + t * di for ai, di in zip(a, d)], p)


def closest_approach(positions: Sequence[Sequence[float]], point: Sequence[float]) -> float:
    """The least distance from ``point`` along the straight moves between consecutive positions."""
    if len(positions) == 1:
        return _distance(positions[0], point)
    return min(_segment_distance(a, b, point) for a, b in zip(positions, positions[1:]))


TOWARD_TOLERANCE_M = 0.01


@dataclass(frozen=True)
class Avoid(GoalCondition):
    key: ClassVar[str] = "avoid"
    robot_type: ClassVar[str] = "drone"
    hazard: str
    gain_cm: float = 30.0

    def objects(self) -> tuple[str, ...]:
        return (self.hazard,)

    def variants(self, listed: Collection[str]) -> list[Variant]:
        return [Variant("as placed", (), frozenset({self.hazard}))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        hazard = outcome.start.objects[self.hazard].position()
        positions = outcome.end.log.positions
        start, end = _distance(positions[0], hazard), _distance(positions[-1], hazard)
        closest = closest_approach(positions, hazard)
        if closest < start - TOWARD_TOLERANCE_M:
            return Verdict(False, f"moved toward the {self.hazard}: {100 * start:.0f} cm away at the start, "
                           f"{100 * closest:.0f} cm at the closest", moved_toward=True)
        if end < start + self.gain_cm / 100:
            return Verdict(False, f"ended {100 * (end - start):.0f} cm farther from the {self.hazard} "
                           f"(at least {self.gain_cm:.0f} cm wanted)")
        return Verdict(True)

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.hazard, **({"gain_cm": _plain(self.gain_cm)} if self.gain_cm != 30.0 else {})}


FAR_EXTRA_CM = 100.0


@dataclass(frozen=True)
class Approach(GoalCondition):
    key: ClassVar[str] = "approach"
    robot_type: ClassVar[str] = "drone"
    target: str
    beyond_cm: float

    def objects(self) -> tuple[str, ...]:
        return (self.target,)

    def variants(self, listed: Collection[str]) -> list[Variant]:
        far, near = self.beyond_cm + FAR_EXTRA_CM, self.beyond_cm / 2
        return [Variant(f"{self.target} {far:.0f} cm ahead", (Target(self.target, "ahead", distance_cm=far),),
                        frozenset({self.target})),
                Variant(f"{self.target} {near:.0f} cm ahead", (Target(self.target, "ahead", distance_cm=near),),
                        frozenset({self.target}))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        target = outcome.start.objects[self.target].position()
        positions = outcome.end.log.positions
        start = _distance(positions[0], target)
        shots = [p for p in outcome.end.log.pictures if self.target in p.in_view]
        if not shots:
            return Verdict(False, f"no picture shows the {self.target}")
        if start * 100 > self.beyond_cm:
            near = min(_distance(p.pose.position(), target) for p in shots)
            if near * 100 > self.beyond_cm:
                return Verdict(False, f"photographed the {self.target} from {100 * near:.0f} cm: it is farther than "
                               f"{self.beyond_cm:.0f} cm, so the drone should have flown to it")
            return Verdict(True)
        if closest_approach(positions, target) < start - 0.1:
            return Verdict(False, f"flew toward the {self.target} although it was only {100 * start:.0f} cm away")
        return Verdict(True)

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        return (Role((self.target,), "measured"), Role((self.target,), "approached"))

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.target, "beyond_cm": _plain(self.beyond_cm)}


IN_PLACE_M = 0.3


@dataclass(frozen=True)
class PhotosAround(GoalCondition):
    key: ClassVar[str] = "photos_around"
    robot_type: ClassVar[str] = "drone"
    count: int

    def objects(self) -> tuple[str, ...]:
        return ()

    def variants(self, listed: Collection[str]) -> list[Variant]:
        return [Variant("as listed")]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        pictures = outcome.end.log.pictures
        if len(pictures) != self.count:
            return Verdict(False, f"took {len(pictures)} pictures, not {self.count}")
        start = outcome.end.log.positions[0]
        if any(_distance(start, p.pose.position()) > IN_PLACE_M for p in pictures):
            return Verdict(False, "moved away from where it started between pictures")
        headings = sorted(p.pose.yaw % 360.0 for p in pictures)
        gaps = [(b - a) for a, b in zip(headings, headings[1:])] + [headings[0] + 360.0 - headings[-1]]
        step = 360.0 / self.count
        tolerance = min(20.0, step / 3)
        if any(abs(g - step) > tolerance for g in gaps):
            return Verdict(False, f"pictures at headings {[round(h) for h in headings]}: not evenly around the "
                           "circle")
        return Verdict(True)

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.count}


@dataclass(frozen=True)
class FlightPath(GoalCondition):
    key: ClassVar[str] = "path"
    robot_type: ClassVar[str] = "drone"
    length_cm: float
    farthest_cm: float
    closed: bool = True

    def objects(self) -> tuple[str, ...]:
        return ()

    def variants(self, listed: Collection[str]) -> list[Variant]:
        return [Variant("as listed")]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        positions = outcome.end.log.positions
        length = 100 * sum(_distance(a, b) for a, b in zip(positions, positions[1:]))
        farthest = 100 * max(_distance(positions[0], p) for p in positions)
        back = 100 * _distance(positions[0], positions[-1])
        if abs(length - self.length_cm) > 0.1 * self.length_cm:
            return Verdict(False, f"flew {length:.0f} cm, not {self.length_cm:.0f}")
        if abs(farthest - self.farthest_cm) > max(15.0, 0.1 * self.farthest_cm):
            return Verdict(False, f"went {farthest:.0f} cm from its start at the farthest, not {self.farthest_cm:.0f}")
        if self.closed and back > 20.0:
            return Verdict(False, f"ended {back:.0f} cm from where it started")
        return Verdict(True)

    def to_config(self) -> dict[str, Any]:
        body: dict[str, Any] = {"length_cm": _plain(self.length_cm), "farthest_cm": _plain(self.farthest_cm)}
        if not self.closed:
            body["closed"] = False
        return {self.key: body}


PLACE_TOLERANCE_M = 0.03


def _moved(start: Scene, end: Scene, name: str) -> bool:
    """Whether the object is anywhere else at the end, or rests on something else, than at the start."""
    before, after = start.objects[name], end.objects[name]
    return (before.x, before.y, before.on) != (after.x, after.y, after.on)


@dataclass(frozen=True)
class Placed(GoalCondition):
    key: ClassVar[str] = "placed"
    robot_type: ClassVar[str] = "arm"
    placements: tuple[tuple[str, str | tuple[float, float]], ...]
    unmoved: tuple[str, ...] = ()

    def objects(self) -> tuple[str, ...]:
        out = [o for o, _ in self.placements] + [d for _, d in self.placements if isinstance(d, str)]
        return tuple(dict.fromkeys(out + list(self.unmoved)))

    def variants(self, listed: Collection[str]) -> list[Variant]:
        return [Variant("as listed", (), frozenset(self.objects()))]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        scene, start = outcome.end, outcome.start
        for obj, dest in self.placements:
            if scene.holding == obj:
                return Verdict(False, f"the {obj} is still in the gripper")
            if isinstance(dest, str):
                chain = scene.support_chain(obj)
                fixture = scene.objects[dest].fixture
                if not chain or (chain[0] != dest and not (fixture and dest in chain)):
                    where = f"on the {chain[0]}" if chain else "on the table"
                    return Verdict(False, f"the {obj} is {where}, not {'in' if fixture else 'on'} the {dest}")
            else:
                o = scene.objects[obj]
                off = math.hypot(o.x - dest[0] / 100, o.y - dest[1] / 100)
                if o.on is not None or off > PLACE_TOLERANCE_M:
                    return Verdict(False, f"the {obj} is at ({100 * o.x:.0f}, {100 * o.y:.0f}) cm"
                                   + (f" on the {o.on}" if o.on else "") + f", not at {dest}")
        for obj in self.unmoved:
            if scene.holding == obj or _moved(start, scene, obj):
                return Verdict(False, f"moved the {obj}, which was to stay")
        return Verdict(True)

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        out: list[Role] = []
        for obj, dest in self.placements:
            out.append(Role((obj,), "picked"))
            out.append(Role((dest,), "dropped_on") if isinstance(dest, str) else Role((), "moved_to", dest))
        return tuple(out + [Role((o,), "not_picked") for o in self.unmoved])

    def to_config(self) -> dict[str, Any]:
        body: dict[str, Any] = {self.key: {o: (d if isinstance(d, str) else [_plain(c) for c in d])
                                           for o, d in self.placements}}
        if self.unmoved:
            body["unmoved"] = list(self.unmoved)
        return body


@dataclass(frozen=True)
class Missing(GoalCondition):
    """The task names an object its table lacks: the arm moves nothing, holds nothing, and its scan for the object
    is what ends the plan (or the plan ends without moving anything). A plan that moves a listed object instead
    fails, whatever it was asked."""

    key: ClassVar[str] = "missing"
    robot_type: ClassVar[str] = "arm"
    target: str

    def objects(self) -> tuple[str, ...]:
        return (self.target,)

    def variants(self, listed: Collection[str]) -> list[Variant]:
        if normalise_name(self.target) in _as_listed(listed):
            raise ValueError(f"missing: {self.target!r} is listed in the task's context")
        return [Variant(f"no {self.target}", (), frozenset())]

    def judge(self, outcome: Outcome, variant: Variant) -> Verdict:
        scene, start = outcome.end, outcome.start
        if scene.holding is not None:
            return Verdict(False, f"holds the {scene.holding} instead")
        for name in start.objects:
            if _moved(start, scene, name):
                return Verdict(False, f"moved the {name} instead")
        return Verdict(True)

    def right_stop(self, outcome: Outcome) -> bool:
        """The run stopped at a scan that found no X: a strict scene raises at the first scan that finds nothing,
        so that scan is the error's source when it is the last one logged (a scene that is not strict raises
        nothing there, and its errors are the plan's)."""
        not_found = outcome.end.log.not_found
        return (bool(outcome.error) and outcome.end.strict and bool(not_found)
                and normalise_name(not_found[-1]) == normalise_name(self.target))

    def roles(self, listed: Collection[str]) -> tuple[Role, ...]:
        return (Role((self.target,), "sought"),)

    def to_config(self) -> dict[str, Any]:
        return {self.key: self.target}


# ---- reading the YAML form
def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value.strip()


def _texts(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list of strings, got {value!r}")
    return tuple(_text(v, what) for v in value)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    return float(value)


def _read_placed(cfg: Mapping[str, Any]) -> Placed:
    body = cfg["placed"]
    if not isinstance(body, Mapping) or not body:
        raise ValueError(f"placed must map each object to where it goes (a name or [x, y] in cm), got {body!r}")
    placements: list[tuple[str, str | tuple[float, float]]] = []
    for obj, dest in body.items():
        if isinstance(dest, list):
            if len(dest) != 2:
                raise ValueError(f"placed: {obj!r} -> {dest!r}: coordinates are [x, y] in cm")
            placements.append((_text(obj, "placed object"), (_number(dest[0], "x"), _number(dest[1], "y"))))
        else:
            placements.append((_text(obj, "placed object"), _text(dest, f"where {obj!r} goes")))
    return Placed(tuple(placements), _texts(cfg["unmoved"], "unmoved") if "unmoved" in cfg else ())


def _read_check(cfg: Mapping[str, Any]) -> Check:
    relations = [r for r in RELATIONS if r in cfg]
    if len(relations) != 1:
        raise ValueError(f"check needs exactly one of {', '.join(RELATIONS)} (the furniture), got {dict(cfg)}")
    return Check(_text(cfg["check"], "check"), relations[0], _text(cfg[relations[0]], relations[0]))


def _read_path(cfg: Mapping[str, Any]) -> FlightPath:
    body = cfg["path"]
    if not isinstance(body, Mapping) or not {"length_cm", "farthest_cm"} <= set(body):
        raise ValueError(f"path needs length_cm and farthest_cm (closed: optional, true), got {body!r}")
    unknown = sorted(set(body) - {"length_cm", "farthest_cm", "closed"})
    if unknown:
        raise ValueError(f"path: unknown fields {unknown}")
    return FlightPath(_number(body["length_cm"], "length_cm"), _number(body["farthest_cm"], "farthest_cm"),
                bool(body.get("closed", True)))


def _read_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"photos_around must be a whole number >= 1, got {value!r}")
    return value


_READERS: dict[str, tuple[frozenset[str], Callable[[Mapping[str, Any]], GoalCondition]]] = {
    "photograph": (frozenset({"photograph"}), lambda c: Photograph(_text(c["photograph"], "photograph"))),
    "either": (frozenset({"either"}), lambda c: Either(_texts(c["either"], "either"))),
    "check": (frozenset({"check", *RELATIONS}), _read_check),
    "tool": (frozenset({"tool"}), lambda c: Tool(_texts(c["tool"], "tool"))),
    "avoid": (frozenset({"avoid", "gain_cm"}),
              lambda c: Avoid(_text(c["avoid"], "avoid"), _number(c.get("gain_cm", 30.0), "gain_cm"))),
    "approach": (frozenset({"approach", "beyond_cm"}),
                 lambda c: Approach(_text(c["approach"], "approach"), _number(c.get("beyond_cm"), "beyond_cm"))),
    "photos_around": (frozenset({"photos_around"}), lambda c: PhotosAround(_read_count(c["photos_around"]))),
    "path": (frozenset({"path"}), _read_path),
    "placed": (frozenset({"placed", "unmoved"}), _read_placed),
    "missing": (frozenset({"missing"}), lambda c: Missing(_text(c["missing"], "missing"))),
}


def read_goal(cfg: Any) -> GoalCondition:
    """A goal condition from its YAML form; ValueError says what is wrong and which forms there are."""
    if not isinstance(cfg, Mapping):
        raise ValueError(f"a goal is a mapping such as {{photograph: cat}}, got {cfg!r}")
    cfg = {("on" if k is True else k): v for k, v in cfg.items()}   # YAML 1.1 reads an unquoted on: as true
    kinds = [k for k in _READERS if k in cfg]
    if len(kinds) != 1:
        raise ValueError(f"a goal needs exactly one of {', '.join(_READERS)}, got {sorted(map(str, cfg))}")
    allowed, reader = _READERS[kinds[0]]
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ValueError(f"goal {kinds[0]}: unknown fields {unknown} (it takes {', '.join(sorted(allowed))})")
    return reader(cfg)


def goal_kinds() -> dict[str, type[GoalCondition]]:
    """The condition classes by YAML key."""
    return {cls.key: cls for cls in (Photograph, Either, Check, Tool, Avoid, Approach, PhotosAround, FlightPath,
                                     Placed, Missing)}


__all__ = ["Approach", "Avoid", "Check", "Either", "GoalCondition", "Missing", "Outcome", "FlightPath", "PhotosAround", "Photograph",
           "Placed", "Role", "Target", "Tool", "Variant", "Verdict", "answer_polarity", "closest_approach",
           "goal_kinds", "names_object", "read_goal", "role_ok"]
