"""The statement language of a skill set as an EBNF grammar, for grammar-constrained decoding.

``plan_grammar(skill_set)`` returns the grammar text (xgrammar's EBNF, which llguidance and vLLM's structured
outputs also take) or None for a prose skill set. Every plan it accepts parses under ``minispec.parse`` with no
problems; it accepts a subset of what the parser does, chosen so that a small model cannot wander:

- only the skill set's skills, each argument of its declared kind: ``int`` a number of at most 4 digits with an
  optional '-' (coordinates), ``str`` a single-quoted string of 1-40 characters (letters, digits, space and
  ``?.,!``; it starts with a letter or digit), ``any`` either or True/False; a variable stands for a value wherever
  the skill set allows assignments, once it is set (below);
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
- at least one action call (a plan of queries and returns alone gives the robot nothing to execute);
- variables set before they are read: a plan's first assignment outside any block sets ``_1``, the next one a new
  variable ``_2``, and so on up to ``_3`` (``MAX_VARIABLES``); inside a block (a loop that may run no time, a branch
  that may not be taken) an assignment may only set one of those again; a value, argument or comparison may read
  only the variables set so far (the interpreter ends a plan that reads one never set EXECUTION_FAILED: SmolLM2 on
  the demo wrote ``g('child');?_1>60{...}``). Every reference plan of the project sets ``_1`` first, outside blocks.

The statement count, whether an action came yet and the variables set are tracked by the rules themselves
(``s<d>_<k>``: a statement at block depth d with k left, ``e<d>_<k>``: what may follow one, suffix ``n``: no action
yet, ``_v<j>``: variables ``_1``..``_j`` set; the statement and value rules that read variables come once per j), a
right-linear grammar of O(max_statements) rules (unreachable ones left out).
"""
from __future__ import annotations

import re
from typing import Iterable

from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.skills.spec import SkillSpec

