"""``make_policy`` builds a policy by name: a registered policy (core/policies/registry.py: the entry-point group
timely_llm_ros.policies), a benchmark preset (core/policies/presets.py) or a deprecated name of a renamed policy."""
from __future__ import annotations

import logging
import warnings
from dataclasses import replace
from typing import Any, Mapping

from timely_llm_ros.core.policies.base import Policy
from timely_llm_ros.core.policies.options import PolicyOptions, option_names, options_from
from timely_llm_ros.core.policies.presets import PRESETS
from timely_llm_ros.core.policies.registry import POLICIES

RENAMED = {"vllm": "fcfs-whole-plan", "vllm-stream": "fcfs-stream"}   # old name -> the policy's name now

_log = logging.getLogger(__name__)


def current_name(name: str) -> str:
    """``name``, or the name now of a renamed policy (a DeprecationWarning and a log line say which)."""
    new = RENAMED.get(name)
    if new is None:
        return name
    message = f"policy {name!r} is now called {new!r}; the old name will go in a later release"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    _log.warning(message)
    return new


def known_names() -> list[str]:
    """Every name make_policy builds: registered policies and benchmark presets (deprecated names left out)."""
    return sorted({*POLICIES, *PRESETS})


def policy_class(name: str) -> type[Policy]:
    """The registered class of ``name`` (a preset's: its policy's); ValueError listing the known names."""
    name = current_name(name)
    registered = PRESETS[name].policy if name in PRESETS else name
    cls = POLICIES.lookup(registered)
    if cls is None:
        why = POLICIES.failed.get(registered)
        raise ValueError(f"policy {name!r}: {why}" if why else
                         f"unknown policy {name!r}; known: {', '.join(known_names())} (a package adds one through "
                         f"the entry-point group timely_llm_ros.policies: docs/policies.md)")
    return cls


def make_policy(name: str, max_batch: int = 8, options: Mapping[str, Any] | PolicyOptions | None = None,
                shared: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate a registered policy or a preset. ``options`` are this policy's own (an unknown name is a
    ValueError naming it; a preset's options are set over them); ``shared`` are facts offered to whichever policy is
    configured (segment sizes, step times, the network delay: the server's): the policy takes those it has an option
    for, and a name no policy knows is an error."""
    name = current_name(name)
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
    preset = PRESETS.get(name)
    if preset is None:
        return cls(max_batch=max_batch, options=options)
    policy = cls(max_batch=max_batch, options=replace(options_from(cls.Options, options, name), **preset.options))
    policy.name = name   # type: ignore[misc]  # results and step traces name the preset
    return policy
