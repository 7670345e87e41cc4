"""Executor API for robots: subclass SkillExecutorNode, register one callable per skill (docs/executor.md)."""
from .base import SkillExecutorNode
from .run import run_executor
from .skills import SkillCancelled, SkillContext, SkillFailed, SkillRegistry, skill

__all__ = ["SkillExecutorNode", "run_executor", "SkillCancelled", "SkillContext", "SkillFailed", "SkillRegistry",
           "skill"]