TOKENS_PER_STATEMENT = 10
MAX_DEPTH = 2            # blocks inside blocks: one level
MAX_COMPARISONS = 4      # comparisons in a condition
STRING_CHARS = "a-zA-Z0-9 ?.,!"   # the characters a string argument may hold (a character class body)
MAX_STRING = 40
MAX_DIGITS = 4
MAX_VARIABLES = 3        # variables a plan may set (_1.._3); the reference plans use one


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
        self.sets = range(MAX_VARIABLES + 1) if self.variables else range(1)   # how many variables may be set

    def text(self) -> str:
        header = [f"# plans of at most {self.n} statements, at least one of them an action;",
                  "# s<d>_<k>[n]: a statement at block depth d with k left (n: no action yet), e<d>_<k>[n]: after one"
                  + ("; _v<j>: variables _1.._j set" if self.variables else "")]
        root = "root ::= [ \\n]? " + self._s(0, self.n, False, 0)
        rules = [root] + self._counting_rules() + self._shared_rules()
        for v in self.sets:
            rules += self._reading_rules(v)
        return "\n".join(header + _reachable(rules)) + "\n"

    def _s(self, depth: int, left: int, acted: bool, v: int) -> str:
        return self._name(_s(depth, left, acted), v)

    def _e(self, depth: int, left: int, acted: bool, v: int) -> str:
        e = _e(depth, left, acted)
        return self._name(e, v) if e else ""

    def _name(self, rule: str, v: int) -> str:
        """A rule's name with the variables set (only for a skill set with variables)."""
        return f"{rule}_v{v}" if self.variables else rule

    # ----- the statement count, whether an action came yet, the variables set
    def _counting_rules(self) -> list[str]:
        depth = MAX_DEPTH if self.blocks else 0
        rules = []
        for k in range(self.n, 0, -1):
            for d in range(depth + 1):
                for acted in (True, False):
                    for v in self.sets:
                        alts = [_seq(self._name("act", v), self._e(d, k - 1, True, v))]
                        if _possible(k - 1, acted):
                            if self.looks(v):
                                alts.append(_seq(self._name("look", v), self._e(d, k - 1, acted, v)))
                            if self.variables and d == 0 and v < MAX_VARIABLES:
                                alts.append(_seq(self._name("assign", v), self._e(d, k - 1, acted, v + 1)))
                        if "return" in self.forms and (d or acted) and _possible(k - 1, acted):
                            ret = self._name("ret", v)
                            alts.append(_seq(ret, "close", self._e(d - 1, k - 1, acted, v)) if d else ret)
                        if d < depth and k >= 2:
                            alts.append(f"{self._name('open', v)} {self._s(d + 1, k - 1, acted, v)}")
                        rules.append(f"{self._s(d, k, acted, v)} ::= " + " | ".join(alts))
        for k in range(self.n - 1, -1, -1):
            for d in range(depth + 1):
                for acted in (True, False):
                    for v in self.sets:
                        if not _possible(k, acted) or not self._e(d, k, acted, v):
                            continue
                        more = f"sep {self._s(d, k, acted, v)}" if k else ""
                        if d == 0:
                            body = f"({more})?" if acted else more
                        else:
                            body = " | ".join(a for a in (_seq("close", self._e(d - 1, k, acted, v)), more) if a)
                        rules.append(f"{self._e(d, k, acted, v)} ::= {body}")
        rules.append('sep ::= [ \\n]?')
        return rules

    # ----- statements
    def looks(self, v: int) -> list[str]:
        """The statements that neither act, open a block nor return, nor set a new variable, with v variables set: a
        query call, an assignment to a variable already set."""
        return ((["query"] if "call" in self.forms and self.queries else [])
                + (['var "=" query'] if self.variables and v else []))

    def _shared_rules(self) -> list[str]:
        """The rules that read no variable."""
        rules = ['close ::= " "? "}" ";"?'] if self.blocks else []
        if "conditional" in self.blocks:
            rules.append('cmp ::= "==" | "!=" | ">=" | "<=" | ">" | "<"')
        used = {k for s in self.skills for k in s.args} | {"any"}
        if used & {"int", "any"}:
            rules.append(f"num ::= \"-\"? (\"0\" | [1-9] [0-9]{{0,{MAX_DIGITS - 1}}})")
        if used & {"str", "any"}:
            rules.append(f"text ::= \"'\" [a-zA-Z0-9] [{STRING_CHARS}]{{0,{MAX_STRING - 1}}} \"'\"")
        return rules

    def _reading_rules(self, v: int) -> list[str]:
        """The statement and value rules with variables _1.._v set, named with that count."""
        rules = self._statement_rules(v) + self._value_rules(v)
        if not self.variables:
            return rules
        names = {r.split(" ::= ", 1)[0] for r in rules}
        return [_renamed(r, names, f"_v{v}") for r in rules]

    def _statement_rules(self, v: int) -> list[str]:
        actions = [s for s in self.skills if s.is_action]
        rules = ["act ::= (" + " | ".join(_skill_call(s) for s in actions) + ') ";"']
        if self.looks(v):
            rules.append(f"look ::= ({' | '.join(self.looks(v))}) \";\"")
        if self.variables and v < MAX_VARIABLES:
            rules.append(f'assign ::= "_{v + 1}=" query ";"')
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
        if "conditional" in self.blocks:
            rules.append(f'condition ::= comparison ((" "? [&|] " "?) comparison){{0,{MAX_COMPARISONS - 1}}}')
            rules += self._comparison_rules(v)
        return rules

    def _comparison_rules(self, v: int) -> list[str]:
        """A comparison by what its left side is: a query of a declared return kind compares with values of that
        kind (``iv('cup')==True``, ``od('cup')>50``, ``p('shelf')=='empty'``), an undeclared query or a variable
        with any value."""
        var = " | var" if v else ""
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
        if v:
            alts.append(f"var ({forms[None]})?")
        if not alts:     # conditionals without queries or variables: constants only
            alts.append(f"value ({forms[None]})?")
        rules.insert(0, "comparison ::= " + " | ".join(alts))
        return rules

    # ----- values
    def _value_rules(self, v: int) -> list[str]:
        used = {k for s in self.skills for k in s.args}
        if "return" in self.forms or "conditional" in self.forms:
            used |= {"value", "any"}
        if self.queries:
            used |= {k for s in self.queries for k in s.args}
        var = " | var" if v else ""
        rules = {
            "value": "any" + (" | query" if self.queries else ""),
            "int": f"num{var}",
            "str": f"text{var}",
            "any": f"num | text | \"True\" | \"False\"{var}",
        }
        out = [f"{name} ::= {body}" for name, body in rules.items() if name in used]
        if v:
            out.append(f'var ::= "_" [1-{v}]')
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


def _renamed(rule: str, names: set[str], suffix: str) -> str:
    """The rule with every one of ``names`` it defines or mentions (outside literals) given ``suffix``."""
    def rename(part: str) -> str:
        return re.sub(r"[a-z_][a-z0-9_]*", lambda m: m.group(0) + suffix if m.group(0) in names else m.group(0), part)

    pieces = re.split(r'("(?:[^"\\]|\\.)*"|\[[^\]]*\])', rule)     # literals and classes at odd indices
    return "".join(p if i % 2 else rename(p) for i, p in enumerate(pieces))


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
