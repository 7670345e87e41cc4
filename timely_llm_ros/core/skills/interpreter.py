"""Runs a plan segment by its meaning on the robot: the statements ``minispec.parse`` builds, one skill call at a time.

- a call runs the skill (through the ``run`` callback) with its arguments' values; a query's value is checked
  against the kind its skill declares (``returns``: bool, float -- an int is taken as a float --, or str);
- ``_1=v;`` binds a variable in the plan's state; later statements and later segments of the same plan read it;
- ``?cond{...}`` evaluates ``cond`` when it is reached (left to right; ``&`` stops at the first term that fails,
  ``|`` at the first that holds) and runs the body only if it holds;
- ``N{...}`` runs the body N times;
- ``->v;`` ends the plan with v: nothing after it runs, in this segment or a later one.

Errors a robot can hit (a variable no statement set, comparing a bool with a string, a query whose value is not
what its skill declares) raise ``PlanError`` with a message that says what went wrong. Cancellation is checked
before every skill call (``Stopped``). Exceptions of the ``run`` callback (a skill that failed) pass through.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.program import Assign, Compare, Condition, Conditional, Logic, Loop, Operand, Return, Statement, Var

RunCall = Callable[[SkillCall], Any]
_ORDERING = (">", "<", ">=", "<=")


class PlanError(Exception):
    """The plan cannot go on on this robot; the message says why (it goes into the segment's FAILED result)."""


class Stopped(Exception):
    """The segment was cancelled (or the robot is shutting down): checked between two skill calls."""


@dataclass
class PlanState:
    """What the segments of one plan share on the robot: variables, and the value once a return ran."""

    variables: dict[str, Any] = field(default_factory=dict)
    returned: bool = False
    value: Any = None
    returned_at: int | None = None   # index of the segment whose return ended the plan


@dataclass
class SegmentRun:
    """What one segment did, filled while it runs (so it is complete up to the point where it stopped)."""

    executed: list[SkillCall] = field(default_factory=list)      # calls started, with argument values
    branches: list[tuple[str, bool]] = field(default_factory=list)  # each conditional reached: its text, held
    returned: bool = False
    value: Any = None


class _Returned(Exception):
    """A return statement ran (internal: unwinds nested blocks)."""


def format_value(value: Any) -> str:
    """A value as it travels in a result: strings as they are, True/False, numbers as Python writes them."""
    return "" if value is None else value if isinstance(value, str) else repr(value)


def describe(value: Any) -> str:
    """A value with its kind, for error messages."""
    if value is None:
        return "no value"
    return f"{_kind(value)} {value!r}"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "float"
    return "str" if isinstance(value, str) else type(value).__name__


class Interpreter:
    """Runs segments of plans; ``run(call)`` performs one skill call with evaluated arguments and returns its value.

    ``returns`` maps a skill name to the kind of value it gives (RETURN_KINDS); skills not in it may return anything
    (an action returns nothing). ``stopped()`` is asked before every call."""

    def __init__(self, run: RunCall, returns: Mapping[str, str] | None = None,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self._run = run
        self._returns = dict(returns or {})
        self._stopped = stopped

    def run_segment(self, program: Sequence[Statement], state: PlanState, index: int = 0,
                    record: SegmentRun | None = None) -> SegmentRun:
        """Run one segment's statements on the plan's state; returns (and fills) ``record``."""
        record = record if record is not None else SegmentRun()
        if state.returned:
            raise PlanError(f"the plan already returned at segment {state.returned_at}; nothing after it runs")
        try:
            self._block(program, state, record)
        except _Returned:
            state.returned, state.value, state.returned_at = True, record.value, index
        return record

    # ---- statements
    def _block(self, program: Sequence[Statement], state: PlanState, record: SegmentRun) -> None:
        for stmt in program:
            if isinstance(stmt, SkillCall):
                self._value(stmt, state, record)
            elif isinstance(stmt, Assign):
                state.variables[stmt.var] = self._value(stmt.value, state, record)
            elif isinstance(stmt, Return):
                record.value = self._value(stmt.value, state, record)
                record.returned = True
                raise _Returned()
            elif isinstance(stmt, Loop):
                for _ in range(stmt.count):
                    self._block(stmt.body, state, record)
            elif isinstance(stmt, Conditional):
                held = self._holds(stmt.condition, state, record)
                record.branches.append((stmt.text, held))
                if held:
                    self._block(stmt.body, state, record)
            else:  # cannot happen with minispec's parser
                raise PlanError(f"unknown statement {stmt!r}")

    # ---- conditions
    def _holds(self, cond: Condition, state: PlanState, record: SegmentRun) -> bool:
        if isinstance(cond, Logic):
            if cond.op == "&":
                return all(self._holds(term, state, record) for term in cond.terms)
            return any(self._holds(term, state, record) for term in cond.terms)
        left = self._value(cond.left, state, record)
        if not cond.op:
            if not isinstance(left, bool):
                raise PlanError(f"a condition needs a bool; {_show(cond.left)} is {describe(left)}")
            return left
        right = self._value(cond.right, state, record)
        return _compare(left, cond.op, right, cond)

    # ---- values
    def _value(self, operand: Operand, state: PlanState, record: SegmentRun) -> Any:
        if isinstance(operand, SkillCall):
            call = SkillCall(operand.name, tuple(self._value(a, state, record) for a in operand.args))
            if self._stopped():
                raise Stopped(f"cancelled before {call.name}")
            record.executed.append(call)
            return self._checked(call, self._run(call))
        if isinstance(operand, Var):
            try:
                return state.variables[operand]
            except KeyError:
                known = ", ".join(sorted(state.variables)) or "none"
                raise PlanError(f"variable {operand} is not set: no earlier statement of this plan assigned it "
                                f"(set: {known})") from None
        return operand

    def _checked(self, call: SkillCall, value: Any) -> Any:
        kind = self._returns.get(call.name)
        if kind is None:
            return value
        if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if _kind(value) != kind:
            raise PlanError(f"query {_show(call)} gave {describe(value)}; its skill declares returns: {kind}")
        return value


def _compare(left: Any, op: str, right: Any, cond: Compare) -> bool:
    where = f"in {_show(cond.left)}{op}{_show(cond.right)}"
    if left is None or right is None:
        raise PlanError(f"cannot compare {describe(left)} with {describe(right)} {where}: "
                        "only query skills give values")
    if _kind(left) != _kind(right):
        raise PlanError(f"cannot compare {describe(left)} with {describe(right)} {where}")
    if op in _ORDERING and _kind(left) != "float":
        raise PlanError(f"{op} needs numbers, got {describe(left)} and {describe(right)} {where}")
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == ">":
        return left > right
    if op == "<":
        return left < right
    return left >= right if op == ">=" else left <= right


def _show(operand: Operand) -> str:
    """An operand as plan text."""
    if isinstance(operand, SkillCall):
        return f"{operand.name}({','.join(_show(a) for a in operand.args)})"
    if isinstance(operand, Var) or isinstance(operand, bool) or not isinstance(operand, str):
        return str(operand)
    return repr(operand)
