"""A robot's skill set (loaded from config/skills/<name>.yaml): grammar, segmenter, prompt."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from ...paths import config_dir
from ..request import SkillCall
from .minispec import FORMS, parse
from .prompt import DEFAULT_TEMPLATE, build_prompt
from .prose import ParagraphSegmenter, SentenceSegmenter
from .segment import Segmenter
from .spec import SkillSpec
from .statements import StatementSegmenter

MODES = ("statements", "sentence", "paragraph")


class SkillSet:
    """What one robot type can do and how its plans are cut into executable segments."""

    def __init__(self, name: str, mode: str, skills: list[SkillSpec], exec_profile: str,
                 max_segment_tokens: int, max_plan_tokens: int, prompt_template: str = DEFAULT_TEMPLATE,
                 statement_forms: tuple[str, ...] = FORMS, min_words: int = 10) -> None:
        if mode not in MODES:
            raise ValueError(f"skill set {name!r}: mode must be one of {MODES}, got {mode!r}")
        bad = [f for f in statement_forms if f not in FORMS]
        if bad:
            raise ValueError(f"skill set {name!r}: unknown statement forms {bad}; known: {FORMS}")
        if not any(s.is_action for s in skills):
            raise ValueError(f"skill set {name!r} has no action skill: no segment could ever be executable")
        if min_words < 1:
            raise ValueError(f"skill set {name!r}: min_words must be >= 1, got {min_words}")
        if max_segment_tokens < 1 or max_plan_tokens < max_segment_tokens:
            raise ValueError(f"skill set {name!r}: need 1 <= max_segment_tokens <= max_plan_tokens")
        self.name = name
        self.mode = mode
        self.skills: dict[str, SkillSpec] = {s.short: s for s in skills}
        self.exec_profile = exec_profile
        self.max_segment_tokens = max_segment_tokens
        self.max_plan_tokens = max_plan_tokens
        self.prompt_template = prompt_template
        self.statement_forms = tuple(statement_forms)
        self.min_words = min_words

    def __repr__(self) -> str:
        return f"SkillSet({self.name!r}, mode={self.mode!r}, skills={list(self.skills)})"

    @property
    def say_skill(self) -> str:
        """The skill a prose reply is made of (the first action skill)."""
        return next(s.short for s in self.skills.values() if s.is_action)

    def segmenter(self) -> Segmenter:
        """A fresh incremental segmenter for one generation."""
        if self.mode == "statements":
            return StatementSegmenter(self.skills, self.statement_forms)
        if self.mode == "sentence":
            return SentenceSegmenter(self.say_skill, self.min_words)
        return ParagraphSegmenter(self.say_skill)

    def validate_plan(self, text: str) -> list[str]:
        """Problems with a whole plan ([] = it parses and uses only known skills with the right arguments)."""
        if not text.strip():
            return ["empty plan"]
        if self.mode != "statements":
            return []
        return parse(text, self.skills, self.statement_forms).problems

    def parse_skills(self, text: str) -> list[SkillCall]:
        """Skill calls of a plan in execution order (loops unrolled); ValueError if the plan is invalid."""
        if self.mode == "statements":
            result = parse(text, self.skills, self.statement_forms)
            if result.problems:
                raise ValueError(f"invalid {self.name} plan: " + "; ".join(result.problems))
            return result.skills
        segmenter = self.segmenter()
        segments = segmenter.feed(text)
        last = segmenter.finish()
        return [c for s in segments + ([last] if last else []) for c in s.skills]

    def build_prompt(self, task: str, context: str = "") -> str:
        """The planner prompt for a task on this robot type."""
        return build_prompt(self.name, task, context, self.prompt_template)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], where: str = "<config>") -> "SkillSet":
        """Build from a parsed YAML mapping; ValueError names the file and the field."""
        try:
            name = str(cfg["name"])
            skills = [SkillSpec.from_config(e, f"{where}: skills[{i}]") for i, e in enumerate(cfg["skills"])]
            return cls(
                name=name,
                mode=str(cfg.get("mode", "statements")),
                skills=skills,
                exec_profile=str(cfg.get("exec_profile", name)),
                max_segment_tokens=int(cfg["max_segment_tokens"]),
                max_plan_tokens=int(cfg.get("max_plan_tokens", 200)),
                prompt_template=str(cfg.get("prompt_template") or DEFAULT_TEMPLATE),
                statement_forms=tuple(cfg.get("statement_forms", FORMS)),
                min_words=int(cfg.get("min_words", 10)),
            )
        except KeyError as exc:
            raise ValueError(f"{where}: missing required field {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: malformed skill set ({exc})") from None


def load_skill_sets(directory: Path | None = None) -> dict[str, SkillSet]:
    """Every skill set in ``directory`` (default config/skills), keyed by name."""
    directory = Path(directory) if directory is not None else config_dir() / "skills"
    out: dict[str, SkillSet] = {}
    for path in sorted(directory.glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
        if not isinstance(cfg, Mapping):
            raise ValueError(f"{path}: expected a mapping at the top level")
        skill_set = SkillSet.from_config(cfg, str(path))
        if skill_set.name in out:
            raise ValueError(f"{path}: skill set {skill_set.name!r} is defined twice")
        out[skill_set.name] = skill_set
    if not out:
        raise FileNotFoundError(f"no skill sets (*.yaml) in {directory}")
    return out
