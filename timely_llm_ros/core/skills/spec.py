"""What a skill set declares about one skill: names, argument kinds, whether it acts, what a query returns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

ARG_KINDS = ("int", "str", "any")
SKILL_KINDS = ("action", "query")
RETURN_KINDS = ("bool", "float", "str")


@dataclass(frozen=True)
class SkillSpec:
    """One skill of a robot: short name used in plans (``mf``), long name (``move_forward``), argument kinds."""

    short: str
    long: str
    args: tuple[str, ...]   # each of ARG_KINDS; "int" accepts any number
    kind: str               # "action" makes a segment executable; "query" does not
    returns: str | None = None  # a query's value: one of RETURN_KINDS (None: not declared, any of them)

    @property
    def is_action(self) -> bool:
        return self.kind == "action"

    @classmethod
    def from_config(cls, entry: Mapping[str, Any], where: str) -> "SkillSpec":
        """Build from one YAML entry {short, long, args, kind, returns}; ValueError says what is wrong and where."""
        try:
            short = str(entry["short"])
            long = str(entry.get("long", short))
            args = tuple(str(a) for a in entry.get("args", []) or [])
            kind = str(entry.get("kind", "action"))
            returns = entry.get("returns")
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
        return cls(short, long, args, kind, returns)
