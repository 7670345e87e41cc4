"""Task patterns: what a robot team writes so that a model can be adapted to its skill set (`timely_adapt`).

A pattern file sits beside its skill set, ``<skills folder>/<robot type>.tasks.yaml`` (config/skills/drone.tasks.yaml,
examples/rover/skills/rover.tasks.yaml). Each pattern is a kind of task: slots drawn at random for every example,
the scene the robot sees, several phrasings of the request, and the plan it asks for::

    robot_type: drone
    tables:                         # rows a slot can draw; a field holding a list gives one of its items
      side:
        - {words: [on the left, to the left], away: mr}
    scenes:                         # named scene templates; a list gives one of its items per example
      room: ["room: ${room}; objects: ${objects}", "location: ${room}; things here: ${objects}"]
    defaults:                       # slots and lists every pattern has unless it defines its own
      slots: {room: {from: room}}
      lists: {objects: {include: [], add: [2, 4], from: thing}}
    patterns:
      - name: photo                 # a name for logs and the corpus's mix
        weight: 2                   # how often, relative to the other patterns (default 1)
        slots: {x: {from: findable, compound: true}}
        lists: {objects: {include: [x], add: [1, 4], from: thing}}
        scene: room                 # a name in scenes, or a template
        tasks: ["take a photo of the ${x}", "can you get me a picture of the ${x}?"]
        plan: "g('${x}');tp();"

Slots, drawn in the order written (a later slot may use an earlier one):

    {from: fruit}                          a name of a category or group of the vocabulary (config/adapt)
    {from: thing, compound: true}          ... sometimes a compound ("red mug")
    {from: shape, modifier: color}         ... always a compound with a modifier of that category ("red cube")
    {from: fruit, count: [2, 4]}           a list of 2 to 4 distinct names
    {rows: [a, b], field: category, count: [2, 4]}
                                           a list of names, each from the category that one of the rows a, b
                                           (table-row slots) names in its field; each item knows its row
                                           (``item.row``); the first row always gets one, every row when
                                           the count allows
    {int: [50, 300]}, {int: [50, 300, 10]} a whole number (with a step)
    {one_of: [3, 4, 6]}                    one of the values
    {row: side}                            a row of a table (fields by name: ``${s.away}``)
    {row: kind, not: [a]}                  a row other than the rows of slots a
    {expr: "80 if d < 100 else 50"}        a value computed from earlier slots

Every name drawn for one example differs from the others (and shares no word with them, modifier names aside). Lists
are rendered into the scene shuffled, comma-separated: ``include`` the slots (expressions) that must appear, ``add``
a number of distractors drawn ``from`` the vocabulary (``modifier`` as for slots; none of the names ``exclude``'s
expressions give: ``exclude: [p.tool_options]``, every item of row p's list field ``tool``). A slot not included in any list is absent from the scene (a "find"
task's object). ``plan`` is a template, or a list of templates and loops over a list slot::

    plan:
      - each: table                # one part per item of a list, in the scene's order ...
        if: "item.row == a"        # ... that satisfies this (optional)
        do: "gt('${item}');pi('${item}');gt('${item.row.place}');dr();"
      - if: "not present"          # a part written only when the condition holds
        do: "s('${x}');"

Templates use ``${expression}`` (adapt/templates.py). Every generated plan must parse with the skill set, and every
object it names must be one the scene lists or the task says (what grounded decoding admits): the corpus checks both
and names the pattern that breaks them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from timely_llm_ros.adapt.templates import TemplateError, compile_expression, evaluate, expressions, render
from timely_llm_ros.adapt.vocabulary import Drawn, Vocabulary
from timely_llm_ros.core.skills.skill_set import TASK_PATTERNS_SUFFIX as PATTERN_SUFFIX

_SLOT_KINDS = ("from", "rows", "int", "one_of", "row", "expr")


class Row(dict):
    """One table row as drawn for an example: its fields, list fields resolved to one item."""

    def __hash__(self) -> int:  # rows are compared by their fields; hashable for set membership
        return hash(tuple(sorted((k, str(v)) for k, v in self.items())))


@dataclass(frozen=True)
class ListSpec:
    """A list rendered into the scene: included slots plus distractors, shuffled."""

    include: tuple[str, ...] = ()
    add: tuple[int, int] = (0, 0)
    source: str | tuple[str, ...] = "thing"
    modifier: str | None = None       # distractors are modifier + base names ("blue brick")
    exclude: tuple[str, ...] = ()     # expressions: names no distractor may be (besides the example's own)
    shuffle: bool = True


@dataclass(frozen=True)
class Part:
    """One piece of a plan: a template, or a template repeated for each item of a list slot."""

    template: str
    each: str = ""
    alias: str = "item"
    condition: str = ""


@dataclass(frozen=True)
class TaskPattern:
    """One kind of task (see the module docstring)."""

    name: str
    slots: Mapping[str, Mapping[str, Any]]
    lists: Mapping[str, ListSpec]
    scenes: tuple[str, ...]
    tasks: tuple[str, ...]
    plan: tuple[Part, ...]
    weight: float = 1.0


@dataclass(frozen=True)
class PatternSet:
    """A robot type's task patterns and the tables they draw rows from."""

    robot_type: str
    patterns: tuple[TaskPattern, ...]
    tables: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    source: str = "<patterns>"


