"""Parser for statement-mode plans (MiniSpec for drones; its call-only subset for arms).

Grammar (whitespace allowed between tokens)::

    program   := statement*
    statement := ';'                               empty (e.g. the optional ';' after a block)
               | call end | VAR '=' operand end | '->' operand end
               | INT '{' program '}'               loop, body repeated INT times
               | '?' condition '{' program '}'     conditional, body runs at most once
    end       := ';' | (before '}' or the end of the text: the last ';' may be left out)
    condition := comparison (('&' | '|') comparison)*
    comparison:= '(' condition ')' | operand (('==' | '!=' | '>' | '<' | '>=' | '<=') operand)?
    operand   := call | VAR | NUMBER | STRING | True | False
    call      := SKILL '(' [operand (',' operand)*] ')'

VAR is an identifier starting with '_' (``_1``). ``&`` binds tighter than ``|``. ``parse`` returns the program
(statements as an AST: ``SkillCall`` for a call, whose arguments are values, variables or nested calls;
``Assign``, ``Return``, ``Loop``, ``Conditional`` with ``Compare``/``Logic`` conditions) -- what the robot's
interpreter runs (``interpreter.py``) -- and, derived from it, the skill calls in execution order with loops unrolled
and a conditional's condition followed by its body once (its worst case: the scheduler's estimates and the segmenter
use it), plus every problem found. A text that is one simple statement (a call, an assignment or a return of one
call with plain arguments), the segmenter's usual case, is parsed by one regular expression; anything else by the
recursive-descent parser. Both give the same result (``test/test_segmentation_properties.py`` compares them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.program import (MAX_PLAN_CALLS, Assign, Compare, Condition, Conditional, Logic, Loop,
                                                Operand, Return, Statement, Var, call_count, worst_case_calls)
from timely_llm_ros.core.skills.spec import SkillSpec, shown_kind

FORMS = ("call", "assign", "return", "loop", "conditional")
MAX_LOOP = 1000

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<num>-?\d+(?:\.\d+)?)
    |(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>->|==|!=|>=|<=|[<>=&|?;,(){}])""",
    re.X | re.S,
)
_ESCAPE = re.compile(r"\\(.)", re.S)
_PLAIN_ARG = r"""-?\d+(?:\.\d+)?|'[^'\\]*'|"[^"\\]*"|_[A-Za-z0-9_]*|True|False"""
_SIMPLE = re.compile(   # up to two arguments in groups (no findall for the usual calls), more in ``more``
    rf"""\s*(?:(?P<var>_[A-Za-z0-9_]*)\s*=|(?P<ret>->))?\s*(?P<name>[A-Za-z][A-Za-z0-9_]*)\s*\(\s*
    (?:(?P<a1>{_PLAIN_ARG})(?:\s*,\s*(?P<a2>{_PLAIN_ARG}))?(?P<more>(?:\s*,\s*(?:{_PLAIN_ARG}))*))?\s*\)\s*;?\s*""",
    re.X | re.S,
)
_ARG = re.compile(_PLAIN_ARG)
_COMPARATORS = ("==", "!=", ">", "<", ">=", "<=")


@dataclass(frozen=True)
class _Tok:
    kind: str   # num | str | name | op | end
    text: str
    pos: int


class _Stop(Exception):
    """A syntax error: parsing cannot continue."""


@dataclass(slots=True)
class ParseResult:
    """Skill calls in execution order (worst case), the problems found ([] = valid) and the program (its AST)."""

    skills: list[SkillCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    program: list[Statement] = field(default_factory=list)


def tokenize(text: str) -> list[_Tok]:
    """Split plan text into tokens; raises _Stop on a character no token can start with."""
    toks: list[_Tok] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] in "'\"":
                raise _Stop(f"unterminated string starting at offset {pos}")
            raise _Stop(f"unexpected character {text[pos]!r} at offset {pos}")
        if m.lastgroup != "ws":
            toks.append(_Tok(m.lastgroup or "", m.group(), pos))
        pos = m.end()
    toks.append(_Tok("end", "", n))
    return toks


