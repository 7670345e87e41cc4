"""Plan-quality checks of one generated plan against a labelled task (evaluation.evalset), and their rates.

The checks, per plan:

- parses:      the robot's skill set validates the whole plan (core.skills: grammar, skills, argument types).
- known_skills: the plan calls at least one skill and every name called (``name(`` outside string literals) is a
               skill of the robot type; a plan can pass this and still fail to parse (a missing ';').
- keys:        every key object is a string argument of some call (compared lower-case with whitespace collapsed
               and one leading article "the/a/an/my" removed) and every key skill is called.
- exact:       equal to the reference after removing whitespace outside string literals.
- same_skills: the names called, in text order (a conditional's query included, loops not unrolled), equal the
               reference's: the right skeleton, whatever the arguments.

The textual checks (known_skills, keys, same_skills) read the text directly, so they apply to plans that do not
parse too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.core.skills import SkillSet

CHECKS = ("parses", "known_skills", "keys", "exact", "same_skills")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.S)
_LITERAL_OR_SPACE = re.compile(r"(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|\s+", re.S)
_CALL = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_ARTICLE = re.compile(r"^(?:the|a|an|my)\s+")


@dataclass(frozen=True)
class PlanCheck:
    """The outcome of every check for one plan; ``problems`` are the parser's."""

    parses: bool
    known_skills: bool
    keys: bool
    exact: bool
    same_skills: bool
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in CHECKS}


def normalise(plan: str) -> str:
    """The plan without whitespace outside string literals (literals kept verbatim)."""
    return _LITERAL_OR_SPACE.sub(lambda m: m.group("str") or "", plan.strip())


def called_skills(plan: str) -> list[str]:
    """Names called in the plan, in text order (string literals ignored)."""
    return _CALL.findall(_STRING.sub("''", plan))


def _raw_calls(plan: str) -> list[tuple[str, list[str]]]:
    """Every call written in the plan, in text order, with the text of each argument (stripped)."""
    out: list[tuple[str, list[str]]] = []
    masked = _STRING.sub(lambda lit: lit.group()[0] + " " * (len(lit.group()) - 2) + lit.group()[-1], plan)
    for m in _CALL.finditer(masked):   # calls outside literals; offsets are the same in both texts
        depth, i, args, current = 1, m.end(), [], ""
        while i < len(plan) and depth:
            lit = _STRING.match(plan, i)
            if lit is not None:
                current += lit.group()
                i = lit.end()
                continue
            depth += {"(": 1, ")": -1}.get(plan[i], 0)
            if depth == 1 and plan[i] == ",":
                args.append(current.strip())
                current = ""
            elif depth >= 1:
                current += plan[i]
            i += 1
        if current.strip() or args:
            args.append(current.strip())
        out.append((m.group(1), args))
    return out


def _literal(text: str) -> Any:
    """A string literal unquoted, a number as a number, anything else (a variable, a nested call) as its text."""
    if _STRING.fullmatch(text):
        return text[1:-1]
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def plan_calls(plan: str) -> list[tuple[str, tuple[Any, ...]]]:
    """Every call written in the plan, in text order (a conditional's query where it is written, a loop's body
    once), with its literal arguments. Reads plans that do not parse too."""
    return [(name, tuple(_literal(a) for a in args)) for name, args in _raw_calls(plan)]


def string_arguments(plan: str) -> list[str]:
    """String literals passed as call arguments (any position), unquoted, in text order."""
    return [a[1:-1] for _, args in _raw_calls(plan) for a in args if _STRING.fullmatch(a)]


def _name(text: str) -> str:
    return _ARTICLE.sub("", " ".join(text.lower().split()))


def has_keys(plan: str, key_objects: Iterable[str], key_skills: Iterable[str]) -> bool:
    """Whether the plan names every key object as a call argument and calls every key skill."""
    named = {_name(a) for a in string_arguments(plan)}
    called = set(called_skills(plan))
    return all(_name(k) in named for k in key_objects) and all(s in called for s in key_skills)


def check_plan(task: EvalTask, plan: str, skill_set: SkillSet) -> PlanCheck:
    """Every check of ``plan`` (the model's text, leading/trailing whitespace ignored) for ``task``."""
    if skill_set.name != task.robot_type:
        raise ValueError(f"task {task.id} is a {task.robot_type} task, checked with the {skill_set.name} skill set")
    text = plan.strip()
    problems = tuple(skill_set.validate_plan(text))
    names = called_skills(text)
    return PlanCheck(
        parses=not problems,
        known_skills=bool(names) and all(n in skill_set.skills for n in names),
        keys=has_keys(text, task.key_objects, task.key_skills),
        exact=normalise(text) == normalise(task.plan),
        same_skills=names == called_skills(task.plan),
        problems=problems,
    )


def rates(checks: Iterable[PlanCheck]) -> Mapping[str, float]:
    """Share of plans passing each check (NaN for no plans)."""
    checks = list(checks)
    n = len(checks)
    return {name: (sum(getattr(c, name) for c in checks) / n if n else float("nan")) for name in CHECKS}
