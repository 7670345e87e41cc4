"""How long a segment keeps its robot busy, from its statements: the expected time (E, what the policies plan the
next segment's deadline with) and the worst case (the bound a robot is held to: the execution deadline).

Expected time: a call takes its skill's minimum time for its arguments (core/exec_time.py); a call whose argument is
a variable or a query's value (known only on the robot) takes the mean time of that skill over the calls the robots
ran; a loop's body counts as often as it repeats; a conditional counts its condition's calls and its body weighted
by the probability that the condition holds; a return ends the block, so what follows a conditional whose body
returns counts with the probability that the plan goes on.

Branch probabilities are learned per (robot type, condition) from what the robots report: the skills a finished
segment executed are matched against its statements, which tells, for each conditional it reached, whether its body
ran. A condition is named by its queries and comparisons with the objects left out (``iv()==True``; a variable as
the query that set it, ``_1>200`` after ``_1=od('cup')`` is ``od()>200``), so what a query tends to answer on this
robot type carries over from one object to the next. Before any report a condition holds with probability 1/2
(Laplace's rule of succession afterwards).

Worst case: every conditional's body taken, loops unrolled; a variable argument counts the longest time that skill
took so far. It bounds the expected time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from timely_llm_ros.core.exec_time import ExecTimeModel
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills.program import (Assign, Compare, Condition, Conditional, Logic, Loop, Operand, Return,
                                                Statement, Var, call_count, condition_calls, operand_calls,
                                                worst_case_calls)

REPLAY_MAX_CALLS = 500   # segments with more calls (loops unrolled) teach nothing: matching them costs too much


@dataclass(frozen=True)
class SegmentTime:
    """A segment's execution time (s): expected, and its worst case."""

    expected: float
    worst: float


@dataclass
class _Counts:
    held: int = 0
    reached: int = 0


@dataclass
class _SkillTimes:
    total: float = 0.0
    n: int = 0
    longest: float = 0.0


@dataclass
class PlanTimeEstimator:
    """Estimates segments' execution times and learns from what the robots ran (see the module docstring).
    Single-threaded, like the scheduler that owns it."""

    branch_aware: bool = True      # False: every conditional's body counts (the worst case as the expected time)
    _branches: dict[tuple[str, str], _Counts] = field(default_factory=dict)
    _skills: dict[tuple[str, str], _SkillTimes] = field(default_factory=dict)

    # ----------------------------------------------------------------- what it learned
    def probability(self, robot_type: str, condition: str) -> float:
        """The probability that a conditional named ``condition`` runs its body on robots of this type."""
        counts = self._branches.get((robot_type, condition))
        return 0.5 if counts is None else (counts.held + 1) / (counts.reached + 2)

    def skill_mean(self, robot_type: str, model: ExecTimeModel, name: str) -> float:
        """Mean time of the calls of skill ``name`` the robots ran (the skill's minimum before any)."""
        seen = self._skills.get((robot_type, name))
        return seen.total / seen.n if seen is not None and seen.n else model.skill_min(SkillCall(name, ()))

    def skill_longest(self, robot_type: str, model: ExecTimeModel, name: str) -> float:
        seen = self._skills.get((robot_type, name))
        return max(seen.longest if seen is not None else 0.0, model.skill_min(SkillCall(name, ())))

    # ----------------------------------------------------------------- estimates
    def estimate(self, robot_type: str, model: ExecTimeModel, program: Sequence[Statement],
                 variables: dict[str, str]) -> SegmentTime:
        """The segment's times; ``variables`` (variable -> the query that set it) is the plan's so far, updated with
        the segment's assignments."""
        expected, _ = self._expected(robot_type, model, program, variables)
        worst = sum(self._call_time(robot_type, model, c, worst=True) for c in worst_case_calls(program))
        if not self.branch_aware:
            expected = sum(self._call_time(robot_type, model, c) for c in worst_case_calls(program))
        return SegmentTime(min(expected, worst), worst)

    def _expected(self, robot_type: str, model: ExecTimeModel, block: Sequence[Statement],
                  variables: dict[str, str]) -> tuple[float, float]:
        """(expected seconds, probability that the plan runs past the block)."""
        total, reach = 0.0, 1.0
        for stmt in block:
            if reach <= 0.0:
                break
            go_on = 1.0
            if isinstance(stmt, SkillCall):
                dt = self._calls_time(robot_type, model, operand_calls(stmt))
            elif isinstance(stmt, Assign):
                dt = self._calls_time(robot_type, model, operand_calls(stmt.value))
                _bind(variables, stmt)
            elif isinstance(stmt, Return):
                dt, go_on = self._calls_time(robot_type, model, operand_calls(stmt.value)), 0.0
            elif isinstance(stmt, Loop):
                body, again = self._expected(robot_type, model, stmt.body, variables)
                rounds = float(stmt.count) if again >= 1.0 else (1.0 - again ** stmt.count) / (1.0 - again)
                dt, go_on = body * rounds, again ** stmt.count
            else:
                p = self.probability(robot_type, condition_name(stmt.condition, variables))
                body, after = self._expected(robot_type, model, stmt.body, variables)
                dt = self._calls_time(robot_type, model, condition_calls(stmt.condition)) + p * body
                go_on = (1.0 - p) + p * after
            total += reach * dt
            reach *= go_on
        return total, reach

    def _calls_time(self, robot_type: str, model: ExecTimeModel, calls: Sequence[SkillCall]) -> float:
        return sum(self._call_time(robot_type, model, c) for c in calls)

    def _call_time(self, robot_type: str, model: ExecTimeModel, call: SkillCall, worst: bool = False) -> float:
        if any(isinstance(a, (Var, SkillCall)) for a in call.args):   # known only on the robot
            return (self.skill_longest if worst else self.skill_mean)(robot_type, model, call.name)
        return model.skill_min(call)

    # ----------------------------------------------------------------- learning
    def observe(self, robot_type: str, model: ExecTimeModel, program: Sequence[Statement],
                variables: Mapping[str, str], executed: Sequence[SkillCall]) -> bool:
        """A segment ran to its end on a robot and made the calls ``executed`` (with their argument values):
        learn which conditionals it took and how long its skills take. ``variables``: the plan's variables as the
        segment was estimated. False when the calls match no way through the statements (nothing learned of the
        branches)."""
        for call in executed:
            seen = self._skills.setdefault((robot_type, call.name), _SkillTimes())
            t = model.skill_min(call) if model.knows(call.name) else 0.0
            seen.total, seen.n, seen.longest = seen.total + t, seen.n + 1, max(seen.longest, t)
        if call_count(program, REPLAY_MAX_CALLS) > REPLAY_MAX_CALLS:
            return False
        taken = branches_taken(program, [c.name for c in executed])
        if taken is None:
            return False
        names = dict(variables)
        for cond, held in taken:
            counts = self._branches.setdefault((robot_type, condition_name(cond.condition, names)), _Counts())
            counts.reached += 1
            counts.held += int(held)
        return True


