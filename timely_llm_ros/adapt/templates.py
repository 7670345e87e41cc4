"""The small expression language of task patterns: ``${...}`` in a pattern's tasks, scene and plan.

An expression is Python-like and restricted to what a pattern needs: slot names, attribute access (a drawn
object's ``name`` and ``category``, a table row's fields, an item's ``row``), numbers and strings, arithmetic
(``+ - * / // %``), comparisons, ``and``/``or``/``not``, ``a if cond else b``, and the functions in FUNCTIONS.
Nothing else is evaluated (no imports, no calls beyond those functions), so a team's pattern file is data.

    ${x}                          the name drawn for slot x
    ${360 // k}                   a computed number
    ${80 if d < 100 else 50}      a choice
    ${words(k)}                   3 -> "three"
"""
from __future__ import annotations

import ast
import operator
import re
from typing import Any, Callable, Mapping

_SUBST = re.compile(r"\$\{([^{}]*)\}")
_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty").split()


def words(n: Any) -> str:
    """A whole number from 0 to 20 in words (other numbers as digits)."""
    value = float(n)
    return _NUMBER_WORDS[int(value)] if value.is_integer() and 0 <= value <= 20 else fmt(value)


def fmt(value: Any) -> str:
    """How a value is written into text: whole floats without a decimal point, lists joined by ', '."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    return str(value)


def _and_list(values: Any) -> str:
    """["a", "b", "c"] -> "a, b and c"."""
    items = [fmt(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "words": words, "min": min, "max": max, "round": round, "int": int, "abs": abs, "len": len,
    "and_list": _and_list,
}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b}


class TemplateError(ValueError):
    """An expression the pattern language does not allow, or one that names an unknown slot."""


def compile_expression(text: str) -> ast.Expression:
    """Parse ``text`` and check that it uses only what the language allows (TemplateError otherwise)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise TemplateError(f"cannot read the expression {text!r}: {exc.msg}") from None
    allowed = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.USub,
               ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.IfExp, ast.Call, ast.List, ast.Tuple,
               *_BINARY, *_COMPARE)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise TemplateError(f"{type(node).__name__} is not allowed in a pattern expression ({text!r})")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise TemplateError(f"only these functions may be called in a pattern expression: "
                                f"{', '.join(FUNCTIONS)} ({text!r})")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise TemplateError(f"private attribute {node.attr!r} in {text!r}")
    return tree


def evaluate(text: str, env: Mapping[str, Any]) -> Any:
    """The value of expression ``text`` with the slot values in ``env``."""
    return _eval(compile_expression(text).body, env, text)


def _eval(node: ast.AST, env: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in ("True", "False"):
            return node.id == "True"
        raise TemplateError(f"unknown slot {node.id!r} in {text!r} (slots here: {', '.join(sorted(env))})")
    if isinstance(node, ast.Attribute):
        value = _eval(node.value, env, text)
        if isinstance(value, Mapping):
            if node.attr not in value:
                raise TemplateError(f"no field {node.attr!r} in {text!r} (fields: {', '.join(value)})")
            return value[node.attr]
        if not hasattr(value, node.attr):
            raise TemplateError(f"{fmt(value)!r} has no attribute {node.attr!r} ({text!r})")
        return getattr(value, node.attr)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_num(_eval(node.left, env, text)), _num(_eval(node.right, env, text)))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        return not value if isinstance(node.op, ast.Not) else -_num(value)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, text)
            if not _COMPARE[type(op)](_comparable(left), _comparable(right)):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env, text) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*(_eval(a, env, text) for a in node.args))   # type: ignore[attr-defined]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, env, text) for e in node.elts]
    raise TemplateError(f"cannot evaluate {text!r}")


def _num(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _comparable(value: Any) -> Any:
    """Drawn objects compare by name; numbers as numbers."""
    name = getattr(value, "name", None)
    return name if isinstance(name, str) and not isinstance(value, Mapping) else value


def render(template: str, env: Mapping[str, Any]) -> str:
    """``template`` with every ``${expression}`` replaced by its value."""
    return _SUBST.sub(lambda m: fmt(evaluate(m.group(1), env)), template)


def expressions(template: str) -> list[str]:
    """The expressions of a template (to check them when a pattern file loads)."""
    return _SUBST.findall(template)
