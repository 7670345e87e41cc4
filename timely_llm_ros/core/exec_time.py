"""Execution-time model of robot skills (config/exec_time/<profile>.yaml), TimelyLLM section 6.

Priority uses the minimum estimate of a segment (``min_time``); simulators and the demo executor sample
(``sample_time``). A segment's skills come with loops already unrolled (see core.skills.minispec), so repetitions count.
"""
from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from timely_llm_ros.paths import config_dir
from timely_llm_ros.core.request import SkillCall


def _first_number(args: Sequence[Any]) -> float:
    """The first numeric argument; 0 when there is none or it is negative/NaN (clamped to the minimum)."""
    for a in args:
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return float(a) if math.isfinite(a) and a > 0 else 0.0
    return 0.0


class SkillTime(ABC):
    """Time model of one skill."""

    @abstractmethod
    def minimum(self, args: Sequence[Any]) -> float:
        """Smallest plausible execution time (s) for these arguments."""

    def sample(self, args: Sequence[Any], rng: random.Random) -> float:
        """One random execution time (s); deterministic models return the minimum."""
        return self.minimum(args)


class Poly(SkillTime):
    """c0 + c1 v + c2 v^2 + ... of the first numeric argument v, never below ``floor`` (default: value at v=0)."""

    def __init__(self, coeffs: Sequence[float], floor: float | None = None) -> None:
        self.coeffs = [float(c) for c in coeffs]
        if not self.coeffs:
            raise ValueError("poly model needs at least one coefficient")
        self.floor = max(0.0, self.coeffs[0] if floor is None else float(floor))

    def minimum(self, args: Sequence[Any]) -> float:
        v = _first_number(args)
        value = sum(c * v ** k for k, c in enumerate(self.coeffs))
        return value if value > self.floor else self.floor


class Fixed(SkillTime):
    def __init__(self, value: float) -> None:
        self.value = max(0.0, float(value))

    def minimum(self, args: Sequence[Any]) -> float:
        return self.value


class Uniform(SkillTime):
    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = float(low), float(high)
        if not 0 <= self.low <= self.high:
            raise ValueError(f"uniform model needs 0 <= low <= high, got {low}..{high}")

    def minimum(self, args: Sequence[Any]) -> float:
        return self.low

    def sample(self, args: Sequence[Any], rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)


class Steps(SkillTime):
    """A repeated step (e.g. scan: turn and look) taken min_steps..max_steps times."""

    def __init__(self, per_step: float, min_steps: int = 1, max_steps: int = 1) -> None:
        self.per_step, self.min_steps, self.max_steps = float(per_step), int(min_steps), int(max_steps)
        if self.per_step < 0 or not 0 <= self.min_steps <= self.max_steps:
            raise ValueError("steps model needs per_step >= 0 and 0 <= min_steps <= max_steps")

    def minimum(self, args: Sequence[Any]) -> float:
        return self.per_step * self.min_steps

    def sample(self, args: Sequence[Any], rng: random.Random) -> float:
        return self.per_step * rng.randint(self.min_steps, self.max_steps)


class Reading(SkillTime):
    """Time for a person to read (or hear) the text argument."""

    def __init__(self, words_per_minute: float) -> None:
        self.words_per_minute = float(words_per_minute)
        if self.words_per_minute <= 0:
            raise ValueError("reading model needs words_per_minute > 0")

    def minimum(self, args: Sequence[Any]) -> float:
        words = sum(len(a.split()) for a in args if isinstance(a, str))
        return 60.0 * words / self.words_per_minute


_MODELS: dict[str, Callable[..., SkillTime]] = {
    "poly": lambda coeffs, min=None: Poly(coeffs, min),
    "fixed": Fixed, "uniform": Uniform, "steps": Steps, "reading": Reading,
}


class ExecTimeModel:
    """Execution-time estimates for the skills of one profile (drone, arm, chat, ...)."""

    def __init__(self, profile: str, skills: Mapping[str, SkillTime]) -> None:
        self.profile = profile
        self.skills = dict(skills)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], where: str = "<config>") -> "ExecTimeModel":
        """Build from {profile, skills: {name: {model, ...parameters}}}; ValueError names the bad entry."""
        profile = str(cfg.get("profile", ""))
        skills: dict[str, SkillTime] = {}
        for name, entry in (cfg.get("skills") or {}).items():
            params = dict(entry)
            kind = params.pop("model", None)
            if kind not in _MODELS:
                raise ValueError(f"{where}: skill {name!r}: model must be one of {sorted(_MODELS)}, got {kind!r}")
            try:
                skills[str(name)] = _MODELS[kind](**params)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}: skill {name!r} ({kind}): {exc}") from None
        if not profile or not skills:
            raise ValueError(f"{where}: needs a 'profile' name and at least one skill")
        return cls(profile, skills)

    @classmethod
    def load(cls, profile: str, directory: Path | None = None) -> "ExecTimeModel":
        """Load config/exec_time/<profile>.yaml (or from ``directory``)."""
        path = (Path(directory) if directory is not None else config_dir() / "exec_time") / f"{profile}.yaml"
        if not path.is_file():
            raise FileNotFoundError(f"no execution-time profile {profile!r}: {path} does not exist")
        with open(path, encoding="utf-8") as f:
            return cls.from_config(yaml.safe_load(f) or {}, str(path))

    def knows(self, name: str) -> bool:
        return name in self.skills

    def _model(self, name: str) -> SkillTime:
        try:
            return self.skills[name]
        except KeyError:
            raise KeyError(f"skill {name!r} has no execution-time model in profile {self.profile!r} "
                           f"(known: {', '.join(sorted(self.skills))})") from None

    def skill_min(self, skill: SkillCall) -> float:
        """Minimum execution time of one call (s)."""
        return self._model(skill.name).minimum(skill.args)

    def min_time(self, skills: Sequence[SkillCall]) -> float:
        """Minimum execution time of a segment (s); priority uses it."""
        return sum(self.skill_min(s) for s in skills)

    def sample_time(self, skills: Sequence[SkillCall], rng: random.Random) -> float:
        """One random execution time of a segment (s), for simulation and demo executors."""
        return sum(self._model(s.name).sample(s.args, rng) for s in skills)


def load_exec_models(directory: Path | None = None) -> dict[str, ExecTimeModel]:
    """Every profile in ``directory`` (default config/exec_time), keyed by profile name."""
    directory = Path(directory) if directory is not None else config_dir() / "exec_time"
    out: dict[str, ExecTimeModel] = {}
    for path in sorted(directory.glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            model = ExecTimeModel.from_config(yaml.safe_load(f) or {}, str(path))
        out[model.profile] = model
    return out
