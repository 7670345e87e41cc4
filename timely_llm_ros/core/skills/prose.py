"""Incremental segmenters for chat replies: by sentence or by paragraph.

Sentence mode: a segment ends at '.', '!' or '?' (optionally followed by closing quotes/brackets) when the next
character is whitespace and the segment holds at least ``min_words`` words (default 10), so "e.g. " or "3.5" in a
short sentence do not cut. The cut waits for that whitespace, which starts the next segment.
Paragraph mode: a segment ends before a blank line (a newline, optional spaces/tabs, another newline) once it holds
some text; the blank line starts the next segment. The whole reply is one "say" skill call per segment.
"""
from __future__ import annotations

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.segment import ParsedSegment, Segmenter

_ENDS = ".!?"
_CLOSERS = "\"')]»”’"


def _say(skill: str, text: str) -> ParsedSegment:
    return ParsedSegment(text, [SkillCall(skill, (text.strip(),))])


class _ProseSegmenter(Segmenter):
    def __init__(self, skill: str) -> None:
        super().__init__()
        self._skill = skill

    def _cut(self, at: int) -> ParsedSegment:
        segment = _say(self._skill, self._buf[:at])
        self._buf = self._buf[at:]
        return segment

    def finish(self) -> ParsedSegment | None:
        if not self._buf.strip():
            return None
        return self._cut(len(self._buf))


class SentenceSegmenter(_ProseSegmenter):
    """Cuts after a sentence end followed by whitespace, once the segment has ``min_words`` words."""

    def __init__(self, skill: str = "say", min_words: int = 10) -> None:
        super().__init__(skill)
        self.min_words = min_words
        self._words = 0
        self._in_word = False
        self._after_end = False  # last non-space characters were a sentence end (+ closers)

    def feed(self, delta: str) -> list[ParsedSegment]:
        out: list[ParsedSegment] = []
        self._buf += delta
        for offset, c in enumerate(delta):
            if c.isspace():
                if self._after_end and self._words >= self.min_words:
                    out.append(self._cut(len(self._buf) - (len(delta) - offset)))  # c starts the next segment
                    self._words = 0
                self._in_word = self._after_end = False
                continue
            if not self._in_word:
                self._words += 1
                self._in_word = True
            if c in _ENDS:
                self._after_end = True
            elif c not in _CLOSERS:
                self._after_end = False
        return out


class ParagraphSegmenter(_ProseSegmenter):
    """Cuts before a blank line once the segment holds text."""

    def __init__(self, skill: str = "say") -> None:
        super().__init__(skill)
        self._has_text = False
        self._newline = -1  # offset in _buf of a newline followed only by spaces/tabs so far

    def feed(self, delta: str) -> list[ParsedSegment]:
        out: list[ParsedSegment] = []
        self._buf += delta
        for offset, c in enumerate(delta):
            if c == "\n":
                if self._newline >= 0 and self._has_text:
                    out.append(self._cut(self._newline))
                    self._has_text = False
                self._newline = len(self._buf) - (len(delta) - offset)
            elif c not in " \t\r":
                self._has_text = True
                self._newline = -1
        return out
