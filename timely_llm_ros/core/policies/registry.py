"""The policy registry: configured name -> Policy class, discovered through the entry-point group
``timely_llm_ros.policies`` (importlib.metadata), as nav2 finds its plugins through pluginlib.

A package adds a policy without editing this one: it declares ``NAME = "module:Class"`` in that group (setup.py
``entry_points`` or pyproject.toml ``[project.entry-points."timely_llm_ros.policies"]``), the class being a Policy
whose ``name`` is NAME. The built-in policies are declared the same way in this package's setup.py;
``BUILTIN_POLICIES`` lists the same targets so that a source tree without installed package metadata (or with
metadata older than a built-in) still finds them. ``register`` adds a class defined in-process (a script, a test).

Discovery is lazy (the first look-up), so a plugin may import ``timely_llm_ros.core.policies`` itself; a name not
found is looked up again (a plugin installed since). A plugin that fails to load, or whose class does not fit its
entry, is left out with a log line, and asking for it names the reason.
"""
from __future__ import annotations

import importlib
import logging
import re
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Iterator, Mapping

from timely_llm_ros.core.policies.base import Policy

ENTRY_POINT_GROUP = "timely_llm_ros.policies"
OWN_DISTRIBUTION = "timely_llm_ros"

# the built-in policies: the same name = target pairs as setup.py's entry_points[ENTRY_POINT_GROUP]
BUILTIN_POLICIES: dict[str, str] = {
    "timely": "timely_llm_ros.core.policies.timely:TimelyPolicy",
    "edf": "timely_llm_ros.core.policies.edf:SegmentedEdf",
    "fcfs": "timely_llm_ros.core.policies.fcfs:SegmentedFcfs",
    "fcfs-stream": "timely_llm_ros.core.policies.fcfs:FcfsStream",
    "fcfs-whole-plan": "timely_llm_ros.core.policies.fcfs:FcfsWholePlan",
    "slice": "timely_llm_ros.core.policies.slice:SlicePolicy",
    "semantic": "timely_llm_ros.core.policies.semantic:SemanticPolicy",
    "rtlm": "timely_llm_ros.core.policies.rtlm:RtlmPolicy",
    "fifo-static": "timely_llm_ros.core.policies.rtlm:FifoStatic",
    "timebill": "timely_llm_ros.core.policies.timebill:TimeBillPolicy",
}

_log = logging.getLogger(__name__)


def _load_target(target: str) -> object:
    """The object a ``module:attribute`` target names."""
    module, _, attribute = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def _distribution(ep: EntryPoint) -> str:
    """The normalized name (lower case, runs of -_. as _) of the distribution that declares ep ('' when unknown)."""
    dist = getattr(ep, "dist", None)
    return re.sub(r"[-_.]+", "_", getattr(dist, "name", "") or "").lower()


def _checked(name: str, obj: object, origin: str) -> type[Policy]:
    """obj as the Policy class registered under name; TypeError saying what the entry must name instead."""
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise TypeError(f"{origin} names {obj!r}, not a subclass of timely_llm_ros.core.policies.Policy")
    if obj.name != name:
        raise TypeError(f"{origin} names class {obj.__name__} whose name is {obj.name!r}; the entry's name and the "
                        f"class's `name` must be the same")
    return obj


class PolicyRegistry(Mapping[str, type[Policy]]):
    """Name -> Policy class over the entry-point group, loaded on first use (see the module docstring)."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Policy]] = {}
        self._targets: dict[str, str] = {}      # name -> the module:Class it was loaded from
        self.failed: dict[str, str] = {}        # name -> why its entry was left out
        self._discovered = False

    def _ensure(self) -> None:
        if not self._discovered:
            self.discover()

    def discover(self) -> None:
        """Load every entry of the group not loaded yet; the built-ins from BUILTIN_POLICIES where this package's
        installed metadata does not declare them. An entry that takes a name already taken is left out."""
        self._discovered = True
        found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: _distribution(ep) != OWN_DISTRIBUTION)
        own = {ep.name for ep in found if _distribution(ep) == OWN_DISTRIBUTION}
        for name, target in BUILTIN_POLICIES.items():
            if name not in own and name not in self._classes:
                self._add(name, target, lambda t=target: _load_target(t), "built-in")
        for ep in found:
            if ep.name not in self._classes:
                self._add(ep.name, ep.value, ep.load, f"entry point of {_distribution(ep)}")
            elif self._targets[ep.name] != ep.value:
                _log.warning("policy %r: entry point %s of %s left out: the name is taken by %s", ep.name, ep.value,
                             _distribution(ep), self._targets[ep.name])

    def _add(self, name: str, target: str, load: Callable[[], object], origin: str) -> None:
        try:
            self._classes[name] = _checked(name, load(), f"policy {name} = {target} ({origin})")
        except Exception as exc:          # a broken plugin must not take the other policies down with it
            self.failed[name] = f"{name} = {target} ({origin}) failed to load: {type(exc).__name__}: {exc}"
            _log.warning("policy %r left out: %s", name, self.failed[name])
            return
        self._targets[name] = target
        self.failed.pop(name, None)

    def add(self, cls: type[Policy]) -> None:
        """Register a Policy class defined in-process under its ``name``."""
        self._ensure()
        self._classes[cls.name] = _checked(cls.name, cls, f"register({cls.__name__})")
        self._targets[cls.name] = f"{cls.__module__}:{cls.__qualname__}"

    def lookup(self, name: str) -> type[Policy] | None:
        """The class of name, looking the entry points up again when it is not known yet (installed since)."""
        self._ensure()
        if name not in self._classes:
            self.discover()
        return self._classes.get(name)

    def __getitem__(self, name: str) -> type[Policy]:
        self._ensure()
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        self._ensure()
        return iter(dict(self._classes))

    def __len__(self) -> int:
        self._ensure()
        return len(self._classes)


POLICIES = PolicyRegistry()


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy defined in-process constructible by its ``name`` (a package's policy is
    declared in the entry-point group instead)."""
    POLICIES.add(cls)
    return cls
