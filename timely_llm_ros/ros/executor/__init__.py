"""Executor API for robots: subclass SkillExecutorNode, register one callable per skill (docs/executor.md)."""
from timely_llm_ros.ros.executor.base import SkillExecutorNode
from timely_llm_ros.ros.executor.run import run_executor
from timely_llm_ros.ros.executor.skills import SkillCancelled, SkillContext, SkillFailed, SkillRegistry, skill

__all__ = ["SkillExecutorNode", "run_executor", "SkillCancelled", "SkillContext", "SkillFailed", "SkillRegistry",
           "skill"]
