"""Map configured policy names to Policy classes."""
from __future__ import annotations

from typing import Any, Mapping

from .base import Policy

POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy constructible by its ``name``."""
    POLICIES[cls.name] = cls
    return cls


def make_policy(name: str, max_batch: int = 8, options: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate a registered policy; raises ValueError listing the known names."""
    from . import builtin  # noqa: F401  (registers the shipped policies)

    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return cls(max_batch=max_batch, options=options)
