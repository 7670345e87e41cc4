"""Skill sets: grammar validation, incremental segmentation, prompts."""
from pathlib import Path

import pytest

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills import ParsedSegment, SkillSet, load_skill_sets
from timely_llm_ros.core.skills.prompt import DEFAULT_TEMPLATE


@pytest.fixture(scope="module")
def sets() -> dict[str, SkillSet]:
    return load_skill_sets()


@pytest.fixture()
def drone(sets):
    return sets["drone"]


@pytest.fixture()
def arm(sets):
    return sets["arm"]


def feed_all(skill_set: SkillSet, deltas: list[str]):
    """Feed deltas one by one; return (segments from feed, segment from finish, segmenter)."""
    seg = skill_set.segmenter()
    out: list[ParsedSegment] = []
    for d in deltas:
        out += seg.feed(d)
    return out, seg.finish(), seg


def texts(segments):
    return [s.text for s in segments]


# --- loading --------------------------------------------------------------------------------------------------
def test_shipped_skill_sets_have_documented_sizes(sets):
    assert {"drone", "arm", "chat"} <= set(sets)
    assert sets["drone"].max_segment_tokens == 10
    assert sets["arm"].max_segment_tokens == 20 and sets["chat"].max_segment_tokens == 30
    assert all(s.max_plan_tokens == 200 for s in sets.values())
    assert sets["drone"].mode == "statements" and sets["chat"].mode == "sentence"
    assert sets["drone"].exec_profile == "drone"


def test_a_new_robot_is_just_a_new_yaml_file(tmp_path: Path):
    (tmp_path / "rover.yaml").write_text(
        "name: rover\nmode: statements\nstatement_forms: [call]\nmax_segment_tokens: 12\n"
        "skills:\n  - {short: fw, long: forward, args: [int], kind: action}\n"
        "  - {short: see, args: [str], kind: query}\n")
    rover = load_skill_sets(tmp_path)["rover"]
    assert rover.exec_profile == "rover" and rover.max_plan_tokens == 200
    assert rover.prompt_template == DEFAULT_TEMPLATE
    segs, last, _ = feed_all(rover, ["see('x'); fw(3);"])
    assert texts(segs) == ["see('x'); fw(3);"] and last is None


@pytest.mark.parametrize("body, fragment", [
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, kind: query}]\n", "no action"),
    ("name: x\nmode: poem\nmax_segment_tokens: 5\nskills: [{short: a}]\n", "mode"),
    ("name: x\nskills: [{short: a}]\n", "max_segment_tokens"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [float]}]\n", "argument kinds"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a}, {short: q, kind: query, returns: int}]\n", "returns must"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, returns: bool}]\n", "only a query returns"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int, str], arg_names: [cm]}]\n", "arg_names"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int]}]\nexamples: [{task: go, plan: 'b(3);'}]\n",
     r"examples\[0\] plan .* not a valid x plan: unknown skill"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a}]\nexamples: [{scene: room}]\n", "needs task and plan"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a}]\nprompt_examples: inline\n", "prompt_examples"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int], approaches: true}]\n", "takes no object"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], approaches: 'yes'}]\n", "true or false"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [str], in_scene: true}]\n", "in_scene: true, but"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int], movable: true}]\n", "movable: true, but"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], movable: 1}]\n", "movable must be true or"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int], grasps: true}]\n", "one object argument"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], grasps: 1}]\n", "grasps must be true or"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], in_view: true}]\n", "in_view: true: it must"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], kind: query, returns: bool, in_view: 1}]\n",
     "in_view must be true or false"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], searches: 1}]\n", "searches must be true"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], in_scene: true, searches: true}]\n",
     "searches: true: it must"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object, int], searches: true}]\n",
     "searches: true: it must"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], releases: true}]\n", "releases what"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], still: true, grasps: true}]\n",
     "is still"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], after: a}]\n", "another skill"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], after: b}]\n", "after: 'b'"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [object], after: b}, {short: b, args: [object], "
     "still: true}]\n", "moves the robot to it"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a, args: [int], moves: sideways}]\n", "moves must be one of"),
    ("name: x\nmax_segment_tokens: 5\nskills: [{short: a}, {short: q, kind: query, moves: left}]\n", "on a query"),
])
def test_bad_skill_set_files_are_rejected_with_a_reason(tmp_path, body, fragment):
    (tmp_path / "x.yaml").write_text(body)
    with pytest.raises(ValueError, match=fragment):
        load_skill_sets(tmp_path)


