"""Skill sets: plan grammars, incremental segmentation into executable segments, planner prompts."""
from .segment import ParsedSegment, Segmenter
from .skill_set import SkillSet, load_skill_sets
from .spec import SkillSpec

__all__ = ["ParsedSegment", "Segmenter", "SkillSet", "SkillSpec", "load_skill_sets"]
