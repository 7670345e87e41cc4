"""The robot types a server or an executor knows: skill sets and execution-time profiles, checked against each other.

The package's own (config/skills/*.yaml, config/exec_time/*.yaml) come first; a team's ``skills_dir`` (a folder
holding ``skills/*.yaml`` and ``exec_time/*.yaml``, either may be missing) adds its own and replaces a package
one of the same name. Every skill of every skill set needs an entry in the profile the set names
(``exec_profile``): the scheduler estimates each segment's execution time from it, so a skill without one would
fail at the first goal that uses it; ``check_profiles`` says so at start-up instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from timely_llm_ros.paths import config_dir
from timely_llm_ros.core.exec_time import ExecTimeModel, load_exec_models
from timely_llm_ros.core.skills import SkillSet, load_skill_sets


@dataclass
class RobotTypes:
    """Skill sets by name and execution-time profiles by profile name; ``replaced``: the package's names a
    skills_dir file took over (for the log)."""

    skill_sets: dict[str, SkillSet]
    exec_models: dict[str, ExecTimeModel]
    replaced: list[str] = field(default_factory=list)


def load_robot_types(skills_dir: str | Path | None = None) -> RobotTypes:
    """The package's skill sets and profiles, with those of ``skills_dir`` added over them (see the module
    docstring). FileNotFoundError when skills_dir is given but holds neither folder; ValueError for a malformed
    file (its path named)."""
    sets = load_skill_sets(config_dir() / "skills")
    models = load_exec_models(config_dir() / "exec_time")
    replaced: list[str] = []
    if skills_dir:
        root = Path(skills_dir).expanduser()
        skills, profiles = root / "skills", root / "exec_time"
        if not skills.is_dir() and not profiles.is_dir():
            raise FileNotFoundError(f"skills_dir {str(root)!r} holds neither skills/ nor exec_time/: put the team's "
                                    "skill sets in <skills_dir>/skills/*.yaml and their execution-time profiles in "
                                    "<skills_dir>/exec_time/*.yaml")
        own_sets = load_skill_sets(skills) if any(skills.glob("*.yaml")) else {}
        own_models = load_exec_models(profiles) if profiles.is_dir() else {}
        replaced = [f"skill set {n}" for n in sorted(own_sets) if n in sets]
        replaced += [f"profile {n}" for n in sorted(own_models) if n in models]
        sets.update(own_sets)
        models.update(own_models)
    return RobotTypes(sets, models, replaced)


def profile_problems(skill_sets: Mapping[str, SkillSet], exec_models: Mapping[str, ExecTimeModel]) -> list[str]:
    """One sentence per skill set whose profile is missing or lacks an entry for some of its skills."""
    problems = []
    for name, skill_set in sorted(skill_sets.items()):
        model = exec_models.get(skill_set.exec_profile)
        if model is None:
            problems.append(f"skill set {name!r} names execution-time profile {skill_set.exec_profile!r}, which "
                            f"does not exist (profiles: {', '.join(sorted(exec_models))}); add "
                            f"exec_time/{skill_set.exec_profile}.yaml")
            continue
        missing = [skill for skill in skill_set.skills if not model.knows(skill)]
        if missing:
            problems.append(f"skill set {name!r}: skill(s) {', '.join(missing)} have no entry in execution-time "
                            f"profile {model.profile!r}; add them to exec_time/{model.profile}.yaml")
    return problems


def check_profiles(robot_types: RobotTypes) -> None:
    """ValueError naming every skill without an execution-time entry (see profile_problems)."""
    problems = profile_problems(robot_types.skill_sets, robot_types.exec_models)
    if problems:
        raise ValueError("; ".join(problems))
