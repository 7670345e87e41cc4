"""The plans one request may be decoded into, as a Lark grammar for llguidance (grounded decoding).

``plan_grammar(skill_set, ...)`` returns the grammar text, or None for a prose skill set. ``GrammarSpec`` says what a
request's grammar admits -- the robot's skills, the objects of its scene, the plan's bounds -- and is the key its
compiled form is cached under. Every plan the grammar accepts parses under ``minispec.parse`` with no problems and
runs on the robot (``interpreter.Interpreter``, each query answering the kind its skill declares) with no run-time
error of the plan's own making. It admits a subset of what the parser does, chosen so that a small model cannot
wander:

- **skills**: only the allowed ones (what the target robot advertises, within its skill set), each argument of its
  declared kind: ``int`` an integer of at most 4 digits with an optional '-'; ``str`` a single-quoted string of 1-40
  characters (letters, digits, space and ``?.,!``; it starts with a letter or digit); ``object`` one of the
  request's objects, quoted (``'red cube'``), or a ``str`` where the request lists none; ``any`` a number, a string,
  True or False. A variable stands for a value of its kind (below);
- **hazards and the scene**: the object slot of a skill that ``approaches`` its object (a drone's goto) never takes
  one of the request's hazards (what its task says to keep away from: ``context.task_hazards``); that of a skill
  marked ``in_scene`` (an arm's goto, pick and take) takes only the objects its scene lists, never another phrase of
  the task (the task's phrases are there for what may be looked for: ``context.grounded_objects``); that of a skill
  marked ``movable`` (an arm's pick and take) never takes a fixed place its context lists (``places: drawer``:
  ``context.fixed_places``), which the robot puts things into but cannot lift; a skill whose
  slot is left with no object is left out, and so is a skill that ``moves`` the robot to a side where the
  request's context places one of its hazards (``context.hazard_sides``: "keep clear of the lamp" with the lamp on
  the right admits no move right); the object slot of a skill that approaches takes an object the scene does not
  list (what the task names: "sewing on a button", no button in the room) only inside a conditional block whose
  whole condition is that a query marked ``in_view`` says it is in view, ``?iv('button')==True{g('button');}``:
  the robot knows its place there and nowhere else (``_Builder._sight``; at most ``MAX_SIGHTED`` such objects);
- **what is held**: for a skill set whose skills grasp and release (the arm: ``grasps``, ``releases``, ``after``,
  ``still`` in its YAML) and a request that lists its objects, in plans without blocks, the grammar follows where
  the robot is and what it holds (``_Hold``): a grasping skill only with nothing held, a releasing one only with
  something held, a skill with an ``after`` (a pick) only on the object the named skill (a goto) last went to with
  no move since, no object slot on what is held, and never a lift of, or a drop onto, a thing something was
  dropped onto; a skill that ``searches`` (the arm's scan) for an object the scene does not list ends the plan:
  on a table that lacks it, nothing that follows could be about it. Past about 36 objects the parameter has no
  room and these rules are left out;
- **statement forms** the skill set allows: a call ``sk(...);``, an assignment ``_1=query(...);`` (a query with a
  declared ``returns``), a return ``->value;`` (it ends its block, or the plan), a loop ``N{...}`` and a conditional
  ``?condition{...}``; simple statements end in ';', a block may be followed by one; blocks are never empty and nest
  at most ``MAX_DEPTH`` deep, and a loop never runs inside another loop;
- **conditions**: at most ``MAX_COMPARISONS`` comparisons joined by ``&`` or ``|``, each typed by its left side, a
  query of a declared return kind or a variable: a bool with ``==``/``!=`` True, False or a bool variable (or alone),
  a number with any of ``== != > < >= <=`` and a number or number variable, a string with ``==``/``!=`` and a string
  or string variable. A query that declares no return kind is only called, or returned;
- **variables**: the plan's first assignment, outside any block, sets ``_1``, the next one ``_2``, up to
  ``MAX_VARIABLES``; each takes the kind of the query that first set it, and may be set again (anywhere) only by a
  query of that kind. A value, argument or comparison reads only the variables set before it, as their kind allows
  (a number variable fills an ``int`` argument; no variable fills an object slot of a grounded request);
- **whitespace** only where it reads naturally, at most one space or newline at a time, none at the end;
- **at least one action call** (a plan of queries and returns alone gives the robot nothing to execute);
- **at most ``max_statements`` simple statements** (calls, assignments and returns, nested ones counted; a block
  holds at least one, so block heads are bounded by them): the plan-length cap divided by ``TOKENS_PER_STATEMENT``
  = 10. The project's reference plans average 4-5 tokens a statement and their longest statement takes 13 of
  SmolLM2's tokens; their longest plan holds 16 statements. A 200-token cap gives 20: more than any reference plan,
  and a model repeating statements of up to 10 tokens stops before the cap would cut it;
- **at most ``max_calls`` skill calls with loops unrolled** (``DEFAULT_MAX_CALLS`` = 1,000 unless the request says
  otherwise). A call, an assignment and a return count 1 call, a conditional's head ``MAX_COMPARISONS`` (each
  comparison calls at most one query). Outside loops each statement is charged as written. A loop reserves
  ``R = loop_reservation(max_calls)`` calls when it opens (the largest power of two at most ``max_calls / 4``: 128
  under the default cap) and its count N buys each round ``R / 2**k`` calls, ``2**k`` the class of N: N in 1..2,
  3..8, 9..32, 33..128 (every second power of two up to R), so ``N * (calls of one round) <= R``; a statement in the
  body is admitted only while the round's calls stay within that. A statement outside loops, or a loop, is admitted
  only while the charges stay within ``max_calls``, and before the plan's first action one call is kept back for it.
  Every plan the grammar takes therefore makes at most ``max_calls`` calls, a loop count is at most R, and a plan
  holds at most ``max_calls / R`` loops (7 under the default cap); loops never nest, so nothing multiplies further.

How the grammar counts: its statement rules carry one 64-bit parameter (llguidance's parametric rules, materialised
lazily as the parser needs them) holding the simple statements written, whether an action came, each variable's
kind, which open blocks are loops, the open loop's round calls, the calls charged outside loops and, per block
depth, the unlisted objects its condition saw in view. The text is about
a hundred short rules and lexemes whatever the bounds and objects (compiling it takes milliseconds: docs/engine.md).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from timely_llm_ros.core.request import MAX_PLAN_CALLS
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.skills.spec import SkillSpec

TOKENS_PER_STATEMENT = 10
DEFAULT_MAX_CALLS = MAX_PLAN_CALLS   # skill calls of a plan with its loops unrolled (1,000)
MAX_DEPTH = 2                 # blocks inside blocks: one level
MAX_COMPARISONS = 4           # comparisons in a condition (each calls at most one query)
STRING_CHARS = "a-zA-Z0-9 ?.,!"   # the characters a free string argument may hold (a character class body)
MAX_STRING = 40
MAX_DIGITS = 4
MAX_VARIABLES = 3             # variables a plan may set (_1.._3); the reference plans use one
MAX_SIGHTED = 8               # unlisted objects an approaching skill may take once a block saw them in view
MAX_STATEMENTS = 127          # the statement count's field holds 7 bits
ALWAYS = "le([0:7], 127)"   # a condition that always holds (the statement count has 7 bits)
Rule = tuple[str, list[tuple[str, str]]]   # a rule's name and its alternatives (body, condition or "")
KIND_CODES = {"bool": 1, "float": 2, "str": 3}   # a variable's kind in its 2-bit field (0: not set)


def loop_reservation(max_calls: int) -> int:
    """The calls a loop reserves of a plan's cap: the largest power of two at most ``max_calls / 4`` (128 under the
    default cap of 1,000), at least 1."""
    return 1 << max(0, (max_calls // 4).bit_length() - 1)


def max_statements(max_plan_tokens: int) -> int:
    """Statements a plan may hold under a cap of ``max_plan_tokens`` tokens (see the module docstring)."""
    return min(MAX_STATEMENTS, max(1, max_plan_tokens // TOKENS_PER_STATEMENT))


@dataclass(frozen=True)
class GrammarSpec:
    """What one request's grammar admits; equal specs give the same grammar text (the compile cache's key).

    ``skills``: the allowed skill names, sorted (the robot's advertised skills within its skill set, less those
    that move it toward a hazard); ``objects``:
    the names object slots take, in order (() leaves them free strings); ``hazards``: those of them a skill that
    approaches its object may not take; ``scene``: those of them the scene lists, the only ones an ``in_scene``
    skill takes (() when all are); ``fixed``: those of them the context lists as fixed places (a bin, a drawer),
    which a ``movable`` skill never takes; ``max_plan_tokens`` sets the statement bound; ``max_calls`` bounds the
    calls with loops unrolled."""

    robot_type: str
    skills: tuple[str, ...]
    objects: tuple[str, ...] = ()
    max_plan_tokens: int = 200
    max_calls: int = DEFAULT_MAX_CALLS
    hazards: tuple[str, ...] = ()
    scene: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()

    @classmethod
    def of(cls, skill_set: SkillSet, skills: Iterable[str] | None = None, objects: Sequence[str] = (),
           max_plan_tokens: int | None = None, max_calls: int = DEFAULT_MAX_CALLS,
           hazards: Sequence[str] = (), scene: Sequence[str] = (), hazard_sides: Sequence[str] = (),
           fixed: Sequence[str] = ()) -> "GrammarSpec":
        """The spec of a request to a robot of ``skill_set``: ``skills`` the robot advertises (None: all of the
        skill set's; names outside the skill set are left out, and so are those that move the robot to one of
        ``hazard_sides``, where its context places a hazard), ``objects`` the names its object slots take
        (deduplicated, in order), ``hazards`` those of them its task keeps the robot away from, ``scene`` those
        its scene lists and ``fixed`` its fixed places (names not among ``objects`` are ignored; a scene holding
        every object is kept as ())."""
        sides = set(hazard_sides)
        allowed = sorted(s for s in (skill_set.skills if skills is None else set(skills) & set(skill_set.skills))
                         if skill_set.skills[s].moves not in sides)
        names = tuple(dict.fromkeys(o for o in objects if o))
        kept_away, listed, places = set(hazards), set(scene), set(fixed)
        in_scene = tuple(o for o in names if o in listed)
        return cls(skill_set.name, tuple(allowed), names,
                   skill_set.max_plan_tokens if max_plan_tokens is None else int(max_plan_tokens), int(max_calls),
                   tuple(h for h in names if h in kept_away), in_scene if len(in_scene) < len(names) else (),
                   tuple(o for o in names if o in places))

    def slot(self, skill: SkillSpec) -> tuple[str, ...]:
        """The objects ``skill``'s object slots take under this spec (all of ``objects`` but the hazards of a skill
        that approaches, the unlisted names of an in_scene one and the fixed places of a movable one)."""
        listed = set(self.scene or self.objects)
        return tuple(o for o in self.objects if not (skill.approaches and o in self.hazards)
                     and not (skill.in_scene and o not in listed) and not (skill.movable and o in self.fixed))


def plan_grammar(skill_set: SkillSet, max_plan_tokens: int | None = None, *, skills: Iterable[str] | None = None,
                 objects: Sequence[str] = (), max_calls: int = DEFAULT_MAX_CALLS,
                 hazards: Sequence[str] = (), scene: Sequence[str] = (), hazard_sides: Sequence[str] = (),
                 fixed: Sequence[str] = ()) -> str | None:
    """The Lark grammar (llguidance's dialect) of the skill set's plans under these bounds, or None for a prose
    skill set; ValueError when no plan could be written (no allowed action skill, a bound below 1)."""
    if skill_set.mode != "statements":
        return None
    return grammar_text(skill_set, GrammarSpec.of(skill_set, skills, objects, max_plan_tokens, max_calls, hazards,
                                                  scene, hazard_sides, fixed))


def grammar_text(skill_set: SkillSet, spec: GrammarSpec) -> str:
    """The grammar of ``spec`` (its skills looked up in ``skill_set``, a statements skill set)."""
    if "call" not in skill_set.statement_forms:
        raise ValueError(f"skill set {skill_set.name!r} allows no call statements: no plan of it could act")
    unknown = [s for s in spec.skills if s not in skill_set.skills]
    if unknown:
        raise ValueError(f"skills {unknown} are not in skill set {skill_set.name!r}")
    specs = [skill_set.skills[s] for s in spec.skills]
    slots = {s.short: spec.slot(s) for s in specs if "object" in s.args} if spec.objects else {}
    sighted = _sighted(specs, skill_set.statement_forms, spec)
    for s in specs:     # an unlisted object: approached only inside a block that saw it in view (_Builder._sight)
        if s.approaches and s.short in slots:
            slots[s.short] = tuple(o for o in slots[s.short] if o not in sighted)
    # a skill left with no object is left out (every object is to be kept away from: no goto), unless it approaches
    # what a block may see
    specs = [s for s in specs if slots.get(s.short, True) or (s.approaches and sighted)]
    if not any(s.is_action for s in specs):
        raise ValueError(f"no action skill allowed for a {skill_set.name} plan (allowed: {list(spec.skills) or 'none'})"
                         ": the robot advertises none of its skill set's actions, so no plan could act")
    if spec.max_calls < 1:
        raise ValueError(f"max_calls must be >= 1, got {spec.max_calls}")
    narrowed = {short: names for short, names in slots.items() if names != spec.objects}
    unlisted = tuple(o for o in spec.objects if o not in spec.scene) if spec.scene else ()
    return _Builder(specs, skill_set.statement_forms, spec.objects, max_statements(spec.max_plan_tokens),
                    spec.max_calls, narrowed, sighted, unlisted).text()


def _sighted(specs: list[SkillSpec], forms: tuple[str, ...], spec: GrammarSpec) -> tuple[str, ...]:
    """The objects a skill that approaches takes only once a query marked ``in_view`` said they are in view: those
    the request names but its scene does not list (a "find the button" task's button), when an allowed skill
    approaches, an allowed bool query is in_view and conditionals are allowed (else they are not approached at all),
    hazards aside, at most MAX_SIGHTED."""
    if not (spec.scene and "conditional" in forms and any(s.approaches for s in specs)
            and any(s.in_view for s in specs)):
        return ()
    unlisted = [o for o in spec.objects if o not in spec.scene and o not in spec.hazards]
    return tuple(unlisted[:_Layout(spec.max_calls).sight_room()])


@dataclass(frozen=True)
class _Hold:
    """What the grammar follows of a robot that holds one thing at a time (a skill set with a skill that ``grasps``),
    where its plans have no blocks, so that each statement's effect is certain. The fields sit in the rules'
    parameter from bit ``BASE`` (the loop and call fields a grammar without blocks leaves unused): ``above``, the
    object the last reaching call went to (a skill that another skill names as its ``after``: an arm's goto), and
    ``held``, the object held, each an index into the request's objects, all ones for none; then one ``loaded`` bit
    per object a skill grasps, set once something is dropped onto it. Such an object is never lifted again, since
    what rests on it would come too (the grammar does not follow what is taken off it later)."""

    BASE = 16

    objects: tuple[str, ...]
    loadable: tuple[str, ...]     # the objects a grasping skill takes: those something dropped onto pins down
    width: int                    # bits of an index: all ones (``none``) is no object

    @classmethod
    def of(cls, actions: list[SkillSpec], objects: tuple[str, ...],
           narrowed: dict[str, tuple[str, ...]]) -> "_Hold | None":
        """The fields for these actions and objects; None when no action grasps, no objects are listed, or they are
        too many for the parameter's 64 bits (about 36: such a grammar does not follow what is held)."""
        grasping = [s.short for s in actions if s.grasps]
        if not objects or not grasping:
            return None
        loadable = tuple(o for o in objects if any(o in narrowed.get(g, objects) for g in grasping))
        width = len(objects).bit_length()
        return cls(objects, loadable, width) if cls.BASE + 2 * width + len(loadable) <= 64 else None

    @property
    def none(self) -> int:
        return (1 << self.width) - 1

    @property
    def above(self) -> tuple[int, int]:
        return self.BASE, self.BASE + self.width

    @property
    def held(self) -> tuple[int, int]:
        return self.BASE + self.width, self.BASE + 2 * self.width

    def loaded(self, name: str) -> int:
        """The bit set once something is dropped onto ``name`` (one of ``loadable``)."""
        return self.held[1] + self.loadable.index(name)

    @property
    def initial(self) -> int:
        """The parameter a plan starts with: above nothing, holding nothing."""
        return (self.none << self.above[0]) | (self.none << self.held[0])

    def set(self, name: str, *where: tuple[int, int]) -> str:
        """The update writing ``name``'s index into fields that hold none (all ones)."""
        value = 2**64 - 1
        for lo, hi in where:
            value &= ~(((1 << (hi - lo)) - 1) << lo) | self.objects.index(name) << lo
        return f"bit_and({value:#x})"

    def clear(self, where: tuple[int, int], loaded: str | None = None) -> str:
        """The update setting a field to none, and ``loaded``'s bit."""
        mask = ((1 << (where[1] - where[0])) - 1) << where[0]
        return f"bit_or({mask | (1 << self.loaded(loaded) if loaded else 0):#x})"

    def is_(self, where: tuple[int, int], name: str | None) -> str:
        return f"eq({_rng(where)}, {self.none if name is None else self.objects.index(name)})"

    def is_not(self, where: tuple[int, int], name: str | None) -> str:
        return f"ne({_rng(where)}, {self.none if name is None else self.objects.index(name)})"


class _Layout:
    """Where each count lives in the rules' 64-bit parameter, for a plan cap of ``max_calls`` calls."""

    def __init__(self, max_calls: int) -> None:
        self.reserve = loop_reservation(max_calls).bit_length() - 1          # log2 of a loop's reservation
        self.n = (0, 7)                                     # simple statements written
        self.acted = 7                                      # an action came
        self.var = [(8 + 2 * j, 10 + 2 * j) for j in range(MAX_VARIABLES)]   # each variable's kind
        self.loop = {1: 14, 2: 15}                          # the open block at depth d is a loop
        self.body = (16, 17 + self.reserve)                 # the open loop's body calls, from its start value
        self.calls = (self.body[1], self.body[1] + max_calls.bit_length())   # calls charged outside loop bodies
        if self.calls[1] > 64:
            raise ValueError(f"max_calls {max_calls} is too large for the grammar's counters")

    def sight_room(self) -> int:
        """How many objects the sight fields hold: one bit per object and block depth, MAX_SIGHTED at most."""
        return min(MAX_SIGHTED, (64 - self.calls[1]) // MAX_DEPTH)

    def sight(self, depth: int, count: int) -> tuple[int, int]:
        """The bits of the objects seen in view by the condition of the open block at ``depth`` (1..MAX_DEPTH)."""
        lo = self.calls[1] + (depth - 1) * count
        return lo, lo + count


def _rng(field: tuple[int, int]) -> str:
    return f"[{field[0]}:{field[1]}]"


def _nested(op: str, conditions: Sequence[str]) -> str:
    """``op(c1, op(c2, ...))`` of at least one condition."""
    expr = conditions[-1]
    for c in reversed(conditions[:-1]):
        expr = f"{op}({c}, {expr})"
    return expr


def _all(*conditions: str | None) -> str | None:
    """The conjunction of conditions ("" when there are none; None when one of them can never hold)."""
    if any(c is None for c in conditions):
        return None
    out = [c for c in conditions if c]
    return _nested("and", out) if out else ""


def _any(*conditions: str) -> str:
    """The disjunction of conditions ("" when there are none or one always holds: nothing to check)."""
    return "" if not conditions or "" in conditions else _nested("or", conditions)


def _lit(text: str) -> str:
    """A Lark string literal matching ``text`` exactly."""
    return json.dumps(text, ensure_ascii=False)


def _quoted(name: str) -> str:
    """An object name as a plan's single-quoted string (quotes and backslashes escaped as the parser reads them)."""
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _int_range(lo: int, hi: int) -> str:
    """A regular expression matching the decimal integers lo..hi (no leading zeros; 1 <= lo <= hi)."""
    parts = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (width - 1)), min(hi, 10 ** width - 1)
        parts.append(_digits_range(str(a), str(b)))
    return "|".join(parts)


def _digits_range(a: str, b: str) -> str:
    """A regular expression matching the digit strings a..b of a's length (a <= b)."""
    if not a:
        return ""
    rest = len(a) - 1
    any_rest = "[0-9]" * rest if rest <= 1 else f"[0-9]{{{rest}}}"
    if a[0] == b[0]:
        return a[0] + _group(_digits_range(a[1:], b[1:]))
    if a[1:] == "0" * rest and b[1:] == "9" * rest:
        return f"[{a[0]}-{b[0]}]" + any_rest
    parts = [a[0] + _group(_digits_range(a[1:], "9" * rest))]
    if int(a[0]) + 1 <= int(b[0]) - 1:
        mid = str(int(a[0]) + 1) if int(a[0]) + 1 == int(b[0]) - 1 else f"[{int(a[0]) + 1}-{int(b[0]) - 1}]"
        parts.append(mid + any_rest)
    parts.append(b[0] + _group(_digits_range("0" * rest, b[1:])))
    return "|".join(parts)


def _group(regex: str) -> str:
    return f"({regex})" if "|" in regex else regex


class _Builder:
    """The rules of one grammar: per block depth d, ``s<d>`` a statement, ``c<d>`` its ';' (the statement counted),
    ``e<d>`` what may follow, ``close<d>`` a block's '}'. llguidance applies an update of the parameter only after a
    symbol that is never empty, so each update follows one: an action's '(...' sets "acted", its ')' charges its call,
    its ';' counts it."""

    def __init__(self, skills: list[SkillSpec], forms: tuple[str, ...], objects: tuple[str, ...],
                 statements: int, max_calls: int, narrowed: dict[str, tuple[str, ...]] | None = None,
                 sighted: tuple[str, ...] = (), unlisted: tuple[str, ...] = ()) -> None:
        self.actions = [s for s in skills if s.is_action]
        self.queries = [s for s in skills if not s.is_action]
        self.typed = {kind: [s for s in self.queries if s.returns == kind] for kind in KIND_CODES}
        self.forms = forms
        self.objects = objects
        self.narrowed = narrowed or {}  # skill -> the objects its slots take where fewer than ``objects``
        self.slot_sets = list(dict.fromkeys(self.narrowed.values()))   # each its own rule and lexeme
        self.s = statements
        self.cap = max_calls
        self.at = _Layout(max_calls)
        typed = any(self.typed.values())
        self.variables = "assign" in forms and typed
        self.loops = "loop" in forms
        self.conditionals = "conditional" in forms and typed     # a condition compares a typed query's value
        self.depth = MAX_DEPTH if (self.loops or self.conditionals) else 0
        self._heads: dict[tuple[str, ...], str] = {}     # skill names -> the lexeme of their calls' heads
        self.hold = _Hold.of(self.actions, objects, self.narrowed) if self.depth == 0 else None
        self.sighted = sighted if self.conditionals else ()   # see _sight
        self.unlisted = unlisted       # the objects the request names but its scene does not list (a search ends)
        self.sight_heads = tuple(s.short for s in self.queries if s.in_view)
        self._held: list[Rule] = []      # the rules _hold_actions made (the hold_* rules)
        if self.hold and all(s.after or s.releases for s in self.actions):
            raise ValueError(f"allowed actions {[s.short for s in self.actions]} each need another first (a pick what "
                             "a goto went above, a drop what a pick grasped): no plan could start")

    # ----- conditions on the parameter
    def _calls_at_most(self, n: int) -> str | None:
        """The calls charged outside loop bodies are at most n (None: never, n < 0). A grammar that tracks what is
        held has no blocks, so every simple statement charges one call: the statement count is the call count."""
        field = self.at.n if self.hold else self.at.calls
        return f"le({_rng(field)}, {n})" if n >= 0 else None

    def _body_at_most(self, charge: int) -> str | None:
        """The open loop's body has room for ``charge`` more calls."""
        top = 1 << self.at.reserve
        return f"le({_rng(self.at.body)}, {top - charge})" if charge <= top else None

    def _calls_leave(self, charge: int) -> str | None:
        """Room for ``charge`` calls outside loop bodies, and for the first action after them unless one came."""
        acted, after = self._calls_at_most(self.cap - charge), self._calls_at_most(self.cap - charge - 1)
        if after is None:
            return _all(f"bit_set({self.at.acted})", acted)
        return f"or(and(bit_set({self.at.acted}), {acted}), {after})" if acted else None

    def _statement_left(self, quiet: bool) -> str:
        """Room for one more simple statement, and for a second one (the first action) when this one does not act
        and none came."""
        n = _rng(self.at.n)
        if not quiet:
            return f"lt({n}, {self.s})"
        return f"or(and(bit_set({self.at.acted}), lt({n}, {self.s})), lt({n}, {self.s - 1}))"

    def _in_loop(self, inside: bool) -> str:
        lo, hi = self.at.loop[1], self.at.loop[2] + 1
        return f"not(is_zeros([{lo}:{hi}]))" if inside else f"is_zeros([{lo}:{hi}])"

    def _charge(self, inside: bool, exponent: int = 0) -> str:
        """The update charging 2**exponent calls: to the open loop's body, or outside loops."""
        lo, hi = self.at.body if inside else self.at.calls
        return f"incr([{lo + exponent}:{hi}])"

    def _charged(self, rule: str, inside: bool, exponent: int = 0) -> str:
        """A call of ``rule`` that charges 2**exponent calls (none where the statement count is the call count)."""
        return rule if self.hold else f"{rule}::{self._charge(inside, exponent)}"

    # ----- the text
    def text(self) -> str:
        # no_forcing: every token that fits the grammar is allowed (by default llguidance drops a token whose forced
        # continuation a longer token would spell, e.g. "')" where only "');" can follow), so the mask and
        # validate_tokens (engine/grammar.py's greedy check) agree
        head = ['%llguidance {"no_forcing": true}',
                f"// plans of at most {self.s} simple statements and {self.cap} calls with loops unrolled, at least "
                "one action; the rules' parameter counts (core/skills/grammar.py)"]
        start = f"s0::{self.hold.initial if self.hold else 0:#x}"
        rules = [("start", [(start, ""), (f"WS {start}", "")])] + self._statement_rules() + self._value_rules()
        rules += self._held             # the hold rules _statement_rules made (none without _Hold)
        return "\n".join(head + _render(rules) + self._terminals()) + "\n"

    def _statement_rules(self) -> list[Rule]:
        at = self.at
        rules: list[Rule] = []
        for d in range(self.depth + 1):
            alts: list[tuple[str, str | None]] = []
            for inside in ((False, True) if d > 0 and self.loops else (False,)):
                where = self._in_loop(inside) if d > 0 and self.loops else ""
                io = "in" if inside else "out"

                def room(charge: int, quiet: bool) -> str | None:
                    if inside:
                        return self._body_at_most(charge)
                    return self._calls_leave(charge) if quiet else self._calls_at_most(self.cap - charge)

                if self.hold:     # each action its own alternatives, reading and updating what is held
                    alts += self._hold_actions(_all(self._statement_left(False), room(1, False)))
                else:
                    alts.append((f"act acted{d}{io}::set_bit({at.acted})",
                                 _all(where, self._statement_left(False), room(1, False))))
                    rules.append((f"acted{d}{io}", [(f"\")\" c{d}::{self._charge(inside)}", "")]))
                if self.queries:
                    alts.append((f"look {self._charged(f'c{d}', inside)}",
                                 _all(where, self._statement_left(True), room(1, True))))
                if "return" in self.forms and d > 0:
                    alts.append((f"\"->\" value r{d}::{self._charge(inside)}",
                                  _all(where, self._statement_left(True), room(1, True))))
                if self.conditionals and d < self.depth:    # a head: MAX_COMPARISONS calls, then its body's first
                    head_room = _all(where, self._statement_left(False), room(MAX_COMPARISONS + 1, True))
                    alts.append((f"\"?\" condition open{d + 1}::{self._charge(inside, 2)}", head_room))
                    for i in range(len(self.sighted)):      # the same text, read as "it is in view" (_sight)
                        alts.append((f"\"?\" sight{d + 1}_{i}::{self._charge(inside, 2)}", head_room))
            if "return" in self.forms and d == 0:
                alts.append(("\"->\" value \";\"", _all(f"bit_set({at.acted})", self._calls_at_most(self.cap - 1))))
            if self.variables and d == 0:
                for j in range(MAX_VARIABLES):
                    was_set = f"ne({_rng(at.var[j - 1])}, 0)" if j else ""
                    alts.append((f"\"_{j + 1}\" {self._charged(f'set{j + 1}', False)}",
                                 _all(f"eq({_rng(at.var[j])}, 0)", was_set, self._statement_left(True),
                                      self._calls_leave(1))))
                    rules.append((f"set{j + 1}", [(f"\"=\" q_{kind} c0::bit_or({code << at.var[j][0]:#x})", "")
                                                  for kind, code in KIND_CODES.items() if self.typed[kind]]))
            if self.loops and d < self.depth:
                top = 1 << at.reserve
                for k, _, _ in self._loop_classes():    # a count of at most 2**k: 2**(reserve-k) body calls a round
                    bits = (top - (1 << (at.reserve - k))) << at.body[0] | (1 << at.loop[d + 1])
                    alts.append((f"LOOP{k} loop{d + 1}::bit_or({bits:#x})",
                                 _all(self._in_loop(False), self._statement_left(False), self._calls_leave(top))))
                rules.append((f"loop{d + 1}", [(f"OPEN s{d + 1}::incr([{at.calls[0] + at.reserve}:{at.calls[1]}])", "")]))
            if d < self.depth:
                rules += self._sight(d + 1)
            rules.append((f"s{d}", [(body, cond) for body, cond in alts if cond is not None]))
            rules.append((f"c{d}", [(f"\";\" e{d}::incr({_rng(at.n)})", "")]))
            # a space or newline only where a statement can follow: where an action can (every statement needs
            # at least what an action does)
            acts = [self._calls_at_most(self.cap - 1)]
            if d > 0 and self.loops:
                acts = [f"or(and({self._in_loop(True)}, {self._body_at_most(1)}), "
                        f"and({self._in_loop(False)}, {self._calls_at_most(self.cap - 1)}))"]
            if self.hold:     # a space only where some statement can follow (what is held may rule out all)
                conditions = [cond for _, cond in alts if cond is not None]
                acts.append("" if "" in conditions else _any(*conditions))
            follow = [(f"s{d}", f"lt({_rng(at.n)}, {self.s})"), (f"WS s{d}", _all(f"lt({_rng(at.n)}, {self.s})", *acts))]
            follow.append((f"close{d}", "") if d > 0 else ("\"\"", f"bit_set({at.acted})"))
            rules.append((f"e{d}", follow))
            if d > 0:
                if self.conditionals:
                    rules.append((f"open{d}", [(f"OPEN s{d}", "")]))
                if "return" in self.forms:
                    rules.append((f"r{d}", [(f"\";\" close{d}::incr({_rng(at.n)})", "")]))
                lo, hi = self._sight_bits(d)          # what this block's condition saw in view ends with it
                unseen = ~(((1 << (hi - lo)) - 1) << lo) & (2**64 - 1)
                clear = ~((((1 << (at.body[1] - at.body[0])) - 1) << at.body[0]) | (1 << at.loop[d])) & unseen
                forget = f"::bit_and({unseen:#x})" if hi > lo else ""
                closes = []
                for space in ("", "\" \" "):
                    closes.append((f"{space}CLOSE e{d - 1}{forget}", f"bit_clear({at.loop[d]})" if self.loops else ""))
                    if self.loops:
                        closes.append((f"{space}CLOSE e{d - 1}::bit_and({clear:#x})", f"bit_set({at.loop[d]})"))
                rules.append((f"close{d}", closes))
        return rules

    # ----- objects seen in view (a skill that approaches, an unlisted object: grammar_text's _sighted)
    def _sight_bits(self, depth: int) -> tuple[int, int]:
        return self.at.sight(depth, len(self.sighted)) if self.sighted else (0, 0)

    def _seen(self, i: int) -> str:
        """The condition of an open block saying that sighted object i is in view."""
        return _any(*(f"bit_set({self._sight_bits(d)[0] + i})" for d in range(1, self.depth + 1)))

    def _sight(self, depth: int) -> list[Rule]:
        """``sight<depth>_<i>``: a conditional head that is exactly ``?iv('x')`` or ``?iv('x')==True`` (iv a query
        marked in_view, x the i-th sighted object), whose block may send a skill that approaches to x: the robot has
        x in view there. The generic head ``condition`` reads the same text too; its block does not."""
        if not self.sighted:
            return []
        head = self._heads.setdefault(self.sight_heads, f"CALL{len(self._heads)}")
        lo = self._sight_bits(depth)[0]
        return [(f"sight{depth}_{i}", [(f"{head} SIGHT{i} \")\" (EQ TRUE)? OPEN s{depth}::bit_or({1 << (lo + i):#x})", "")])
                for i in range(len(self.sighted))]

    def _listed(self, names: Sequence[str]) -> list[str]:
        """``names`` less the sighted objects: those an object lexeme holds (a sighted one is a lexeme of its own,
        so that a head can tell which one it tests)."""
        return [n for n in names if n not in self.sighted]

    def _object_alternatives(self, names: Sequence[str], lexeme: str, approach: bool) -> list[tuple[str, str]]:
        """An object slot taking ``names``: their lexeme (the listed ones), then the sighted ones: for a skill that
        approaches only where seen."""
        out = [(lexeme, "")] if self._listed(names) else []
        if approach:
            return out + [(f"SIGHT{i}", self._seen(i)) for i in range(len(self.sighted))]
        return out + [(f"SIGHT{i}", "") for i, n in enumerate(self.sighted) if n in names]

    # ----- what is held (a skill set whose skills grasp and release, without blocks: _Hold)
    def _slot(self, skill: SkillSpec) -> tuple[str, ...]:
        return self.narrowed.get(skill.short, self.objects)

    def _hold_actions(self, room: str | None) -> list[tuple[str, str | None]]:
        """The first statement's action alternatives when what is held is followed (_Hold): each action its own head
        lexeme, then ``hold_a<k>`` (its arguments) and ``hold_z<k>`` (its ')'), their rules kept in
        ``_held``. A head is admitted only where one of its objects is, since llguidance takes a lexeme on
        the head's condition alone. An action that releases, is ``still`` or has an ``after`` (a pick) leaves the
        robot where it is; any other clears ``above`` at its head, and a reaching or grasping one then sets it to
        its object."""
        h, at = self.hold, self.at
        reaching = {s.after for s in self.actions if s.after}
        alts: list[tuple[str, str | None]] = []
        self._held = []
        for k, skill in enumerate(self.actions):
            head = self._heads.setdefault((skill.short,), f"CALL{len(self._heads)}")
            args, close = f"hold_a{k}", f"hold_z{k}"
            objects: list[tuple[str, str, str]] = []     # (object, update, condition) of a skill that changes them
            if skill.after:                          # grasps what it is above, with nothing on it
                objects = [(o, h.set(o, h.held), _all(h.is_(h.above, o), f"bit_clear({h.loaded(o)})"))
                           for o in self._slot(skill)]
            elif skill.grasps:                       # goes to it and grasps it
                objects = [(o, h.set(o, h.held, h.above), f"bit_clear({h.loaded(o)})") for o in self._slot(skill)]
            elif skill.short in reaching:            # goes above it, never above what it holds
                objects = [(o, h.set(o, h.above), h.is_not(h.held, o)) for o in self._slot(skill)]
            if objects:
                self._held.append((args, [(f"{_lit(_quoted(o))} {close}::{update}", cond)
                                          for o, update, cond in objects]))
                can = _any(*(cond for *_, cond in objects))
            elif skill.searches:     # looks for its object: one the scene does not list ends the plan with ");"
                slot = self._slot(skill)
                ends = [(_lit(_quoted(o) + ");"), "") for o in slot if o in self.unlisted]
                goes_on = [(f"{_lit(_quoted(o))} {close}", h.is_not(h.held, o)) for o in slot if o not in self.unlisted]
                self._held.append((args, goes_on + ends))
                can = "" if ends else _any(*(cond for _, cond in goes_on))
            elif skill.args:                                                # names nothing it holds
                slot = self._slot(skill) if "object" in skill.args else ()
                parts = [f"hold_o{k}" if kind == "object" else kind for kind in skill.args]
                self._held.append((args, [(" SEP ".join(parts) + f" {close}", "")]))
                if slot:
                    self._held.append((f"hold_o{k}", [(_lit(_quoted(o)), h.is_not(h.held, o)) for o in slot]))
                can = _any(*(h.is_not(h.held, o) for o in slot)) if slot else ""
            else:
                can = ""
            if skill.releases:      # onto a thing nothing rests on yet (then something does), or anywhere else
                onto = [(o, _all(h.is_(h.above, o), h.is_not(h.held, o))) for o in h.loadable]
                self._held.append((close, [(f"\")\" c0::{h.clear(h.held, o)}", _all(cond, f"bit_clear({h.loaded(o)})"))
                                           for o, cond in onto]
                                   + [(f"\")\" c0::{h.clear(h.held)}", _all(*(f"not({cond})" for _, cond in onto)))]))
                can = _all(h.is_not(h.held, None),
                           *(f"not({_all(cond, f'bit_set({h.loaded(o)})')})" for o, cond in onto))
            else:
                self._held.append((close, [(f"\")\" c0::set_bit({at.acted})", "")]))
            if skill.grasps:
                can = _all(can, h.is_(h.held, None))
            update = "" if (skill.releases or skill.after or skill.still) else f"::{h.clear(h.above)}"
            alts.append((f"{head} {args if skill.args else close}{update}", _all(room, can)))
        return alts

    def _value_rules(self) -> list[Rule]:
        rules: list[Rule] = [] if self.hold else [("act", self._calls(self.actions, closed=False))]
        groups = {kind: skills for kind, skills in self.typed.items() if skills}
        untyped = [s for s in self.queries if s.returns not in KIND_CODES]
        for kind, skills in groups.items():
            rules.append((f"q_{kind}", self._calls(skills)))
        if untyped:
            rules.append(("q_any", self._calls(untyped)))
        queries = [(f"q_{kind}", "") for kind in groups] + ([("q_any", "")] if untyped else [])
        looks = list(queries)
        if self.variables:
            for j in range(MAX_VARIABLES):
                for kind, code in KIND_CODES.items():
                    if self.typed[kind]:
                        looks.append((f"\"_{j + 1}\" \"=\" q_{kind}", f"eq({_rng(self.at.var[j])}, {code})"))
        if looks:
            rules.append(("look", looks))
        if "return" in self.forms:
            rules.append(("value", [("any", "")] + queries))
        var = {kind: (f" | var_{kind}" if self.variables and self.typed[kind] else "") for kind in KIND_CODES}
        rules.append(("int", [(f"INT{var['float']}", "")]))
        rules.append(("str", [(f"TEXT{var['str']}", "")]))
        rules.append(("object", self._object_alternatives(self.objects, "OBJECT", False) if self.objects
                      else [(f"TEXT{var['str']}", "")]))
        for k, names in enumerate(self.slot_sets):
            rules.append((f"object{k}", self._object_alternatives(names, f"OBJECT{k}", False)))
            if self.sighted and names in self._approach_sets():
                rules.append((f"seen{k}", self._object_alternatives(names, f"OBJECT{k}", True)))
        rules.append(("any", [(f"NUMBER | TEXT | BOOL{var['bool']}{var['float']}{var['str']}", "")]))
        if self.variables:
            for kind, code in KIND_CODES.items():
                if self.typed[kind]:
                    rules.append((f"var_{kind}", [(f"\"_{j + 1}\"", f"eq({_rng(self.at.var[j])}, {code})")
                                                  for j in range(MAX_VARIABLES)]))
        if self.conditionals:
            rules.append(("condition", [(f"comparison (JOIN comparison){{0,{MAX_COMPARISONS - 1}}}", "")]))
            equals = "(EQ | NE) (TRUE | FALSE" if self.sighted else "EQUALS (BOOL"   # EQ TRUE: _sight's lexemes
            forms = {"bool": f"({equals}{var['bool']}))?", "float": f"ORDER (NUMBER{var['float']})",
                     "str": f"EQUALS (TEXT{var['str']})"}
            alts = []
            for kind in KIND_CODES:
                if self.typed[kind]:
                    alts.append((f"q_{kind} {forms[kind]}", ""))
                    if self.variables:
                        alts.append((f"var_{kind} {forms[kind]}", ""))
            rules.append(("comparison", alts))
        return rules

    def _terminals(self) -> list[str]:
        digits = f"-?(0|[1-9][0-9]{{0,{MAX_DIGITS - 1}}})"
        out = [
            "WS: /[ \\n]/",
            "SEP: /, ?/",
            f"INT: /{digits}/",
            f"NUMBER: /{digits}(\\.[0-9]{{1,2}})?/",
            f"TEXT: /'[a-zA-Z0-9][{STRING_CHARS}]{{0,{MAX_STRING - 1}}}'/",
            "BOOL: \"True\" | \"False\"",
        ]
        if self.depth:
            out += ["OPEN: /\\{ ?/", "CLOSE: /\\};?/"]
        if self.conditionals:
            out += ["EQUALS: / ?(==|!=) ?/", "ORDER: / ?(==|!=|>=|<=|>|<) ?/", "JOIN: / ?[&|] ?/"]
        if self.sighted:
            out += ["EQ: / ?== ?/", "NE: / ?!= ?/", "TRUE: \"True\"", "FALSE: \"False\""]
            out += [f"SIGHT{i}: {_lit(_quoted(o))}" for i, o in enumerate(self.sighted)]
        for lexeme, names in [("OBJECT", self.objects)] + [(f"OBJECT{k}", n) for k, n in enumerate(self.slot_sets)]:
            names = self._listed(names)
            if names:
                out.append(f"{lexeme}: " + " | ".join(_lit(_quoted(o)) for o in names))
        if self.loops:
            for k, lo, hi in self._loop_classes():
                out.append(f"LOOP{k}: /{_int_range(lo, hi)}/")
        out += [f"{name}: /(?:{'|'.join(names)})\\(/" for names, name in self._heads.items()]
        return out

    def _loop_classes(self) -> list[tuple[int, int, int]]:
        """(k, lowest count, highest count) of each class of loop counts, the highest a power of two 2**k: every
        second power of two up to the reservation (each class is one lexeme; a count is charged as its class's
        highest)."""
        top = self.at.reserve
        ks = sorted(range(top, -1, -2))
        return [(k, 1 if i == 0 else (1 << ks[i - 1]) + 1, 1 << k) for i, k in enumerate(ks)]

    def _calls(self, skills: list[SkillSpec], closed: bool = True) -> list[tuple[str, str]]:
        """Alternatives calling any of ``skills``: one per argument signature, whose names and '(' are one lexeme
        (a grammar's lexemes cost compile time); ``closed=False`` leaves out the ')'."""
        by_args: dict[tuple[tuple[str, ...], bool], list[str]] = {}
        blind: set[tuple[str, ...]] = set()   # signatures of a skill that approaches with no listed object to take
        for skill in skills:
            args = skill.args
            if skill.short in self.narrowed:            # its object slots take fewer names
                k = self.slot_sets.index(self.narrowed[skill.short])
                slot = f"seen{k}" if self.sighted and skill.approaches else f"object{k}"
                args = tuple(slot if a == "object" else a for a in args)
                if slot.startswith("seen") and not self._listed(self.slot_sets[k]):
                    blind.add(args)
            # an in_view query's head is a lexeme of its own: _sight's heads use it
            by_args.setdefault((args, bool(self.sighted) and skill.in_view), []).append(skill.short)
        seen_any = _any(*(self._seen(i) for i in range(len(self.sighted))))
        out = []
        for (args, _), names in by_args.items():
            head = self._heads.setdefault(tuple(names), f"CALL{len(self._heads)}")
            # a blind one only where a sighted object is in view
            out.append((" ".join(p for p in (head, " SEP ".join(args), "\")\"" if closed else "") if p),
                        seen_any if args in blind else ""))
        return out

    def _approach_sets(self) -> list[tuple[str, ...]]:
        return [self.narrowed[s.short] for s in self.actions if s.approaches and s.short in self.narrowed]


_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"[a-z_][a-z0-9_]*(::)?")


def _render(rules: list[Rule]) -> list[str]:
    """The rules as Lark text. A rule is parametric (``name::_``) when it reads the parameter: it has a condition,
    updates the parameter for a rule it calls (``e0::incr(...)``) or calls a parametric rule, which then gets the
    parameter as it is (``name::_``)."""
    names = {head for head, _ in rules}

    def references(body: str) -> list[tuple[str, bool]]:
        """(rule name, called with an update or a value) of each rule the body calls, outside literals."""
        out = []
        for part in _LITERAL.split(body):
            out += [(m.group(0).removesuffix("::"), bool(m.group(1))) for m in _NAME.finditer(part)
                    if m.group(0).removesuffix("::") in names]
        return out

    def updates(body: str) -> bool:
        """Whether the body calls a rule with an update of its own parameter (not a constant)."""
        return bool(re.search(r"::[a-z_]+\(", body))

    parametric = {head for head, alts in rules if any(cond or updates(body) for body, cond in alts)}
    changed = True
    while changed:
        changed = False
        for head, alts in rules:
            if head not in parametric and any(r in parametric and not given for body, _ in alts
                                              for r, given in references(body)):
                parametric.add(head)
                changed = True

    def call(part: str) -> str:
        return _NAME.sub(lambda m: m.group(0) + "::_" if m.group(0) in parametric and not m.group(1) else m.group(0),
                         part)

    out = []
    for head, alts in rules:
        if len(alts) == 1 and not alts[0][1] and updates(alts[0][0]):
            # llguidance 1.7 inlines a rule of one unconditional alternative into its caller, and its optimiser
            # fails (a panic) when that alternative updates the parameter: a condition that always holds keeps it
            alts = [(alts[0][0], ALWAYS)]
        bodies = []
        for body, cond in alts:
            pieces = _LITERAL.split(body)
            literals = _LITERAL.findall(body)
            text = call(pieces[0]) + "".join(lit + call(piece) for lit, piece in zip(literals, pieces[1:]))
            bodies.append(f"{text} %if {cond}" if cond else text)
        out.append(f"{head}{'::_' if head in parametric else ''} : " + "\n    | ".join(bodies))
    return out