def test_shipped_skill_sets_tell_a_model_every_skill_and_every_query_what_it_returns(sets):
    for skill_set in sets.values():
        assert len(skill_set.examples) >= 3, skill_set.name
        for skill in skill_set.skills.values():
            assert skill.description and len(skill.arg_names) == len(skill.args), skill.short
            assert bool(skill.returns) == (skill.kind == "query"), skill.short
    assert sets["drone"].skills["od"].signature() == "od(object: str) -> float"
    assert sets["drone"].skills["mf"].signature() == "mf(cm: int)"


def test_build_prompt_uses_the_skill_set_name(drone):
    prompt = drone.build_prompt("find the cat ", "a cat on the sofa")
    assert prompt == DEFAULT_TEMPLATE.format(robot_type="drone", task="find the cat", context="a cat on the sofa")


# --- validation -----------------------------------------------------------------------------------------------
def test_valid_minispec_plan_has_no_problems(drone):
    plan = ("_1=od('cup'); ?_1>50&iv('cup')==True{mf(_1);}; 3{mf(20);tc(45);} "
            "?(iv('cat')!=False|ox('cat')<0.5){g('cat');tp();}; s('cat'); ->'done';")
    assert drone.validate_plan(plan) == []


@pytest.mark.parametrize("plan, fragment", [
    ("fly(3);", "unknown skill 'fly'"),
    ("mf(1, 2);", "takes 1 argument"),
    ("tp(1);", "takes 0 argument"),
    ("mf('far');", "must be int"),
    ("g(5);", "must be str"),
    ("3{mf(1);", "unbalanced braces"),
    ("mf(1);}", "unbalanced braces"),
    ("mf(1", "expected ')'"),
    ("mf(1) tc(2);", "expected ';'"),
    ("s('cat);", "unterminated string"),
    ("0{mf(1);}", "loop count"),
    ("", "empty plan"),
])
def test_invalid_drone_plans_name_the_problem(drone, plan, fragment):
    problems = drone.validate_plan(plan)
    assert any(fragment in p for p in problems), problems


def test_validation_reports_every_skill_problem_not_just_the_first(drone):
    problems = drone.validate_plan("fly(1); mf(1, 2); g(3);")
    assert len(problems) == 3


def test_arm_allows_only_calls(arm):
    assert arm.validate_plan("sc('apple'); gt('apple'); pi('apple'); mv(10, -5); dr(); tk('pear');") == []
    assert any("not allowed" in p for p in arm.validate_plan("2{pi('a');}"))
    assert any("not allowed" in p for p in arm.validate_plan("_1=sc('a');"))


def test_parse_skills_unrolls_loops_and_keeps_conditions(drone):
    calls = drone.parse_skills("2{mf(20);tc(45);} ?iv('cat')==True{g('cat');}; ->'done';")
    assert calls == [SkillCall("mf", (20,)), SkillCall("tc", (45,))] * 2 + [
        SkillCall("iv", ("cat",)), SkillCall("g", ("cat",))]


def test_parse_skills_reads_literals_and_variables(drone):
    calls = drone.parse_skills(r"""_1=od("cup"); mf(_1); d(1.5); l('it\'s; ok}');""")
    assert calls == [SkillCall("od", ("cup",)), SkillCall("mf", ("_1",)), SkillCall("d", (1.5,)),
                     SkillCall("l", ("it's; ok}",))]


def test_parse_skills_rejects_invalid_plans(drone):
    with pytest.raises(ValueError, match="unknown skill"):
        drone.parse_skills("zz(1);")


