"""The shipped policies, each registered by importing its module, and ``make_policy`` to build one by name."""
from __future__ import annotations

from typing import Any, Mapping

from timely_llm_ros.core.policies import edf, fcfs, rtlm, semantic, slice, timebill, timely, timely_ablations  # noqa: F401  (registration)
from timely_llm_ros.core.policies.base import Policy
from timely_llm_ros.core.policies.options import PolicyOptions, option_names
from timely_llm_ros.core.policies.registry import POLICIES


def policy_class(name: str) -> type[Policy]:
    """The registered class of ``name``; ValueError listing the known names."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


def make_policy(name: str, max_batch: int = 8, options: Mapping[str, Any] | PolicyOptions | None = None,
                shared: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate a registered policy. ``options`` are this policy's own (an unknown name is a ValueError naming
    it); ``shared`` are facts offered to whichever policy is configured (segment sizes, step times, the network
    delay: the server's): the policy takes those it has an option for, and a name no policy knows is an error."""
    cls = policy_class(name)
    if shared:
        known = set().union(*(option_names(c.Options) for c in POLICIES.values()))
        unknown = sorted(set(shared) - known)
        if unknown:
            raise ValueError(f"no policy has option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}")
        if isinstance(options, PolicyOptions):
            raise TypeError("make_policy: shared options go with a mapping of options, not a built one")
        own = option_names(cls.Options)
        options = {**{k: v for k, v in shared.items() if k in own}, **(options or {})}
    return cls(max_batch=max_batch, options=options)