def _bind(variables: dict[str, str], stmt: Assign) -> None:
    """Record which query set the variable (or forget it: a literal or an action)."""
    value = stmt.value
    if isinstance(value, SkillCall):
        variables[stmt.var] = value.name
    elif isinstance(value, Var) and value in variables:
        variables[stmt.var] = variables[value]
    else:
        variables.pop(stmt.var, None)


def condition_name(cond: Condition, variables: Mapping[str, str]) -> str:
    """A condition as the key of its branch statistics: queries without their arguments, variables as the query
    that set them, comparisons and literals as written."""
    if isinstance(cond, Logic):
        return cond.op.join(f"({condition_name(t, variables)})" for t in cond.terms)
    left = _operand_name(cond.left, variables)
    return left if not cond.op else f"{left}{cond.op}{_operand_name(cond.right, variables)}"


def _operand_name(operand: Operand, variables: Mapping[str, str]) -> str:
    if isinstance(operand, SkillCall):
        return f"{operand.name}()"
    if isinstance(operand, Var):
        return f"{variables[operand]}()" if operand in variables else "_"
    return repr(operand)


# ----------------------------------------------------------------------------------------------- matching
_State = dict[tuple[int, bool], tuple]   # (calls matched, returned) -> the conditionals decided on the way


def branches_taken(program: Sequence[Statement], executed: Sequence[str]) -> list[tuple[Conditional, bool]] | None:
    """Which conditionals a run of ``program`` reached and whether each ran its body, from the names of the calls
    it executed (in order); None when no way through the statements makes exactly these calls. A condition's
    terms stop as the interpreter stops them (``&`` at the first that fails, ``|`` at the first that holds)."""
    names = tuple(executed)
    states = _block(program, {(0, False): ()}, names)
    for (pos, _), taken in states.items():
        if pos == len(names):
            return list(taken)
    return None


def _block(block: Sequence[Statement], states: _State, names: tuple[str, ...]) -> _State:
    for stmt in block:
        if not states:
            break
        if isinstance(stmt, SkillCall):
            states = _calls(states, _names(operand_calls(stmt)), names)
        elif isinstance(stmt, Assign):
            states = _calls(states, _names(operand_calls(stmt.value)), names)
        elif isinstance(stmt, Return):
            states = {(p, True): t for (p, _), t in _calls(states, _names(operand_calls(stmt.value)), names).items()}
        elif isinstance(stmt, Loop):
            for _ in range(stmt.count):
                states = _block(stmt.body, states, names)
                if all(r for _, r in states):
                    break
        else:
            states = _conditional(stmt, states, names)
    return states


def _conditional(stmt: Conditional, states: _State, names: tuple[str, ...]) -> _State:
    out: _State = {}
    for (pos, returned), taken in states.items():
        if returned:
            out.setdefault((pos, returned), taken)
            continue
        for seq, held in _alternatives(stmt.condition):
            if names[pos:pos + len(seq)] != seq:
                continue
            start = {(pos + len(seq), False): taken + ((stmt, held),)}
            for key, value in (_block(stmt.body, start, names) if held else start).items():
                out.setdefault(key, value)
    return out


def _calls(states: _State, seq: tuple[str, ...], names: tuple[str, ...]) -> _State:
    out: _State = {}
    for (pos, returned), taken in states.items():
        if returned:
            out.setdefault((pos, returned), taken)
        elif names[pos:pos + len(seq)] == seq:
            out.setdefault((pos + len(seq), False), taken)
    return out


def _alternatives(cond: Condition) -> list[tuple[tuple[str, ...], bool]]:
    """Each way a condition can be evaluated: (the calls it makes, whether it holds)."""
    if isinstance(cond, Compare):
        seq = _names(operand_calls(cond.left) + operand_calls(cond.right))
        return [(seq, True), (seq, False)]
    stop = cond.op == "|"          # '|' stops at a term that holds, '&' at one that fails
    ways: list[tuple[tuple[str, ...], bool]] = [((), not stop)]
    for term in cond.terms:
        nxt = []
        for seq, value in ways:
            if value == stop:
                nxt.append((seq, value))
                continue
            nxt += [(seq + s, v) for s, v in _alternatives(term)]
        ways = list(dict.fromkeys(nxt))
    return ways


def _names(calls: Sequence[SkillCall]) -> tuple[str, ...]:
    return tuple(c.name for c in calls)