# --- statement segmentation -----------------------------------------------------------------------------------
def test_segment_ends_at_first_statement_with_an_action(drone):
    segs, last, seg = feed_all(drone, ["mf(50); tc(90);"])
    assert texts(segs) == ["mf(50);", " tc(90);"]
    assert segs[0].skills == [SkillCall("mf", (50,))]
    assert last is None and seg.pending == ""


def test_statement_split_across_tokens_is_cut_only_when_complete(drone):
    seg = drone.segmenter()
    assert seg.feed("m") == [] and seg.feed("f(5") == [] and seg.feed("0)") == []
    assert seg.pending == "mf(50)"
    out = seg.feed(";")
    assert texts(out) == ["mf(50);"] and seg.pending == ""


def test_two_statements_in_one_delta_give_two_segments(drone):
    seg = drone.segmenter()
    seg.feed("mf(")
    out = seg.feed("1); tc(2); m")
    assert texts(out) == ["mf(1);", " tc(2);"]
    assert seg.pending == " m"


def test_query_only_statements_stay_pending_and_join_the_next_action(drone):
    seg = drone.segmenter()
    assert seg.feed("_1=od('cup'); ?iv('cup'){_2=ox('cup');}; ") == []
    out = seg.feed("mf(_1);")
    assert texts(out) == ["_1=od('cup'); ?iv('cup'){_2=ox('cup');}; mf(_1);"]
    assert [c.name for c in out[0].skills] == ["od", "iv", "ox", "mf"]


def test_separators_in_strings_do_not_cut(drone):
    segs, _, seg = feed_all(drone, ["l('a;b", "}c{');", " p(\"x;\\\"", "y}\"); g('z');"])
    assert texts(segs) == ["l('a;b}c{');", " p(\"x;\\\"y}\"); g('z');"]
    assert segs[0].skills == [SkillCall("l", ("a;b}c{",))]


def test_nested_blocks_are_one_segment(drone):
    plan = "2{?iv('cat'){mf(5);tc(9);};l('x');}"
    seg = drone.segmenter()
    outs = [seg.feed(c) for c in plan]
    assert all(o == [] for o in outs[:-1])  # nothing is cut inside the loop
    assert texts(outs[-1]) == [plan]
    assert len(outs[-1][0].skills) == 2 * 4


def test_semicolon_after_a_block_starts_the_next_segment(drone):
    segs, last, seg = feed_all(drone, ["?iv('a'){g('a');};tp();"])
    assert texts(segs) == ["?iv('a'){g('a');}", ";tp();"]
    assert all(drone.validate_plan(s.text) == [] for s in segs)


def test_finish_returns_trailing_action_without_semicolon(drone):
    segs, last, seg = feed_all(drone, ["_1=od('x'); mf(1); ", "tc(30)"])
    assert texts(segs) == ["_1=od('x'); mf(1);"]
    assert last is not None and last.text == " tc(30)" and last.skills == [SkillCall("tc", (30,))]
    assert seg.pending == "" and seg.error is None


def test_finish_keeps_non_executable_remainder_pending(drone):
    segs, last, seg = feed_all(drone, ["mf(1);", " ->'done';\n"])
    assert texts(segs) == ["mf(1);"] and last is None
    assert seg.pending == " ->'done';\n" and seg.error is None


def test_finish_reports_an_incomplete_plan(drone):
    segs, last, seg = feed_all(drone, ["mf(1); 2{tc(3);"])
    assert last is None and "incomplete" in seg.error and seg.pending == " 2{tc(3);"


@pytest.mark.parametrize("text, fragment", [
    ("mf(1;", "inside parentheses"),
    ("mf(1));", "closes nothing"),
    ("_1=od('a');};", "unbalanced braces"),
    ("fly(2);", "unknown skill"),
])
def test_invalid_text_sets_error_early_and_stops_segmenting(drone, text, fragment):
    seg = drone.segmenter()
    assert seg.feed(text) == []
    assert fragment in seg.error
    assert seg.feed(" mf(2);") == [] and seg.finish() is None
    assert seg.pending.endswith(" mf(2);")