@dataclass(frozen=True)
class Drafted:
    """One example as a pattern drew it: scene, task, plan, and the names drawn for it."""

    pattern: str
    scene: str
    task: str
    plan: str
    names: tuple[str, ...]


def pattern_path(skills_folder: str | Path, robot_type: str) -> Path:
    """Where a robot type's patterns live: beside its skill set."""
    return Path(skills_folder) / f"{robot_type}{PATTERN_SUFFIX}"


def load_patterns(path: str | Path) -> PatternSet:
    """Read a pattern file; ValueError names the file, the pattern and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no task patterns at {path}: write <robot type>{PATTERN_SUFFIX} beside the skill "
                                "set (docs/robots.md, 'Adapting a model')")
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f) or {}
    where = str(path)
    if not isinstance(cfg, Mapping) or not isinstance(cfg.get("patterns"), list) or not cfg["patterns"]:
        raise ValueError(f"{where}: expected a mapping with a non-empty 'patterns' list")
    tables = {str(k): tuple(_row_config(r, f"{where}: tables.{k}") for r in (rows or []))
              for k, rows in (cfg.get("tables") or {}).items()}
    scenes = {str(k): _texts(v, f"{where}: scenes.{k}") for k, v in (cfg.get("scenes") or {}).items()}
    defaults = cfg.get("defaults") or {}
    patterns = []
    names: set[str] = set()
    for i, entry in enumerate(cfg["patterns"]):
        label = f"{where}: patterns[{i}]" + (f" ({entry.get('name')})" if isinstance(entry, Mapping) else "")
        pattern = _pattern(entry, defaults, scenes, tables, label)
        if pattern.name in names:
            raise ValueError(f"{label}: the name {pattern.name!r} is used twice")
        names.add(pattern.name)
        patterns.append(pattern)
    return PatternSet(str(cfg.get("robot_type", path.name[: -len(PATTERN_SUFFIX)])), tuple(patterns), tables, where)


def _row_config(row: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(row, Mapping) or not row:
        raise ValueError(f"{where}: every row is a mapping of fields")
    return dict(row)


def _texts(value: Any, where: str) -> tuple[str, ...]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise ValueError(f"{where}: expected a text or a non-empty list of texts")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}[{i}]: expected a text, got {text!r} (put a text holding ': ' in quotes)")
    for text in texts:
        for expr in expressions(text):
            compile_expression(expr)
    return tuple(t.strip() for t in texts)


def _pattern(entry: Any, defaults: Mapping[str, Any], scenes: Mapping[str, tuple[str, ...]],
             tables: Mapping[str, Any], where: str) -> TaskPattern:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: a pattern is a mapping (name, slots, scene, tasks, plan)")
    known = {"name", "weight", "slots", "lists", "scene", "tasks", "plan"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; known: {sorted(known)}")
    missing = [k for k in ("name", "tasks", "plan") if not entry.get(k)]
    if missing:
        raise ValueError(f"{where}: missing {missing}")
    try:
        slots = {**(defaults.get("slots") or {}), **(entry.get("slots") or {})}
        for name, spec in slots.items():
            _check_slot(str(name), spec, tables, where)
        lists = {str(k): _list_spec(v, f"{where}: lists.{k}")
                 for k, v in {**(defaults.get("lists") or {}), **(entry.get("lists") or {})}.items()}
        scene = entry.get("scene", defaults.get("scene", ""))
        if scene == "":
            scene_texts: tuple[str, ...] = ("",)              # no scene: the request has a task only
        elif isinstance(scene, str) and scene in scenes:
            scene_texts = scenes[scene]
        else:
            scene_texts = _texts(scene, f"{where}: scene")
        plan = tuple(_part(p, f"{where}: plan") for p in (entry["plan"] if isinstance(entry["plan"], list)
                                                          else [entry["plan"]]))
        return TaskPattern(str(entry["name"]), slots, lists, scene_texts, _texts(entry["tasks"], f"{where}: tasks"),
                           plan, float(entry.get("weight", 1.0)))
    except TemplateError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_slot(name: str, spec: Any, tables: Mapping[str, Any], where: str) -> None:
    if not isinstance(spec, Mapping) or sum(k in spec for k in _SLOT_KINDS) != 1:
        raise ValueError(f"{where}: slot {name!r} needs exactly one of {', '.join(_SLOT_KINDS)} (got {spec!r})")
    if "row" in spec and spec["row"] not in tables:
        raise ValueError(f"{where}: slot {name!r} draws from table {spec['row']!r}, which the file does not "
                         f"define (tables: {', '.join(tables) or 'none'})")
    if "expr" in spec:
        compile_expression(str(spec["expr"]))


def _list_spec(spec: Any, where: str) -> ListSpec:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: a list is a mapping {{include, add, from}}")
    add = spec.get("add", 0)
    low, high = (add, add) if isinstance(add, int) else (int(add[0]), int(add[1]))
    include = tuple(str(i) for i in spec.get("include") or ())
    exclude = tuple(str(i) for i in spec.get("exclude") or ())
    for expr in include + exclude:
        compile_expression(expr)
    source = spec.get("from", "thing")
    source = str(source) if isinstance(source, str) else tuple(str(s) for s in source)
    return ListSpec(include, (low, high), source, spec.get("modifier"), exclude,
                    bool(spec.get("shuffle", True)))


def _part(part: Any, where: str) -> Part:
    if isinstance(part, str):
        for expr in expressions(part):
            compile_expression(expr)
        return Part(part.strip())
    if not isinstance(part, Mapping) or "do" not in part or not ("each" in part or "if" in part):
        raise ValueError(f"{where}: a plan part is a template, {{each, do[, as, if]}} or {{if, do}}")
    for expr in expressions(str(part["do"])) + ([str(part["if"])] if part.get("if") else []):
        compile_expression(expr)
    return Part(str(part["do"]).strip(), str(part.get("each", "")), str(part.get("as", "item")),
                str(part.get("if", "")))


# ---------------------------------------------------------------------------------------------------- drawing


def draft(pattern: TaskPattern, tables: Mapping[str, Sequence[Mapping[str, Any]]], vocabulary: Vocabulary,
          rng: random.Random) -> Drafted:
    """One example of ``pattern``: slots drawn, scene, one phrasing of the task and the plan rendered."""
    env: dict[str, Any] = {}
    used: list[str] = []
    for name, spec in pattern.slots.items():
        env[name] = _draw_slot(name, spec, env, used, tables, vocabulary, rng)
    for name, spec in pattern.lists.items():
        members: list[Any] = []
        for expr in spec.include:
            value = evaluate(expr, env)
            members += value if isinstance(value, list) else [value]
        banned = list(used)
        for expr in spec.exclude:
            value = evaluate(expr, env)
            banned += [str(v) for v in (value if isinstance(value, list) else [value])]
        for _ in range(rng.randint(*spec.add)):
            drawn = vocabulary.draw(rng, spec.source, banned, modifier=spec.modifier)
            banned.append(drawn.name)
            used.append(drawn.name)
            members.append(drawn)
        if spec.shuffle:
            rng.shuffle(members)
        env[name] = members             # in the scene's order; rendered as names joined by ", "
    scene = render(rng.choice(pattern.scenes), env)
    task = render(rng.choice(pattern.tasks), env)
    plan = "".join(_render_part(part, env) for part in pattern.plan)
    return Drafted(pattern.name, scene, task, plan, tuple(used))


def _render_part(part: Part, env: Mapping[str, Any]) -> str:
    if not part.each:
        return render(part.template, env) if not part.condition or evaluate(part.condition, env) else ""
    items = evaluate(part.each, env)
    out = []
    for item in items if isinstance(items, list) else [items]:
        scope = {**env, part.alias: item}
        if not part.condition or evaluate(part.condition, scope):
            out.append(render(part.template, scope))
    return "".join(out)


def _draw_slot(name: str, spec: Mapping[str, Any], env: Mapping[str, Any], used: list[str],
               tables: Mapping[str, Sequence[Mapping[str, Any]]], vocabulary: Vocabulary, rng: random.Random) -> Any:
    if "expr" in spec:
        return evaluate(str(spec["expr"]), env)
    if "int" in spec:
        bounds = [int(b) for b in spec["int"]]
        return rng.randrange(bounds[0], bounds[1] + 1, bounds[2] if len(bounds) > 2 else 1)
    if "one_of" in spec:
        return rng.choice(list(spec["one_of"]))
    if "row" in spec:
        table = tables[spec["row"]]
        avoid = {env[n].get("_index") for n in spec.get("not", ())}
        index = rng.choice([i for i in range(len(table)) if i not in avoid])
        return _resolve_row(table[index], index, rng, used)
    count = spec.get("count")
    if "rows" in spec:
        rows = [env[r] for r in spec["rows"]]
        field_name = str(spec.get("field", "category"))
        n = rng.randint(int(count[0]), int(count[1])) if count else len(rows)
        if n >= len(rows):
            owners = rows + [rng.choice(rows) for _ in range(n - len(rows))]
        else:
            owners = rows[:1] + rng.sample(rows[1:], n - 1) if n else []
        rng.shuffle(owners)
        items = []
        for row in owners:
            drawn = vocabulary.draw(rng, str(row[field_name]), used, bool(spec.get("compound")))
            used.append(drawn.name)
            items.append(Drawn(drawn.name, drawn.category, row))
        return items
    source, compound, modifier = spec["from"], bool(spec.get("compound")), spec.get("modifier")
    items = []
    for _ in range(rng.randint(int(count[0]), int(count[1])) if count else 1):
        drawn = vocabulary.draw(rng, source, used, compound, modifier)
        used.append(drawn.name)
        items.append(drawn)
    return items if count else items[0]


def _resolve_row(row: Mapping[str, Any], index: int, rng: random.Random, used: list[str]) -> Row:
    """A table row with each list field resolved to one of its items (all of them stay readable as
    ``<field>_options``); its text fields count as used names (an item drawn later never repeats a place the row
    names)."""
    out = Row(_index=index)          # which row of its table (rows compare equal by it and their draws)
    for key, value in row.items():
        if isinstance(value, list):
            out[f"{key}_options"] = list(value)
            choices = [v for v in value if str(v) not in used] or value
            value = rng.choice(choices)
        out[key] = value
    used += [v for k, v in out.items() if isinstance(v, str)]
    return out
