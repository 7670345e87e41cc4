"""A parsed plan as the robot runs it (built by ``minispec.parse``), and its worst-case sequence of skill calls.

Operands are literals (int, float, str, bool), variables (``Var``) or calls (``SkillCall``, whose arguments are
operands again: nested calls are evaluated first). The worst case -- loops unrolled, every conditional's condition
followed by its body -- is what the scheduler estimates and the segmenter checks for an action.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

# MAX_PLAN_CALLS: a plan's skill calls with its loops unrolled, at most (its worst case: every conditional's body
# taken). A plan over it is refused before anything is unrolled: ``1000{1000{mf(1);}}`` is 18 characters and 10^6
# calls. The server's parameter max_plan_calls defaults to it; the plan grammar's bound on unrolled calls is the same.
from timely_llm_ros.core.request import MAX_PLAN_CALLS, SkillCall  # noqa: F401  (MAX_PLAN_CALLS re-exported)


class Var(str):
    """A variable used as an argument (``_1``): a plain string to consumers, known only at run time."""

    __slots__ = ()


Operand = Any   # SkillCall (its result) | Var | int | float | str | bool


@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right``; op "" tests ``left`` alone (it must be a bool)."""

    left: Operand
    op: str = ""
    right: Operand = None


@dataclass(frozen=True, slots=True)
class Logic:
    """Terms joined by one operator: "&" (all hold) or "|" (one holds), evaluated left to right."""

    op: str
    terms: tuple["Condition", ...]


Condition = Union[Compare, Logic]


@dataclass(frozen=True, slots=True)
class Assign:
    """``_1=operand;``: binds a plan-scoped variable."""

    var: str
    value: Operand


@dataclass(frozen=True, slots=True)
class Return:
    """``->operand;``: the plan ends with this value."""

    value: Operand


@dataclass(frozen=True, slots=True)
class Loop:
    """``N{...}``: the body runs N times."""

    count: int
    body: tuple["Statement", ...]


@dataclass(frozen=True, slots=True)
class Conditional:
    """``?condition{...}``: the body runs when the condition holds; ``text`` is the condition as written."""

    condition: Condition
    body: tuple["Statement", ...]
    text: str = field(default="", compare=False)


Statement = Union[SkillCall, Assign, Return, Loop, Conditional]


def operand_calls(value: Operand) -> list[SkillCall]:
    """The calls evaluating an operand makes, in order: a call's nested argument calls, then the call itself."""
    if not isinstance(value, SkillCall):
        return []
    out: list[SkillCall] = []
    for arg in value.args:
        out += operand_calls(arg)
    out.append(value)
    return out


def condition_calls(cond: Condition) -> list[SkillCall]:
    """Every call a condition can make (all terms evaluated), left to right."""
    if isinstance(cond, Logic):
        return [c for term in cond.terms for c in condition_calls(term)]
    return operand_calls(cond.left) + operand_calls(cond.right)


def worst_case_calls(program: list[Statement] | tuple[Statement, ...]) -> list[SkillCall]:
    """The calls of a program in execution order with loops unrolled and every conditional's body taken."""
    out: list[SkillCall] = []
    for stmt in program:
        if isinstance(stmt, SkillCall):
            out += operand_calls(stmt)
        elif isinstance(stmt, (Assign, Return)):
            out += operand_calls(stmt.value)
        elif isinstance(stmt, Loop):
            out += worst_case_calls(stmt.body) * stmt.count
        else:
            out += condition_calls(stmt.condition) + worst_case_calls(stmt.body)
    return out


def call_count(program: list[Statement] | tuple[Statement, ...], limit: int | None = None) -> int:
    """How many calls ``worst_case_calls`` would give, counted without unrolling; once the count passes ``limit`` it
    stops and returns a number above it (so a nest of loops costs its text's length, not its product)."""
    total = 0
    for stmt in program:
        if isinstance(stmt, SkillCall):
            total += len(operand_calls(stmt))
        elif isinstance(stmt, (Assign, Return)):
            total += len(operand_calls(stmt.value))
        elif isinstance(stmt, Loop):
            total += call_count(stmt.body, limit) * stmt.count
        else:
            total += len(condition_calls(stmt.condition)) + call_count(stmt.body, limit)
        if limit is not None and total > limit:
            return total
    return total
