"""A robot's skill set (loaded from config/skills/<name>.yaml): grammar, segmenter, prompt."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Any, Mapping

import yaml

from timely_llm_ros.paths import config_dir
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.context import NO_LABELS, ContextLabels
from timely_llm_ros.core.skills.minispec import FORMS, parse
from timely_llm_ros.core.skills.program import MAX_PLAN_CALLS
from timely_llm_ros.core.skills.prompt import DEFAULT_TEMPLATE, build_prompt
from timely_llm_ros.core.skills.prose import ParagraphSegmenter, SentenceSegmenter
from timely_llm_ros.core.skills.segment import Segmenter
from timely_llm_ros.core.skills.spec import SkillSpec
from timely_llm_ros.core.skills.statements import StatementSegmenter

MODES = ("statements", "sentence", "paragraph")
EXAMPLES_IN = ("turns", "system")   # where a chat prompt puts the worked examples (core/skills/chat_prompt.py)


@dataclass(frozen=True)
class WorkedExample:
    """One example for a chat model's prompt: a scene, a task and the plan (or reply) the robot wants."""

    scene: str
    task: str
    plan: str


class SkillSet:
    """What one robot type can do and how its plans are cut into executable segments."""

    def __init__(self, name: str, mode: str, skills: list[SkillSpec], exec_profile: str,
                 max_segment_tokens: int, max_plan_tokens: int, prompt_template: str = DEFAULT_TEMPLATE,
                 statement_forms: tuple[str, ...] = FORMS, min_words: int = 10, description: str = "",
                 examples: tuple[WorkedExample, ...] = (), prompt_examples: str = "turns",
                 context_labels: ContextLabels = NO_LABELS) -> None:
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
        if prompt_examples not in EXAMPLES_IN:
            raise ValueError(f"skill set {name!r}: prompt_examples must be one of {EXAMPLES_IN}, got {prompt_examples!r}")
        self.name = name
        self.mode = mode
        self.skills: dict[str, SkillSpec] = {s.short: s for s in skills}
        for skill in skills:
            before = self.skills.get(skill.after) if skill.after else None
            if skill.after and (before is None or before.args != ("object",) or not before.is_action
                                or before.grasps or before.releases or before.after or before.still):
                raise ValueError(f"skill set {name!r}: skill {skill.short!r} has after: {skill.after!r}, which must "
                                 "name an action of the set with one object argument that moves the robot to it: "
                                 "not grasping, releasing, still, nor with an after of its own (an arm's goto)")
        self.exec_profile = exec_profile
        self.max_segment_tokens = max_segment_tokens
        self.max_plan_tokens = max_plan_tokens
        self.prompt_template = prompt_template
        self.statement_forms = tuple(statement_forms)
        self.min_words = min_words
        self.description = description.strip()
        self.examples = tuple(examples)
        self.prompt_examples = prompt_examples
        self.context_labels = context_labels    # its contexts' own labels (core/skills/context.py)
        for i, ex in enumerate(self.examples):
            problems = self.validate_plan(ex.plan)
            if problems or not self.parse_skills(ex.plan):
                raise ValueError(f"skill set {name!r}: examples[{i}] plan {ex.plan!r} is not a valid {name} plan: "
                                 + "; ".join(problems or ["it calls no action skill"]))

    def __repr__(self) -> str:
        return f"SkillSet({self.name!r}, mode={self.mode!r}, skills={list(self.skills)})"

    @property
    def say_skill(self) -> str:
        """The skill a prose reply is made of (the first action skill)."""
        return next(s.short for s in self.skills.values() if s.is_action)

    def segmenter(self, max_calls: int | None = MAX_PLAN_CALLS, robot_skills: AbstractSet[str] | None = None
                  ) -> Segmenter:
        """A fresh incremental segmenter for one generation: a statement plan makes at most ``max_calls`` calls with
        its loops unrolled and calls only ``robot_skills`` (its robot's; None: any of the set's)."""
        if self.mode == "statements":
            return StatementSegmenter(self.skills, self.statement_forms, max_calls, robot_skills)
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
        """The embedded planner's raw prompt for a task on this robot type (chat models: core/skills/chat_prompt.py)."""
        return build_prompt(self.name, task, context, self.prompt_template)

    def with_limits(self, max_segment_tokens: int, max_plan_tokens: int) -> "SkillSet":
        """This skill set with its plan-length limits counted in another model's tokens (core/token_limits.py)."""
        if not 1 <= max_segment_tokens <= max_plan_tokens:
            raise ValueError(f"skill set {self.name!r}: need 1 <= max_segment_tokens <= max_plan_tokens, got "
                             f"{max_segment_tokens} and {max_plan_tokens}")
        other = copy.copy(self)
        other.max_segment_tokens, other.max_plan_tokens = int(max_segment_tokens), int(max_plan_tokens)
        return other

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], where: str = "<config>") -> "SkillSet":
        """Build from a parsed YAML mapping; ValueError names the file and the field."""
        try:
            name = str(cfg["name"])
            skills = [SkillSpec.from_config(e, f"{where}: skills[{i}]") for i, e in enumerate(cfg["skills"])]
            examples = tuple(_example(e, f"{where}: examples[{i}]") for i, e in enumerate(cfg.get("examples") or []))
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
                description=str(cfg.get("description", "") or ""),
                examples=examples,
                prompt_examples=str(cfg.get("prompt_examples", "turns")),
                context_labels=_labels(cfg, where),
            )
        except KeyError as exc:
            raise ValueError(f"{where}: missing required field {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: malformed skill set ({exc})") from None


def _labels(cfg: Mapping[str, Any], where: str) -> ContextLabels:
    """The skill set's own context labels (place_labels, fixed_place_labels: lists of words)."""
    lists = {}
    for key in ("place_labels", "fixed_place_labels"):
        value = cfg.get(key) or []
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: {key} is a list of context labels, such as [line, aisle]; got {value!r}")
        lists[key] = value
    try:
        return ContextLabels.of(lists["place_labels"], lists["fixed_place_labels"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _example(entry: Any, where: str) -> WorkedExample:
    """One worked example {scene, task, plan}; ValueError names what is missing."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: an example is a mapping {{scene, task, plan}}")
    missing = [k for k in ("task", "plan") if not str(entry.get(k, "") or "").strip()]
    if missing:
        raise ValueError(f"{where}: an example needs {' and '.join(missing)} (and usually a scene)")
    return WorkedExample(str(entry.get("scene", "") or "").strip(), str(entry["task"]).strip(),
                         str(entry["plan"]).strip())


TASK_PATTERNS_SUFFIX = ".tasks.yaml"


def load_skill_sets(directory: Path | None = None) -> dict[str, SkillSet]:
    """Every skill set in ``directory`` (default config/skills), keyed by name. ``<robot>.tasks.yaml`` files beside
    them are task patterns for adapting a model (timely_llm_ros/adapt/patterns.py), not skill sets."""
    directory = Path(directory) if directory is not None else config_dir() / "skills"
    out: dict[str, SkillSet] = {}
    for path in sorted(p for p in directory.glob("*.yaml") if not p.name.endswith(TASK_PATTERNS_SUFFIX)):
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
