"""What a skill set declares about one skill: names, argument kinds, whether it acts, what a query returns, and
how a model is told about it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from timely_llm_ros.core.skills.context import DIRECTIONS

ARG_KINDS = ("int", "str", "object", "any")   # "object": a str naming an object in the scene (grounded decoding)
SKILL_KINDS = ("action", "query")
RETURN_KINDS = ("bool", "float", "str")


def shown_kind(kind: str) -> str:
    """An argument kind as prompts and messages show it: an object is a str (only grounded decoding tells them
    apart)."""
    return "str" if kind == "object" else kind


@dataclass(frozen=True)
class SkillSpec:
    """One skill of a robot: short name used in plans (``mf``), long name (``move_forward``), argument kinds.

    For a model's prompt: ``arg_names`` name the arguments (``cm``) and ``description`` says what the call does with
    them (units included); a query's ``returns`` is its value's kind (the executor hands it back)."""

    short: str
    long: str
    args: tuple[str, ...]   # each of ARG_KINDS; "int" accepts any number, "object" is a str that names an object
    kind: str               # "action" makes a segment executable; "query" does not
    returns: str | None = None  # a query's value: one of RETURN_KINDS (None: not declared, any of them)
    arg_names: tuple[str, ...] = ()   # one per argument, or () when the skill set names none
    description: str = ""
    approaches: bool = False          # it takes the robot to its object argument (a drone's goto): grounded decoding
                                      # never fills it with an object the task says to keep away from
    in_scene: bool = False            # its object must be one the scene lists (an arm picks only what lies on its
                                      # table): grounded decoding never fills it with another word of the task
    movable: bool = False             # its object must be a thing the robot can lift (an arm's pick): grounded
                                      # decoding never fills it with a fixed place the context lists (a bin)
    moves: str | None = None          # the side it moves the robot to, in the robot's frame (one of DIRECTIONS: a
                                      # drone's move_left "left"): grounded decoding leaves it out when the scene
                                      # places one of the task's hazards on that side
    grasps: bool = False              # the robot holds its object afterwards, and holds one thing at a time (an
                                      # arm's pick and take): grounded decoding admits it only with nothing held
    releases: bool = False            # the robot holds nothing afterwards (an arm's drop): admitted only while
                                      # something is held
    after: str | None = None          # the skill whose call puts the robot at this one's object (an arm's pick
                                      # grasps what its goto went above): admitted only on that call's object, with
                                      # no action between that moves the robot (core/skills/grammar.py)
    still: bool = False               # it leaves the robot where it is (an arm's scan looks over the table): a pick
                                      # may still follow the goto before it
    in_view: bool = False             # a bool query whose True means its object is in view (a drone's is_visible):
                                      # grounded decoding lets a skill that approaches take an object the scene
                                      # does not list only inside ?<this>('x')==True{...} (core/skills/grammar.py)
    searches: bool = False            # an action that looks for its object and fails where the scene lacks it (an
                                      # arm's scan): on an object the context does not list (one the task names),
                                      # grounded decoding ends the plan with it, so nothing else runs on a scene
                                      # that lacks the object (core/skills/grammar.py)

    @property
    def is_action(self) -> bool:
        return self.kind == "action"

    @property
    def object_positions(self) -> tuple[int, ...]:
        """Positions of the arguments that name an object of the scene (kind "object"): the slots grounded decoding
        fills from the goal's objects, and those evaluation and the adapter corpus read as a plan's objects."""
        return tuple(i for i, k in enumerate(self.args) if k == "object")

    def signature(self) -> str:
        """How a prompt shows the call: ``mf(cm: int)``, ``iv(object: str) -> bool`` (an object is a str to the
        model: only grounded decoding tells them apart)."""
        names = self.arg_names or tuple(f"arg{i + 1}" for i in range(len(self.args)))
        params = ", ".join(f"{n}: {shown_kind(k)}" for n, k in zip(names, self.args))
        return f"{self.short}({params})" + (f" -> {self.returns}" if self.returns else "")

    @classmethod
    def from_config(cls, entry: Mapping[str, Any], where: str) -> "SkillSpec":
        """Build from one YAML entry {short, long, args, kind, returns, arg_names, description, approaches,
        in_scene, movable, moves, grasps, releases, after, still, in_view, searches};
        ValueError says what is wrong and where."""
        try:
            short = str(entry["short"])
            long = str(entry.get("long", short))
            args = tuple(str(a) for a in entry.get("args", []) or [])
            kind = str(entry.get("kind", "action"))
            returns = entry.get("returns")
            arg_names = tuple(str(a) for a in entry.get("arg_names", []) or [])
            description = str(entry.get("description", "") or "").strip()
            approaches = entry.get("approaches", False)
            in_scene = entry.get("in_scene", False)
            movable = entry.get("movable", False)
            moves = entry.get("moves")
            grasps = entry.get("grasps", False)
            releases = entry.get("releases", False)
            after = entry.get("after")
            still = entry.get("still", False)
            in_view = entry.get("in_view", False)
            searches = entry.get("searches", False)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: a skill needs at least 'short' ({exc})") from None
        if not short.isidentifier() or short.startswith("_") or short in ("True", "False"):
            raise ValueError(f"{where}: skill name {short!r} must be an identifier not starting with '_'")
        bad = [a for a in args if a not in ARG_KINDS]
        if bad:
            raise ValueError(f"{where}: skill {short!r} has unknown argument kinds {bad}; use {ARG_KINDS}")
        if kind not in SKILL_KINDS:
            raise ValueError(f"{where}: skill {short!r} kind must be one of {SKILL_KINDS}, got {kind!r}")
        if returns is not None and returns not in RETURN_KINDS:
            raise ValueError(f"{where}: skill {short!r} returns must be one of {RETURN_KINDS}, got {returns!r}")
        if returns is not None and kind != "query":
            raise ValueError(f"{where}: skill {short!r} is an action: only a query returns a value (drop 'returns' "
                             "or make it kind: query)")
        if arg_names and (len(arg_names) != len(args) or not all(n.isidentifier() for n in arg_names)):
            raise ValueError(f"{where}: skill {short!r} arg_names {list(arg_names)} must be {len(args)} identifier(s), "
                             f"one per argument in args {list(args)}")
        if "\n" in description:
            raise ValueError(f"{where}: skill {short!r} description must be one line")
        for field, value in (("approaches", approaches), ("in_scene", in_scene), ("movable", movable)):
            if not isinstance(value, bool):
                raise ValueError(f"{where}: skill {short!r} {field} must be true or false, got {value!r}")
            if value and "object" not in args:
                raise ValueError(f"{where}: skill {short!r} has {field}: true, but takes no object argument "
                                 f"(args {list(args)})")
        if moves is not None and (moves not in DIRECTIONS or kind != "action"):
            raise ValueError(f"{where}: skill {short!r} moves must be one of {DIRECTIONS} (the side it moves the robot "
                             f"to, in the robot's frame), on an action; got {moves!r} on a {kind}")
        for field, value in (("grasps", grasps), ("releases", releases), ("still", still)):
            if not isinstance(value, bool):
                raise ValueError(f"{where}: skill {short!r} {field} must be true or false, got {value!r}")
        if still and (grasps or releases or after is not None or kind != "action"):
            raise ValueError(f"{where}: skill {short!r} is still (it leaves the robot where it is): it must be an "
                             "action that neither grasps, releases nor has an after")
        if not isinstance(in_view, bool):
            raise ValueError(f"{where}: skill {short!r} in_view must be true or false, got {in_view!r}")
        if in_view and (kind != "query" or returns != "bool" or args != ("object",)):
            raise ValueError(f"{where}: skill {short!r} has in_view: true: it must be a query with one object argument "
                             f"that returns bool (args: [object], returns: bool), got a {kind} with args {list(args)} "
                             f"returning {returns}")
        if not isinstance(searches, bool):
            raise ValueError(f"{where}: skill {short!r} searches must be true or false, got {searches!r}")
        if searches and (kind != "action" or args != ("object",) or in_scene or grasps or releases):
            raise ValueError(f"{where}: skill {short!r} has searches: true: it must be an action with one object "
                             "argument (args: [object]) that may name what the scene does not list (not in_scene) "
                             "and neither grasps nor releases")
        if (grasps or after is not None) and (args != ("object",) or kind != "action"):
            raise ValueError(f"{where}: skill {short!r} has {'grasps' if grasps else 'after'}: it must be an action "
                             f"with one object argument (args: [object]), got a {kind} with args {list(args)}")
        if releases and (grasps or "object" in args or kind != "action"):
            raise ValueError(f"{where}: skill {short!r} releases what the robot holds: it must be an action that "
                             "neither grasps nor takes an object argument")
        if after is not None and (not isinstance(after, str) or after == short):
            raise ValueError(f"{where}: skill {short!r} after must name another skill of the set, got {after!r}")
        return cls(short, long, args, kind, returns, arg_names, description, approaches, in_scene, movable, moves,
                   grasps, releases, after, still, in_view, searches)