class _Parser:
    def __init__(self, text: str, skills: Mapping[str, SkillSpec], forms: tuple[str, ...]) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.skills = skills
        self.forms = forms
        self.problems: list[str] = []

    # -- token helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def _at(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def _expect(self, text: str, what: str) -> None:
        if not self._at(text):
            raise _Stop(f"expected {text!r} {what} at offset {self.tok.pos}, got {self._show()}")
        self.i += 1

    def _show(self) -> str:
        return "end of text" if self.tok.kind == "end" else repr(self.tok.text)

    def _form(self, form: str, pos: int) -> None:
        if form not in self.forms:
            raise _Stop(f"{form} statements are not allowed in this skill set (offset {pos}); "
                        f"allowed: {', '.join(self.forms)}")

    # -- grammar
    def program(self, in_block: bool) -> list[Statement]:
        out: list[Statement] = []
        while True:
            if self.tok.kind == "end":
                if in_block:
                    raise _Stop("unbalanced braces: '{' is never closed")
                return out
            if self._at("}"):
                if not in_block:
                    raise _Stop(f"unbalanced braces: '}}' at offset {self.tok.pos} closes nothing")
                return out
            stmt = self.statement()
            if stmt is not None:
                out.append(stmt)

    def statement(self) -> Statement | None:
        tok = self.tok
        if self._at(";"):
            self.i += 1
            return None
        if tok.kind == "num" and self.toks[self.i + 1].text == "{":
            return self.loop()
        if self._at("?"):
            self._form("conditional", tok.pos)
            self.i += 1
            start = self.tok.pos
            cond = self.condition()
            written = self.text[start:self.tok.pos].strip()
            return Conditional(cond, self.block(), written)
        stmt: Statement
        if self._at("->"):
            self._form("return", tok.pos)
            self.i += 1
            stmt = Return(self.operand())
        elif tok.kind == "name" and tok.text.startswith("_"):
            self._form("assign", tok.pos)
            self.i += 1
            self._expect("=", f"after variable {tok.text}")
            stmt = Assign(tok.text, self.operand())
        elif tok.kind == "name" and self.toks[self.i + 1].text == "(":
            self._form("call", tok.pos)
            stmt = self.call()
        else:
            raise _Stop(f"expected a statement at offset {tok.pos}, got {self._show()}")
        self.statement_end()
        return stmt

    def statement_end(self) -> None:
        if self._at(";"):
            self.i += 1
        elif not (self._at("}") or self.tok.kind == "end"):
            raise _Stop(f"expected ';' at offset {self.tok.pos}, got {self._show()}")

    def loop(self) -> Loop:
        tok = self.tok
        self._form("loop", tok.pos)
        self.i += 1
        count = float(tok.text)
        if not count.is_integer() or not 1 <= count <= MAX_LOOP:
            self.problems.append(f"loop count {tok.text} at offset {tok.pos} must be an integer in 1..{MAX_LOOP}")
            count = 1
        return Loop(int(count), self.block())

    def block(self) -> tuple[Statement, ...]:
        self._expect("{", "to open a block")
        body = self.program(in_block=True)
        self._expect("}", "to close a block")
        return tuple(body)

    def condition(self) -> Condition:
        """Terms joined by '|', each terms joined by '&' ('&' binds tighter)."""
        terms = [self.conjunction()]
        while self._at("|"):
            self.i += 1
            terms.append(self.conjunction())
        return terms[0] if len(terms) == 1 else Logic("|", tuple(terms))

    def conjunction(self) -> Condition:
        terms = [self.comparison()]
        while self._at("&"):
            self.i += 1
            terms.append(self.comparison())
        return terms[0] if len(terms) == 1 else Logic("&", tuple(terms))

    def comparison(self) -> Condition:
        if self._at("("):
            self.i += 1
            cond = self.condition()
            self._expect(")", "to close a condition")
            return cond
        left = self.operand()
        if self.tok.kind == "op" and self.tok.text in _COMPARATORS:
            op = self.tok.text
            self.i += 1
            return Compare(left, op, self.operand())
        return Compare(left)

    def operand(self) -> Operand:
        """A value: a literal, a variable (``Var``) or a call (``SkillCall``, evaluated when reached)."""
        tok = self.tok
        if tok.kind == "num":
            self.i += 1
            return float(tok.text) if "." in tok.text else int(tok.text)
        if tok.kind == "str":
            self.i += 1
            return _ESCAPE.sub(r"\1", tok.text[1:-1])
        if tok.kind == "name":
            if tok.text in ("True", "False"):
                self.i += 1
                return tok.text == "True"
            if tok.text.startswith("_"):
                self.i += 1
                return Var(tok.text)
            if self.toks[self.i + 1].text == "(":
                return self.call()
            raise _Stop(f"unknown name {tok.text!r} at offset {tok.pos} (skills are called with '(...)')")
        raise _Stop(f"expected a value at offset {tok.pos}, got {self._show()}")

    def call(self) -> SkillCall:
        name = self.tok
        self.i += 2  # name and '('
        values: list[Operand] = []
        if not self._at(")"):
            while True:
                values.append(self.operand())
                if not self._at(","):
                    break
                self.i += 1
        self._expect(")", f"to close the call to {name.text}")
        _check(name.text, f"at offset {name.pos}", values, self.skills, self.problems)
        return SkillCall(name.text, tuple(values))


