"""Static check of a parsed plan: the run-time errors of the interpreter (core/skills/interpreter.py), found before
the plan runs.

A plan is checked statement by statement as it is generated (the segmenter does: core/skills/statements.py), with
what the statements before set, so a problem ends the plan before the statement is dispatched (INVALID_PLAN). It
reports what the interpreter would raise on some robot's scene:

- a variable read before every path to it has set it (one set only inside a conditional's body may be unset after
  it; a loop's body runs at least once);
- a condition that is not a bool, a comparison of two kinds (a float with a str), an ordering (``>``) of anything
  but numbers, a comparison with the no-value of an action (``_1=tp();?_1==True{...}``);
- an argument of the wrong kind: a skill's ``int`` argument given a str or a bool (a variable or a query's value),
  a ``str`` argument given a number.

Kinds are a query's declared ``returns`` (the skill set's), a literal's, or a variable's (its last assignment); a
query that declares none gives a value of any kind, which is never a problem. A variable whose kind depends on the
path (set to a float, then to a str inside a conditional) is a problem wherever a kind matters.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.program import (Assign, Condition, Conditional, Logic, Loop, Operand, Return,
                                                Statement, Var)
from timely_llm_ros.core.skills.spec import SkillSpec, shown_kind

ANY = "any"           # a value of any kind (a query without declared returns)
NONE = "no value"     # what an action gives
MIXED = "mixed"       # a variable whose kind depends on the path taken
_ORDERING = (">", "<", ">=", "<=")
_ARG_KINDS = {"int": "float", "str": "str", "object": "str"}    # a skill's argument kind -> the value kind it takes


def value_kind(value: Any) -> str:
    """The kind of a literal: bool, float (any number) or str."""
    if isinstance(value, bool):
        return "bool"
    return "float" if isinstance(value, (int, float)) else "str"


class PlanChecker:
    """Checks one plan's statements in order; ``variables`` holds the variables every path so far has set (with
    their kinds) and ``maybe`` those some path may have left unset."""

    def __init__(self, skills: Mapping[str, SkillSpec]) -> None:
        self._skills = skills
        self.variables: dict[str, str] = {}
        self.maybe: set[str] = set()

    def check(self, program: Sequence[Statement]) -> list[str]:
        """The problems of these statements, run after those checked before (the state moves past them)."""
        problems: list[str] = []
        self.variables = self._block(program, dict(self.variables), problems)
        self.maybe -= set(self.variables)
        return list(dict.fromkeys(problems))

    # ---- statements
    def _block(self, program: Sequence[Statement], env: dict[str, str], problems: list[str]) -> dict[str, str]:
        for stmt in program:
            if isinstance(stmt, SkillCall):
                self._operand(stmt, env, problems)
            elif isinstance(stmt, Assign):
                env[stmt.var] = self._operand(stmt.value, env, problems)
            elif isinstance(stmt, Return):
                self._operand(stmt.value, env, problems)
            elif isinstance(stmt, Loop):
                env = self._block(stmt.body, env, problems)
                if stmt.count > 1:     # a second round starts from what the first one set
                    env = self._block(stmt.body, env, problems)
            elif isinstance(stmt, Conditional):
                self._condition(stmt.condition, env, problems)
                taken = self._block(stmt.body, dict(env), problems)
                self.maybe |= set(taken) - set(env)
                env = {name: kind if taken[name] == kind else MIXED for name, kind in env.items()}
        return env

    # ---- conditions
    def _condition(self, cond: Condition, env: dict[str, str], problems: list[str]) -> None:
        if isinstance(cond, Logic):
            for term in cond.terms:
                self._condition(term, env, problems)
            return
        left = self._operand(cond.left, env, problems)
        where = _show(cond.left) + (f"{cond.op}{_show(cond.right)}" if cond.op else "")
        if not cond.op:
            if left not in ("bool", ANY):
                problems.append(f"the condition {where} needs a bool, but {_show(cond.left)} gives {_say(left)}")
            return
        right = self._operand(cond.right, env, problems)
        if NONE in (left, right):
            problems.append(f"{where} compares with an action's result, which has no value (only queries give "
                            "values)")
        elif MIXED in (left, right):
            problems.append(f"{where} compares a variable whose kind depends on the branch taken before")
        elif ANY not in (left, right) and left != right:
            problems.append(f"{where} compares {_say(left)} with {_say(right)}")
        elif cond.op in _ORDERING and left not in ("float", ANY):
            problems.append(f"{where}: {cond.op} needs numbers, got {_say(left)}")

    # ---- values
    def _operand(self, operand: Operand, env: dict[str, str], problems: list[str]) -> str:
        """The kind of value the operand gives (its problems appended)."""
        if isinstance(operand, SkillCall):
            return self._call(operand, env, problems)
        if isinstance(operand, Var):
            if operand in env:
                return env[operand]
            if operand in self.maybe:
                problems.append(f"variable {operand} is read where it may be unset: it is set only inside a "
                                "conditional's body before")
            else:
                problems.append(f"variable {operand} is read before any statement sets it")
            return ANY
        return value_kind(operand)

    def _call(self, call: SkillCall, env: dict[str, str], problems: list[str]) -> str:
        kinds = [self._operand(a, env, problems) for a in call.args]
        spec = self._skills.get(call.name)
        if spec is None:        # the parser names unknown skills
            return ANY
        for k, (wanted, arg, got) in enumerate(zip(spec.args, call.args, kinds), 1):
            if not isinstance(arg, (SkillCall, Var)):   # literals: the parser checked them
                continue
            need = _ARG_KINDS.get(wanted)
            if got == NONE or (need is not None and got not in (need, ANY)):
                problems.append(f"{call.name} argument {k} must be {shown_kind(wanted)}, but {_show(arg)} gives "
                                f"{_say(got)}")
        if not spec.is_action:
            return spec.returns or ANY
        return NONE


def _say(kind: str) -> str:
    return {NONE: "no value (an action's result)", MIXED: "a kind that depends on the branch taken",
            ANY: "any value"}.get(kind, f"a {kind}")


def _show(operand: Operand) -> str:
    """An operand as plan text."""
    if isinstance(operand, SkillCall):
        return f"{operand.name}({','.join(_show(a) for a in operand.args)})"
    if isinstance(operand, (Var, bool)) or not isinstance(operand, str):
        return str(operand)
    return repr(operand)
