"""The registry policy modules register into: configured name -> Policy class. Filled by importing the policy
modules (core/policies/catalog.py lists them); this module imports none of them."""
from __future__ import annotations

from timely_llm_ros.core.policies.base import Policy

POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy constructible by its ``name``."""
    POLICIES[cls.name] = cls
    return cls
