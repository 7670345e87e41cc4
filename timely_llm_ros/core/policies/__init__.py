"""Scheduling policies behind one interface; ``make_policy`` maps config names to classes, found through the
entry-point group timely_llm_ros.policies (registry.py)."""
from timely_llm_ros.core.policies.base import Policy, SchedulingContext
from timely_llm_ros.core.policies.catalog import RENAMED, known_names, make_policy, policy_class
from timely_llm_ros.core.policies.options import PolicyOptions, options_from
from timely_llm_ros.core.policies.presets import PRESETS, PolicyPreset
from timely_llm_ros.core.policies.registry import BUILTIN_POLICIES, ENTRY_POINT_GROUP, POLICIES, register

__all__ = ["BUILTIN_POLICIES", "ENTRY_POINT_GROUP", "Policy", "PolicyOptions", "PolicyPreset", "SchedulingContext",
           "POLICIES", "PRESETS", "RENAMED", "known_names", "make_policy", "options_from", "policy_class", "register"]
