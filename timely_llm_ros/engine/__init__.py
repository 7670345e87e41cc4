"""LLM engines behind one small interface (see base.Engine)."""
from .base import Engine, EngineError, MemoryStats, StepResult

__all__ = ["Engine", "EngineError", "MemoryStats", "StepResult"]
