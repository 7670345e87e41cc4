"""The statement language of a skill set as an EBNF grammar, for grammar-constrained decoding.

``plan_grammar(skill_set)`` returns the grammar text (xgrammar's EBNF, which llguidance and vLLM's structured
outputs also take) or None for a prose skill set. Every plan it accepts parses under ``minispec.parse`` with no
problems; it accepts a subset of what the parser does, chosen so that a small model cannot wander:

- only the skill set's skills, each argument of its declared kind: ``int`` a number of at most 4 digits with an
  optional '-' (coordinates), ``str`` a single-quoted string of 1-40 characters (letters, digits, space and
  ``?.,!``; it starts with a letter or digit), ``any`` either or True/False; a variable ``_1``..``_9`` stands for
  a value wherever the skill set allows assignments;
- the statement forms the skill set allows: a call ``sk(...);``, an assignment ``_1=query(...);`` (query skills
  only), a return ``->value;`` (it ends its block, or the plan: nothing after it would run), a loop ``N{...}``
  (N in 1..99) and a conditional ``?cond{...}`` (at most four comparisons joined by ``&`` or ``|``, a query of a
  declared return kind compared with values of that kind); simple statements always end in ';', a block may be
  followed by one;
- blocks closed, nested at most two deep, never empty;
- whitespace only where it reads naturally, at most one space or newline at a time (a model under a grammar that
  allows any whitespace can emit it forever);
- at most ``max_statements`` statements in all, nested ones and block heads counted, so the plan ends cleanly before
  the length cap. The bound is the cap divided by ``TOKENS_PER_STATEMENT`` = 10: the project's reference plans
  (model/corpus.py, config/eval) average 4-5 tokens a statement, their longest statement takes 13 of SmolLM2's
  tokens (18 of the embedded planner's, whose prompts run unconstrained) and their longest plan holds 16
  statements. A 200-token cap gives 20 statements (SmolLM2's caps in its own tokens, 189 for the arm and 228 for
  the drone, give 18 and 22): more than any reference plan, and a model repeating statements of up to 10 tokens
  reaches the last one and must stop before the cap would cut it;
- at least one action call (a plan of queries and returns alone gives the robot nothing to execute).

The statement count and whether an action came yet are tracked by the rules themselves (``s<d>_<k>``: a statement
at block depth d with k left, ``e<d>_<k>``: what may follow one, suffix ``n``: no action yet), a right-linear
grammar of O(max_statements) rules (unreachable ones left out).
"""
from __future__ import annotations

import re
from typing import Iterable

from .skill_set import SkillSet
from .spec import SkillSpec

TOKENS_PER_STATEMENT = 10
MAX_DEPTH = 2            # blocks inside blocks: one level
MAX_COMPARISONS = 4      # comparisons in a condition
STRING_CHARS = "a-zA-Z0-9 ?.,!"   # the characters a string argument may hold (a character class body)
MAX_STRING = 40
MAX_DIGITS = 4