def test_arm_cuts_every_call(arm):
    plan = "sc('apple');\ngt('apple');\npi('apple');\nmv(3, 4);\ndr();\n"
    segs, last, seg = feed_all(arm, [plan[i:i + 3] for i in range(0, len(plan), 3)])
    assert [s.skills[0].name for s in segs] == ["sc", "gt", "pi", "mv", "dr"]
    assert all(len(s.skills) == 1 for s in segs)
    assert "".join(texts(segs)) + seg.pending == plan and seg.pending == "\n"


def test_feed_after_finish_is_an_error(drone):
    seg = drone.segmenter()
    seg.finish()
    with pytest.raises(RuntimeError):
        seg.feed("mf(1);")


# --- chat -----------------------------------------------------------------------------------------------------
LONG = "The kitchen is on your left after the second door on this floor."  # 13 words


def test_chat_sentence_cut_waits_for_whitespace_and_enough_words(sets):
    chat = sets["chat"]
    seg = chat.segmenter()
    assert seg.feed(LONG) == []          # '.' might still be a decimal point
    out = seg.feed(" Go")
    assert texts(out) == [LONG] and out[0].skills == [SkillCall("say", (LONG,))]
    assert seg.pending == " Go"


def test_chat_short_sentences_join_until_ten_words(sets):
    segs, last, seg = feed_all(sets["chat"], ["Yes. It is 3.5 m away, e.g. near the sink. ", "Go now!"])
    assert texts(segs) == ["Yes. It is 3.5 m away, e.g. near the sink."]
    assert last.text == " Go now!" and seg.pending == ""


def test_chat_paragraph_mode_cuts_at_blank_lines(tmp_path):
    (tmp_path / "story.yaml").write_text(
        "name: story\nmode: paragraph\nmax_segment_tokens: 20\nskills: [{short: say, args: [str]}]\n")
    story = load_skill_sets(tmp_path)["story"]
    text = "First part. Still first.\n  \nSecond\npart.\n\n\nThird."
    segs, last, seg = feed_all(story, list(text))
    assert texts(segs) == ["First part. Still first.", "\n  \nSecond\npart."]
    assert last.text == "\n\n\nThird."
    assert [c.args[0] for c in story.parse_skills(text)] == ["First part. Still first.", "Second\npart.", "Third."]


def test_chat_validation_only_rejects_empty_replies(sets):
    assert sets["chat"].validate_plan("Sure.") == []
    assert sets["chat"].validate_plan("  \n") == ["empty plan"]


def test_nested_calls_as_arguments_are_parsed_inner_first(drone):
    segs, _, _ = feed_all(drone, ["mf(od(", "'cup'));"])
    assert [c.name for c in segs[0].skills] == ["od", "mf"]
    assert segs[0].skills[1].args == (SkillCall("od", ("cup",)),)


def test_segmenting_cuts_the_same_segments_whatever_the_token_boundaries(drone):
    # behaviour only: the segmenter's cost per token is reported by `benchmarks/overhead.py segmentation`
    plan = ("_1=od('cup'); ?_1>50&iv('cup')==True{mf(_1);tc(90);}; 3{mf(20);tc(45);} s('cat'); g('cat'); tp(); "
            "l('done; ok'); ->'done';")
    cuts = []
    for width in (1, 3, 7, len(plan)):
        segs, last, _ = feed_all(drone, [plan[i:i + width] for i in range(0, len(plan), width)])
        cuts.append(texts(segs) + ([last.text] if last else []))
    assert cuts[0] == ["_1=od('cup'); ?_1>50&iv('cup')==True{mf(_1);tc(90);}", "; 3{mf(20);tc(45);}", " s('cat');",
                       " g('cat');", " tp();", " l('done; ok');"]
    assert all(c == cuts[0] for c in cuts[1:])


def test_variables_fit_any_argument_kind_but_strings_do_not_fit_int(drone):
    assert drone.validate_plan("_1=od('cup'); mf(_1); g(_1);") == []
    assert any("must be int" in p for p in drone.validate_plan("mf('_1');"))
