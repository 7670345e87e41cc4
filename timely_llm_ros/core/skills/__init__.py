"""Skill sets: plan grammars, incremental segmentation into executable segments, planner prompts."""
from timely_llm_ros.core.skills.segment import ParsedSegment, Segmenter
from timely_llm_ros.core.skills.skill_set import SkillSet, load_skill_sets
from timely_llm_ros.core.skills.spec import SkillSpec

__all__ = ["ParsedSegment", "Segmenter", "SkillSet", "SkillSpec", "load_skill_sets"]