def max_statements(max_plan_tokens: int) -> int:
    """Statements a plan may hold under a cap of ``max_plan_tokens`` tokens (see the module docstring)."""
    return max(1, max_plan_tokens // TOKENS_PER_STATEMENT)


def plan_grammar(skill_set: SkillSet, max_plan_tokens: int | None = None) -> str | None:
    """The EBNF grammar of the skill set's plans (root rule ``root``), or None for a prose skill set.
    ``max_plan_tokens`` (default the skill set's) sets the statement bound."""
    if skill_set.mode != "statements":
        return None
    if "call" not in skill_set.statement_forms:
        raise ValueError(f"skill set {skill_set.name!r} allows no call statements: no plan of it could act")
    cap = skill_set.max_plan_tokens if max_plan_tokens is None else max_plan_tokens
    return _Builder(skill_set.skills.values(), skill_set.statement_forms, max_statements(cap)).text()


class _Builder:
    def __init__(self, skills: Iterable[SkillSpec], forms: tuple[str, ...], n: int) -> None:
        self.skills = list(skills)
        self.queries = [s for s in self.skills if not s.is_action]
        self.forms = forms
        self.variables = "assign" in forms and bool(self.queries)
        self.blocks = [f for f in ("loop", "conditional") if f in forms]
        self.n = n

    def text(self) -> str:
        header = [f"# plans of at most {self.n} statements, at least one of them an action;",
                  "# s<d>_<k>[n]: a statement at block depth d with k left (n: no action yet), e<d>_<k>[n]: after one"]
        root = "root ::= [ \\n]? " + _s(0, self.n, False)
        rules = [root] + self._counting_rules() + self._statement_rules() + self._value_rules()
        return "\n".join(header + _reachable(rules)) + "\n"

    # ----- the statement count, and whether an action came yet
    def _counting_rules(self) -> list[str]:
        depth = MAX_DEPTH if self.blocks else 0
        rules = []
        for k in range(self.n, 0, -1):
            for d in range(depth + 1):
                for acted in (True, False):
                    alts = [_seq("act", _e(d, k - 1, True))]
                    if self.looks() and _possible(k - 1, acted):
                        alts.append(_seq("look", _e(d, k - 1, acted)))
                    if "return" in self.forms and (d or acted) and _possible(k - 1, acted):
                        alts.append(_seq("ret", "close", _e(d - 1, k - 1, acted)) if d else "ret")
                    if d < depth and k >= 2:
                        alts.append(f"open {_s(d + 1, k - 1, acted)}")
                    rules.append(f"{_s(d, k, acted)} ::= " + " | ".join(alts))
        for k in range(self.n - 1, -1, -1):
            for d in range(depth + 1):
                for acted in (True, False):
                    if not _possible(k, acted) or not _e(d, k, acted):
                        continue
                    more = f"sep {_s(d, k, acted)}" if k else ""
                    if d == 0:
                        body = f"({more})?" if acted else more
                    else:
                        body = " | ".join(a for a in (_seq("close", _e(d - 1, k, acted)), more) if a)
                    rules.append(f"{_e(d, k, acted)} ::= {body}")
        rules.append('sep ::= [ \\n]?')
        return rules

    # ----- statements
    def looks(self) -> list[str]:
        """The statements that neither act, open a block nor return: a query call, an assignment."""
        return ((["query"] if "call" in self.forms and self.queries else [])
                + (['var "=" query'] if self.variables else []))

    def _statement_rules(self) -> list[str]:
        actions = [s for s in self.skills if s.is_action]
        rules = ["act ::= (" + " | ".join(_skill_call(s) for s in actions) + ') ";"']
        if self.looks():
            rules.append(f"look ::= ({' | '.join(self.looks())}) \";\"")
        if "return" in self.forms:
            rules.append('ret ::= "->" value ";"')
        if self.queries:
            rules.append("query ::= " + " | ".join(_skill_call(s) for s in self.queries))
        if self.blocks:
            heads = []
            if "loop" in self.blocks:
                heads.append("[1-9] [0-9]?")
            if "conditional" in self.blocks:
                heads.append('"?" condition')
            rules.append(f"open ::= ({' | '.join(heads)}) \"{{\" \" \"?")
            rules.append('close ::= " "? "}" ";"?')
        if "conditional" in self.blocks:
            rules.append(f'condition ::= comparison ((" "? [&|] " "?) comparison){{0,{MAX_COMPARISONS - 1}}}')
            rules += self._comparison_rules()
        return rules

    def _comparison_rules(self) -> list[str]:
        """A comparison by what its left side is: a query of a declared return kind compares with values of that
        kind (``iv('cup')==True``, ``od('cup')>50``, ``p('shelf')=='empty'``), an undeclared query or a variable
        with any value."""
        var = " | var" if self.variables else ""
        typed = {kind: [s for s in self.queries if s.returns == kind] for kind in ("bool", "float", "str", None)}
        alts, rules = [], []
        forms = {"bool": '" "? ("==" | "!=") " "? ("True" | "False")',
                 "float": f'" "? cmp " "? (num | qfloat{var})',
                 "str": f'" "? ("==" | "!=") " "? (text{var})',
                 None: '" "? cmp " "? value'}
        for kind, skills in typed.items():
            if skills:
                name = f"q{kind or 'any'}"
                rules.append(f"{name} ::= " + " | ".join(_skill_call(s) for s in skills))
                alts.append(f"{name} ({forms[kind]})" + ("?" if kind in ("bool", None) else ""))
        if self.variables:
            alts.append(f"var ({forms[None]})?")
        if not alts:     # conditionals without queries or variables: constants only
            alts.append(f"value ({forms[None]})?")
        rules.insert(0, "comparison ::= " + " | ".join(alts))
        rules.append('cmp ::= "==" | "!=" | ">=" | "<=" | ">" | "<"')
        return rules

    # ----- values
    def _value_rules(self) -> list[str]:
        used = {k for s in self.skills for k in s.args}
        if "return" in self.forms or "conditional" in self.forms:
            used |= {"value", "any"}
        if self.queries:
            used |= {k for s in self.queries for k in s.args}
        var = " | var" if self.variables else ""
        rules = {
            "value": "any" + (" | query" if self.queries else ""),
            "int": f"num{var}",
            "str": f"text{var}",
            "any": f"num | text | \"True\" | \"False\"{var}",
        }
        out = [f"{name} ::= {body}" for name, body in rules.items() if name in used]
        if used & {"int", "any"}:
            out.append(f"num ::= \"-\"? (\"0\" | [1-9] [0-9]{{0,{MAX_DIGITS - 1}}})")
        if used & {"str", "any"}:
            out.append(f"text ::= \"'\" [a-zA-Z0-9] [{STRING_CHARS}]{{0,{MAX_STRING - 1}}} \"'\"")
        if self.variables:
            out.append('var ::= "_" [1-9]')
        return out


def _s(depth: int, left: int, acted: bool) -> str:
    """The rule of a statement at ``depth`` with ``left`` statements left, ``acted``: an action came before."""
    return f"s{depth}_{left}" + ("" if acted else "n")


def _e(depth: int, left: int, acted: bool) -> str:
    """The rule of what may follow a statement ("" at the end of a plan that acted)."""
    return "" if depth == 0 and left == 0 and acted else f"e{depth}_{left}" + ("" if acted else "n")


def _possible(left: int, acted: bool) -> bool:
    """Whether a plan can still end well: it acted, or a statement is left to act."""
    return acted or left > 0


def _reachable(rules: list[str]) -> list[str]:
    """The rules ``root`` reaches (itself included), in their order."""
    bodies = dict(r.split(" ::= ", 1) for r in rules)
    seen, todo = {"root"}, ["root"]
    while todo:
        body = re.sub(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]', " ", bodies[todo.pop()])   # names outside literals
        for name in re.findall(r"[a-z_][a-z0-9_]*", body):
            if name in bodies and name not in seen:
                seen.add(name)
                todo.append(name)
    return [r for r in rules if r.split(" ::= ", 1)[0] in seen]


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _skill_call(skill: SkillSpec) -> str:
    args = ' "," " "? '.join(skill.args)
    return f'"{skill.short}(" {args} ")"' if args else f'"{skill.short}()"'
