"""Scheduling policies behind one interface; ``make_policy`` maps config names to classes."""
from .base import Policy, SchedulingContext
from .catalog import make_policy, policy_class
from .options import PolicyOptions, options_from
from .registry import POLICIES, register

__all__ = ["Policy", "PolicyOptions", "SchedulingContext", "POLICIES", "make_policy", "options_from", "policy_class",
           "register"]
