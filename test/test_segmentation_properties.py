"""Property tests: random valid plans, split into random deltas, segment the same way however they are split."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_llm_ros.core.skills import SkillSet, load_skill_sets
from timely_llm_ros.core.skills.minispec import FORMS, _parse_full, _parse_simple
from timely_llm_ros.core.skills.statements import StatementSegmenter

SETS = load_skill_sets()
DRONE, ARM, CHAT = SETS["drone"], SETS["arm"], SETS["chat"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

space = st.sampled_from(["", "", " ", "\n", "  ", "\n  "])
string_body = st.text(alphabet="ab ;{}()?'\"\\=", max_size=8)


@st.composite
def string_literal(draw) -> str:
    quote = draw(st.sampled_from(["'", '"']))
    body = draw(string_body).replace("\\", "\\\\").replace(quote, "\\" + quote)
    return quote + body + quote


number = st.one_of(st.integers(-50, 500).map(str),
                   st.floats(0, 100, allow_nan=False).map(lambda f: f"{f:.2f}"))
variable = st.sampled_from(["_1", "_2", "_x"])


def call_of(skill_set: SkillSet, kinds: tuple[str, ...] = ("action", "query")):
    names = sorted(n for n, s in skill_set.skills.items() if s.kind in kinds)

    @st.composite
    def call(draw) -> str:
        spec = skill_set.skills[draw(st.sampled_from(names))]
        args = []
        for kind in spec.args:
            options = [variable]
            if kind in ("int", "any"):
                options.append(number)
            if kind in ("str", "object", "any"):
                options.append(string_literal())
            args.append(draw(st.one_of(options)))
        sep = draw(st.sampled_from([",", ", "]))
        return f"{spec.short}({sep.join(args)})"

    return call()


drone_call = call_of(DRONE)
drone_action = call_of(DRONE, ("action",))
drone_query = call_of(DRONE, ("query",))
operand = st.one_of(drone_query, variable, number, string_literal(), st.sampled_from(["True", "False"]))


@st.composite
def condition(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        left = draw(operand)
        if draw(st.booleans()):
            left += draw(st.sampled_from(["==", "!=", ">", "<"])) + draw(operand)
        parts.append(left)
    joiners = [draw(st.sampled_from(["&", "|"])) for _ in parts[1:]]
    return "".join(p + j for p, j in zip(parts, joiners + [""]))


def statements(depth: int):
    simple = st.one_of(
        drone_call,
        drone_action,
        st.builds(lambda v, e: f"{v}={e}", variable, st.one_of(drone_call, number, string_literal())),
        st.builds(lambda e: f"->{e}", operand),
    ).map(lambda s: s + ";")
    if depth == 0:
        return simple
    body = st.lists(st.tuples(space, statements(depth - 1)), min_size=1, max_size=3).map(
        lambda xs: "".join(a + b for a, b in xs))
    loop = st.builds(lambda n, b, t: f"{n}{{{b}}}{t}", st.integers(1, 4), body, st.sampled_from(["", ";"]))
    cond = st.builds(lambda c, b, t: f"?{c}{{{b}}}{t}", condition(), body, st.sampled_from(["", ";"]))
    return st.one_of(simple, simple, loop, cond)


@st.composite
def drone_plan(draw) -> str:
    parts = draw(st.lists(st.tuples(space, statements(2)), min_size=1, max_size=8))
    text = "".join(a + b for a, b in parts) + draw(space)
    if draw(st.booleans()):  # trailing call without ';' (generation ended there)
        text += draw(drone_call)
    return text


@st.composite
def arm_plan(draw) -> str:
    calls = draw(st.lists(st.tuples(space, call_of(ARM)), min_size=1, max_size=12))
    return "".join(a + c + ";" for a, c in calls) + draw(space)


@st.composite
def with_cuts(draw, plan):
    text = draw(plan)
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=len(text))))
    bounds = [0] + cuts + [len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


def segment(skill_set: SkillSet, deltas: list[str]):
    # the random plans are valid text, not checked plans (a variable may be read before it is set): the cuts alone
    seg = StatementSegmenter(skill_set.skills, skill_set.statement_forms, static_check=False) \
        if skill_set.mode == "statements" else skill_set.segmenter()
    out = []
    for d in deltas:
        out += seg.feed(d)
    tail = seg.finish()
    return out + ([tail] if tail else []), seg


def check_statement_plan(skill_set: SkillSet, text: str, deltas: list[str]) -> None:
    assert skill_set.validate_plan(text) == [], text
    segments, seg = segment(skill_set, deltas)
    assert seg.error is None
    assert "".join(s.text for s in segments) + seg.pending == text
    for s in segments:
        assert skill_set.validate_plan(s.text) == []
        assert any(skill_set.skills[c.name].is_action for c in s.skills)
        assert s.skills == skill_set.parse_skills(s.text)
    assert not any(skill_set.skills[c.name].is_action for c in skill_set.parse_skills(seg.pending))
    calls = [c for s in segments for c in s.skills] + skill_set.parse_skills(seg.pending)
    assert calls == skill_set.parse_skills(text)
    whole, _ = segment(skill_set, [text])
    by_char, _ = segment(skill_set, list(text))
    assert [s.text for s in segments] == [s.text for s in whole] == [s.text for s in by_char]


@SETTINGS
@given(with_cuts(drone_plan()))
def test_drone_plans_segment_consistently(case):
    check_statement_plan(DRONE, *case)


@SETTINGS
@given(with_cuts(arm_plan()))
def test_arm_plans_give_one_segment_per_call(case):
    text, deltas = case
    check_statement_plan(ARM, text, deltas)
    segments, _ = segment(ARM, deltas)
    assert [len(s.skills) for s in segments] == [1] * len(ARM.parse_skills(text))


def typed(result) -> tuple:
    """A parse result with every argument's type (True == 1 and Var('x') == 'x' would hide a difference), and its
    program (the AST the robot runs) with every node's and leaf's type."""
    return ([(c.name, [(type(a).__name__, a) for a in c.args]) for c in result.skills], result.problems,
            typed_tree(result.program))


def typed_tree(node) -> object:
    if dataclasses.is_dataclass(node):
        return type(node).__name__, [typed_tree(getattr(node, f.name)) for f in dataclasses.fields(node)]
    if isinstance(node, (list, tuple)):
        return [typed_tree(n) for n in node]
    return type(node).__name__, node


soup = st.lists(st.sampled_from(
    ["_1", "_", "_x2", "=", "==", "->", "mf", "od", "g", "tp", "zz", "True", "False", "Truex", "x", "(", ")", ",",
     ";", " ", "\n", "mf(", "od(", "True)", "'a'", '"b b"', "'it\\'s'", "'", "5", "-3", "1.5", "1.", "0.25",
     "{", "}", "2", "?"]),
    min_size=1, max_size=9).map("".join)
simple_statement = st.one_of(drone_call, st.builds(lambda v, c: f"{v}={c}", variable, drone_call),
                             st.builds(lambda c: f"->{c}", drone_call))


@SETTINGS
@given(text=st.one_of(soup, simple_statement, simple_statement.map(lambda s: s + ";"), drone_plan()),
       forms=st.sampled_from([FORMS, ("call",), ("call", "assign")]))
def test_simple_statement_fast_path_agrees_with_the_parser(text, forms):
    fast = _parse_simple(text, DRONE.skills, forms)
    if fast is not None:
        assert typed(fast) == typed(_parse_full(text, DRONE.skills, forms)), text


@pytest.mark.parametrize("text", ["s('cat');", " _1 = od( 'cup' ) ;", "->g('x');", "mf(-3);", "d(1.5)", "tp();",
                                  "  zz(1);", "mf('far');", "mf(1, 2);", "mf(True);", "_2 = mf('x');"])
def test_fast_path_takes_the_usual_statements_with_the_parsers_problems(text):
    fast = _parse_simple(text, DRONE.skills, FORMS)
    assert fast is not None
    assert typed(fast) == typed(_parse_full(text, DRONE.skills, FORMS))


@pytest.mark.parametrize("text", ["l('it\\'s');", "2{mf(1);}", "?iv('a'){tp();}", "mf(od('a'));", "mf(1);tp();",
                                  "->_1;", "mf(x);"])
def test_fast_path_leaves_other_texts_to_the_parser(text):
    assert _parse_simple(text, DRONE.skills, FORMS) is None


def test_pending_prefix_invariant_holds_after_every_delta():
    text = "_1=od('a;}'); 2{mf(1);}; ?iv('b'){tp();} ->'ok';"
    seg = DRONE.segmenter()
    out = []
    for i, c in enumerate(text):
        out += seg.feed(c)
        assert "".join(s.text for s in out) + seg.pending == text[:i + 1]


words = st.sampled_from(["the", "cup", "is", "on", "3.5", "e.g.", "table", "left", "door", "ok"])
ender = st.sampled_from([".", "!", "?", ".\"", ",", ""])


@st.composite
def chat_reply(draw) -> str:
    out = []
    for _ in range(draw(st.integers(1, 40))):
        out.append(draw(words) + draw(ender) + draw(st.sampled_from([" ", " ", "\n", "  ", "\n\n"])))
    return "".join(out).rstrip() if draw(st.booleans()) else "".join(out)


@pytest.mark.parametrize("mode", ["sentence", "paragraph"])
@SETTINGS
@given(case=with_cuts(chat_reply()))
def test_chat_replies_segment_consistently(mode, case):
    text, deltas = case
    chat = SkillSet("c", mode, list(CHAT.skills.values()), "chat", 20, 200)
    segments, seg = segment(chat, deltas)
    assert "".join(s.text for s in segments) + seg.pending == text
    assert seg.pending.strip() == ""
    assert all(s.text.strip() and s.skills[0].args == (s.text.strip(),) for s in segments)
    if mode == "sentence":
        assert all(len(s.text.split()) >= 10 for s in segments[:-1])
    by_char, _ = segment(chat, list(text))
    assert [s.text for s in segments] == [s.text for s in by_char]
