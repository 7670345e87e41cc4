"""Benchmark presets: named option sets of a registered policy, for the benchmarks that compare TimelyLLM with one
of its ideas switched off (docs/scheduling.md). A preset is not a policy: ``make_policy`` builds its policy with
the preset's options over the given ones, and the built policy carries the preset's name (so results and step
traces say which preset ran)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class PolicyPreset:
    """``policy`` with ``options`` set whatever else is given."""

    policy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    about: str = ""


PRESETS: dict[str, PolicyPreset] = {
    "timely-open-loop": PolicyPreset("timely", {"feedback": "open"},
                                     "E from execution-time estimates only (the robots' start/finish reports ignored)"),
    "timely-mixed-steps": PolicyPreset("timely", {"prefill_alone": False},
                                       "a step that prefills always carries the decode pass too"),
    "timely-nointerrupt": PolicyPreset("timely", {"interrupt": False},
                                       "a request that arrives during an engine step waits for its end"),
    "edf-admit": PolicyPreset("timely", {"order": "deadline"},
                              "timely's admission, preemption and drop rule in EDF order instead of Eq. 4"),
    "fcfs-admit": PolicyPreset("timely", {"order": "arrival"},
                               "timely's admission, preemption and drop rule in FCFS order instead of Eq. 4"),
}
