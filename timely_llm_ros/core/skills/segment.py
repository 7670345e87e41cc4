"""The incremental segmenter interface and the segment it returns."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from timely_llm_ros.core.request import SkillCall


@dataclass(frozen=True, slots=True)
class ParsedSegment:
    """An executable piece of plan text, the skill calls it can make (worst case, in execution order) and, for a
    statement plan, its statements (core/skills/program.py; empty for prose)."""

    text: str
    skills: list[SkillCall]
    program: tuple[Any, ...] = ()


class Segmenter(ABC):
    """Cuts one generation's text into executable segments while it is being generated.

    Invariant: the texts of all returned segments followed by ``pending`` equal everything fed, exactly.
    """

    def __init__(self) -> None:
        self._buf = ""
        self.error: str | None = None  # set once the text can no longer be a valid plan; no segment follows

    @property
    def pending(self) -> str:
        """Text fed but not yet part of a returned segment."""
        return self._buf

    @abstractmethod
    def feed(self, delta: str) -> list[ParsedSegment]:
        """Append newly generated text; return every segment that became executable (in order)."""

    @abstractmethod
    def finish(self) -> ParsedSegment | None:
        """At the end of generation: the executable remainder as a segment, or None (then ``pending`` keeps it)."""
