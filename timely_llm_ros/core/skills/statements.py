"""Incremental segmenter for statement-mode plans (MiniSpec drone plans, arm plans).

A segment ends right after a complete top-level statement -- its ';', or the '}' closing a top-level loop or
conditional -- once the text since the previous cut holds at least one action skill. Statements without an action
(``_1=od('cup');``, ``->_1;``) stay pending and join the next segment. A loop or conditional is never cut inside: it
is one statement, and a conditional's body cannot run before its condition is known.

Each completed top-level statement is checked before it can join a segment; the first problem sets ``error`` and
no segment follows (the scheduler ends the plan INVALID_PLAN, or UNKNOWN_SKILL when ``unknown_skills`` says why):

- it parses under the skill set (skills, argument literals, statement forms);
- the plan's calls with loops unrolled stay within ``max_calls`` (counted before anything is unrolled);
- it cannot fail on the robot for a kind (core/skills/static_check.py: variables set before read, comparison and
  argument kinds, with the variables the earlier statements set);
- it calls only skills the robot has (``robot_skills``, its executor's advertised skills; None: unchecked).

Per character the segmenter only tracks quotes, parentheses and braces (a regex skips ordinary characters); each
completed top-level statement is parsed once, so the cost per token is a few microseconds.
"""
from __future__ import annotations

import re
from typing import AbstractSet, Mapping

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.minispec import FORMS, ParseResult, parse
from timely_llm_ros.core.skills.program import MAX_PLAN_CALLS, Statement
from timely_llm_ros.core.skills.segment import ParsedSegment, Segmenter
from timely_llm_ros.core.skills.spec import SkillSpec
from timely_llm_ros.core.skills.static_check import PlanChecker

_SPECIAL = re.compile(r"""['"(){};]""")
_STRING_STOP = {"'": re.compile(r"[\\']"), '"': re.compile(r'[\\"]')}


class StatementSegmenter(Segmenter):
    """Segments ';'-terminated statement plans; ``error`` is set on the first invalid statement."""

    def __init__(self, skills: Mapping[str, SkillSpec], forms: tuple[str, ...] = FORMS,
                 max_calls: int | None = MAX_PLAN_CALLS, robot_skills: AbstractSet[str] | None = None,
                 static_check: bool = True) -> None:
        """static_check False leaves out the kind and variable checks (tests of the cuts alone, over random text)."""
        super().__init__()
        self._skills = skills
        self._forms = forms
        self._max_calls = max_calls
        self._robot_skills = robot_skills
        self._checker = PlanChecker(skills) if static_check else None
        self._plan_calls = 0    # calls of the statements accepted so far, loops unrolled
        self._program: list[Statement] = []   # statements of completed statements not yet in a segment
        self.unknown_skills: list[str] = []   # set with ``error`` when the plan calls skills the robot lacks
        self._scan = 0          # offset in _buf scanned so far
        self._stmt_start = 0    # offset in _buf where the current top-level statement starts
        self._depth = 0         # braces open
        self._paren = 0         # parentheses open
        self._quote = ""        # quote character of the string we are inside, or ""
        self._escape = False    # the previous character was a backslash inside a string
        self._calls: list[SkillCall] = []  # calls of completed statements not yet in a segment
        self._finished = False

    @property
    def in_block(self) -> bool:
        """Whether the text fed ends inside a loop's or a conditional's braces (no cut is possible before they
        close)."""
        return self._depth > 0

    def feed(self, delta: str) -> list[ParsedSegment]:
        if self._finished:
            raise RuntimeError("feed() after finish(): use a fresh segmenter for each generation")
        self._buf += delta
        out: list[ParsedSegment] = []
        if self.error is not None:
            return out
        buf, i = self._buf, self._scan
        n = len(buf)
        while i < n:
            if self._quote:
                if self._escape:
                    self._escape, i = False, i + 1
                    continue
                m = _STRING_STOP[self._quote].search(buf, i)
                if m is None:
                    i = n
                elif m.group() == "\\":
                    self._escape, i = True, m.end()
                else:
                    self._quote, i = "", m.end()
                continue
            m = _SPECIAL.search(buf, i)
            if m is None:
                i = n
                break
            c, i = m.group(), m.end()
            if c in "'\"":
                self._quote = c
            elif c == "(":
                self._paren += 1
            elif c == ")":
                if self._paren == 0:
                    return self._fail(f"')' at offset {i - 1} of the pending text closes nothing", out)
                self._paren -= 1
            elif self._paren:
                return self._fail(f"{c!r} inside parentheses at offset {i - 1} of the pending text", out)
            elif c == "{":
                self._depth += 1
            elif c == "}":
                if self._depth == 0:
                    return self._fail(f"unbalanced braces: '}}' at offset {i - 1} of the pending text closes nothing",
                                      out)
                self._depth -= 1
                if self._depth == 0 and self._statement_end(i, out):
                    buf, i, n = self._buf, 0, len(self._buf)
            elif self._depth == 0:  # ';' ending a top-level statement
                if self._statement_end(i, out):
                    buf, i, n = self._buf, 0, len(self._buf)
            if self.error is not None:
                return out
        self._scan = n
        return out

    def _statement_end(self, end: int, out: list[ParsedSegment]) -> bool:
        """Parse the statement ending at ``end``; cut a segment if the pending text now acts. True if cut."""
        if not self._accept(self._buf[self._stmt_start:end]):
            return False
        if not self._acts(self._calls):
            self._stmt_start = end
            return False
        out.append(ParsedSegment(self._buf[:end], self._calls, tuple(self._program)))
        self._buf = self._buf[end:]
        self._calls, self._program, self._stmt_start, self._scan = [], [], 0, 0
        return True

    def _accept(self, text: str, prefix: str = "") -> bool:
        """Check one complete statement (see the module docstring); add it to the pending ones, or set ``error``."""
        result: ParseResult = parse(text, self._skills, self._forms, self._max_calls, self._plan_calls)
        problems = result.problems or (self._checker.check(result.program) if self._checker is not None else [])
        if problems:
            self.error = prefix + "; ".join(problems)
            return False
        if self._robot_skills is not None:
            missing = list(dict.fromkeys(c.name for c in result.skills if c.name not in self._robot_skills))
            if missing:
                self.unknown_skills = missing
                self.error = (f"the plan calls {', '.join(repr(m) for m in missing)}, which the robot's executor does "
                              f"not have (it has: {', '.join(sorted(self._robot_skills))})")
                return False
        self._plan_calls += len(result.skills)
        self._calls += result.skills
        self._program += result.program
        return True

    def _acts(self, calls: list[SkillCall]) -> bool:
        return any(self._skills[c.name].is_action for c in calls)

    def _fail(self, problem: str, out: list[ParsedSegment]) -> list[ParsedSegment]:
        self.error = problem
        return out

    def finish(self) -> ParsedSegment | None:
        self._finished = True
        rest = self._buf[self._stmt_start:]
        if self.error is not None or not self._buf.strip():
            return None
        if rest.strip():
            if not self._accept(rest, prefix="incomplete plan: "):
                return None
            self._stmt_start = len(self._buf)
        if not self._acts(self._calls):
            return None
        segment = ParsedSegment(self._buf, self._calls, tuple(self._program))
        self._buf, self._calls, self._program, self._stmt_start = "", [], [], 0
        return segment
