"""Hypothesis strategies for random plans of any statement-mode robot type, built from its skill set alone: only its
skills, with arguments of their kinds, in the statement forms it allows; variables read only where every path has
set them, comparisons of one kind (what the static check, core/skills/static_check.py, accepts). Objects are drawn
from a small set of names, numbers from small ranges, loops repeat 1-3 times, so plans stay far below the call cap.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from timely_llm_ros.core.skills import SkillSet

OBJECTS = ("cup", "door", "red cube", "keys", "bin", "it's here")
ANSWERS = ("yes", "no", "left", "unknown")
SPACE = ("", "", "", " ", "\n")


@dataclass
class _Scope:
    """Variables every path so far has set, with their kinds; how many a plan has made."""

    kinds: dict[str, str] = field(default_factory=dict)
    made: list[int] = field(default_factory=lambda: [0])

    def child(self) -> "_Scope":
        return _Scope(dict(self.kinds), self.made)


class _PlanWriter:
    def __init__(self, draw, skill_set: SkillSet, max_depth: int) -> None:
        self.draw = draw
        self.skills = skill_set.skills
        self.forms = skill_set.statement_forms
        self.max_depth = max_depth
        self.actions = sorted(n for n, s in self.skills.items() if s.is_action)
        self.queries: dict[str, list[str]] = {}
        for name, spec in sorted(self.skills.items()):
            if not spec.is_action and spec.returns:
                self.queries.setdefault(spec.returns, []).append(name)

    # ---- values
    def literal(self, kind: str) -> str:
        d = self.draw
        if kind == "float":
            return d(st.one_of(st.integers(0, 400).map(str), st.floats(0, 50, allow_nan=False).map(
                lambda f: f"{f:.1f}")))
        if kind == "bool":
            return d(st.sampled_from(["True", "False"]))
        text = d(st.sampled_from(OBJECTS + ANSWERS))
        quote = '"' if "'" in text else d(st.sampled_from(["'", '"']))
        return quote + text + quote

    def value(self, kind: str, scope: _Scope, depth: int = 0) -> str:
        """An operand giving a value of ``kind``: a literal, a variable, or a query."""
        options = ["literal"]
        if any(k == kind for k in scope.kinds.values()):
            options.append("variable")
        if self.queries.get(kind) and depth < 2:
            options.append("query")
        how = self.draw(st.sampled_from(options))
        if how == "variable":
            return self.draw(st.sampled_from(sorted(v for v, k in scope.kinds.items() if k == kind)))
        if how == "query":
            return self.call(self.draw(st.sampled_from(self.queries[kind])), scope, depth + 1)
        return self.literal(kind)

    def call(self, name: str, scope: _Scope, depth: int = 0) -> str:
        args = []
        for kind in self.skills[name].args:
            if kind == "int":
                args.append(self.value("float", scope, depth))
            elif kind in ("str", "object"):      # an object is a str that names an object
                args.append(self.value("str", scope, depth))
            else:
                args.append(self.value(self.draw(st.sampled_from(["float", "str", "bool"])), scope, depth))
        sep = self.draw(st.sampled_from([",", ", "]))
        return f"{name}({sep.join(args)})"

    # ---- conditions
    def comparison(self, scope: _Scope) -> str:
        kinds = [k for k in ("bool", "float", "str") if self.queries.get(k) or k in scope.kinds.values()]
        kind = self.draw(st.sampled_from(kinds or ["float"]))
        left = self.value(kind, scope)
        if kind == "bool" and self.draw(st.booleans()):
            return left
        ops = ["==", "!="] + ([">", "<", ">=", "<="] if kind == "float" else [])
        return f"{left}{self.draw(st.sampled_from(ops))}{self.value(kind, scope)}"

    def condition(self, scope: _Scope, depth: int = 0) -> str:
        terms = []
        for _ in range(self.draw(st.integers(1, 3))):
            if depth < 1 and self.draw(st.integers(0, 4)) == 0:
                terms.append(f"({self.condition(scope, depth + 1)})")
            else:
                terms.append(self.comparison(scope))
        out = terms[0]
        for term in terms[1:]:
            out += self.draw(st.sampled_from(["&", "|"])) + term
        return out

    # ---- statements
    def statement(self, scope: _Scope, depth: int) -> str:
        forms = ["call", "call"] + [f for f in ("assign", "return", "loop", "conditional") if f in self.forms]
        if depth >= self.max_depth:
            forms = [f for f in forms if f not in ("loop", "conditional")]
        form = self.draw(st.sampled_from(forms))
        if form == "call":
            names = self.actions + [q for qs in self.queries.values() for q in qs]
            return self.call(self.draw(st.sampled_from(names)), scope) + ";"
        if form == "assign":
            kind = self.draw(st.sampled_from(sorted({"float", "str", "bool"} | set(self.queries))))
            known = sorted(v for v, k in scope.kinds.items() if k == kind)
            if known and self.draw(st.booleans()):
                var = self.draw(st.sampled_from(known))
            else:
                scope.made[0] += 1
                var = f"_{scope.made[0]}"
            text = f"{var}={self.value(kind, scope)};"
            scope.kinds[var] = kind
            return text
        if form == "return":
            return "->" + self.value(self.draw(st.sampled_from(["float", "str", "bool"])), scope) + ";"
        body_scope = scope.child()
        if form == "loop":
            count = self.draw(st.integers(1, 3))
            body = self.block(body_scope, depth + 1)
            scope.kinds.update(body_scope.kinds)      # a loop's body runs at least once
            return f"{count}{{{body}}}" + self.draw(st.sampled_from(["", ";"]))
        cond = self.condition(scope)
        body = self.block(body_scope, depth + 1)     # what the body sets may be unset after it
        return f"?{cond}{{{body}}}" + self.draw(st.sampled_from(["", ";"]))

    def block(self, scope: _Scope, depth: int, min_size: int = 1) -> str:
        parts = [self.statement(scope, depth) for _ in range(self.draw(st.integers(min_size, 3)))]
        return "".join(self.draw(st.sampled_from(SPACE)) + p for p in parts)


@st.composite
def plans(draw, skill_set: SkillSet, max_statements: int = 6, max_depth: int = 2) -> str:
    """A random plan of ``skill_set``'s language that passes its static check, with at least one action."""
    writer = _PlanWriter(draw, skill_set, max_depth)
    scope = _Scope()
    parts = [writer.statement(scope, 0) for _ in range(draw(st.integers(1, max_statements)))]
    first_action = writer.call(draw(st.sampled_from(writer.actions)), _Scope()) + ";"   # literals: goes anywhere
    at = draw(st.integers(0, len(parts)))
    parts.insert(at, first_action)
    return "".join(draw(st.sampled_from(SPACE)) + p for p in parts)


@st.composite
def with_cuts(draw, plan):
    """A plan and the deltas a model's tokens could bring it in (random cut points)."""
    text = draw(plan)
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=min(len(text), 40))))
    bounds = [0] + cuts + [len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]
