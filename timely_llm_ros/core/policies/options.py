"""Policy options: each policy's are a frozen dataclass of typed fields with defaults; ``options_from`` builds one
from a mapping (a YAML file, ``--variant KEY=VALUE``, the server's parameters) and names any option it lacks."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, TypeVar

_SCALARS = {"float": float, "int": int, "bool": bool, "str": str}


@dataclass(frozen=True)
class PolicyOptions:
    """Options every policy takes."""

    interrupt: bool | None = None   # an arrival ranked above a running step's members cuts it short (None: the
                                    # policy's default, Policy.interrupt_default)


Opts = TypeVar("Opts", bound=PolicyOptions)


def option_names(cls: type[PolicyOptions]) -> set[str]:
    return {f.name for f in fields(cls)}


def _typed(kind: str, value: Any) -> Any:
    """value as the field's scalar type (float, int, bool, str, or one of them | None); other kinds as given."""
    base = kind.replace(" | None", "").strip()
    if value is None or base not in _SCALARS:
        return value
    if base == "bool" and isinstance(value, str):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() == "true"
    return _SCALARS[base](value)


def options_from(cls: type[Opts], values: Mapping[str, Any] | Opts | None, policy: str) -> Opts:
    """``cls`` from ``values``: scalar values converted to the field's type; ValueError naming an unknown option
    and the valid ones, or an option whose value does not convert."""
    if isinstance(values, cls):
        return values
    if isinstance(values, PolicyOptions):
        raise TypeError(f"policy {policy!r} takes {cls.__name__}, not {type(values).__name__}")
    given = dict(values or {})
    kinds = {f.name: str(f.type) for f in fields(cls)}
    unknown = sorted(set(given) - set(kinds))
    if unknown:
        raise ValueError(f"policy {policy!r}: unknown option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; its options: {', '.join(sorted(kinds))}")
    typed = {}
    for name, value in given.items():
        try:
            typed[name] = _typed(kinds[name], value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"policy {policy!r}: option {name!r}: {exc}") from None
    return cls(**typed)
