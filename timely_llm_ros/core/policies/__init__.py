"""Scheduling policies behind one interface; ``make_policy`` maps config names to classes."""
from .base import Policy, SchedulingContext
from .registry import POLICIES, make_policy, register

__all__ = ["Policy", "SchedulingContext", "POLICIES", "make_policy", "register"]