def call_problems(call: SkillCall, skills: Mapping[str, SkillSpec], where: str) -> list[str]:
    """What is wrong with one call given as a skill and its literal arguments (a goal's skill list, not text): the
    parser's own checks of a call; ``where`` says where it stands ("in skill 2 of the list")."""
    problems: list[str] = []
    _check(call.name, where, list(call.args), skills, problems)
    return problems


def _check(name: str, where: str, values: list[Any], skills: Mapping[str, SkillSpec], problems: list[str]) -> None:
    """Append what is wrong with a call of skill ``name`` with these argument values (``where``: "at offset 12")."""
    spec = skills.get(name)
    if spec is None:
        problems.append(f"unknown skill {name!r} {where}")
        return
    if len(values) != len(spec.args):
        problems.append(f"{name} ({spec.long}) takes {len(spec.args)} argument(s), got {len(values)} {where}")
        return
    for k, (kind, value) in enumerate(zip(spec.args, values), 1):
        if not _fits(kind, value):
            problems.append(f"{name} argument {k} must be {shown_kind(kind)}, got {value!r} {where}")


def _plain_value(text: str) -> Any:
    """The value of one plain argument (a number, a string without escapes, a variable, True or False)."""
    first = text[0]
    if first in "'\"":
        return text[1:-1]
    if first == "_":
        return Var(text)
    if text in ("True", "False"):
        return text == "True"
    return float(text) if "." in text else int(text)


def _parse_simple(text: str, skills: Mapping[str, SkillSpec], forms: tuple[str, ...]) -> ParseResult | None:
    """The result for a text that is one simple statement in an allowed form, else None (use the parser)."""
    m = _SIMPLE.fullmatch(text)
    if m is None:
        return None
    var, ret, name, a1, a2, more = m.group("var", "ret", "name", "a1", "a2", "more")
    if ("assign" if var is not None else "return" if ret else "call") not in forms:
        return None
    values = [] if a1 is None else [_plain_value(a1)] if a2 is None else [_plain_value(a1), _plain_value(a2)]
    if more:
        values += [_plain_value(a) for a in _ARG.findall(more)]
    call = SkillCall(name, tuple(values))
    stmt: Statement = Assign(var, call) if var is not None else Return(call) if ret else call
    result = ParseResult([call], program=[stmt])
    _check(name, f"at offset {m.start('name')}", values, skills, result.problems)
    return result


def _fits(kind: str, value: Any) -> bool:
    """Whether a parsed argument can have this kind (variables and call results can be anything)."""
    if kind == "any" or isinstance(value, (SkillCall, Var)):
        return True
    if kind == "int":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def parse(text: str, skills: Mapping[str, SkillSpec], forms: tuple[str, ...] = FORMS,
          max_calls: int | None = MAX_PLAN_CALLS, calls_before: int = 0) -> ParseResult:
    """Parse a whole plan (or segment) text. ``max_calls``: the plan's cap on unrolled calls (None: no cap), of which
    ``calls_before`` went to its earlier statements; a text over it is a problem, found before anything is unrolled
    (its ``skills`` are then empty)."""
    simple = _parse_simple(text, skills, forms)
    result = simple if simple is not None else _parse_full(text, skills, forms, max_calls, calls_before)
    if simple is not None and max_calls is not None and calls_before + 1 > max_calls:
        result.problems.append(too_many_calls(max_calls))
        result.skills = []
    return result


def too_many_calls(max_calls: int) -> str:
    """The problem of a plan whose unrolled calls pass the cap."""
    return (f"the plan makes more than {max_calls} skill calls with its loops unrolled (loops multiply their bodies; "
            f"the cap is the server's max_plan_calls, and a robot's executor refuses more than {MAX_PLAN_CALLS}): plan "
            "fewer repetitions")


def _parse_full(text: str, skills: Mapping[str, SkillSpec], forms: tuple[str, ...], max_calls: int | None = None,
                calls_before: int = 0) -> ParseResult:
    """The recursive-descent parser: any text."""
    try:
        parser = _Parser(text, skills, forms)
    except _Stop as stop:
        return ParseResult([], [str(stop)])
    try:
        program = parser.program(in_block=False)
    except _Stop as stop:
        return ParseResult([], parser.problems + [str(stop)])
    if max_calls is not None and call_count(program, max_calls - calls_before) > max_calls - calls_before:
        return ParseResult([], parser.problems + [too_many_calls(max_calls)], program)
    return ParseResult(worst_case_calls(program), parser.problems, program)
