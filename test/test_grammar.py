"""The plan grammar of grounded decoding (core/skills/grammar.py), compiled by llguidance over SmolLM2's tokenizer
(engine/grammar.py): which plans it admits -- the project's reference plans with their tasks' grounded objects --
which it refuses, and that every plan it lets a decoder write parses, runs on its robot without a plan error and
stays within the call cap."""
from __future__ import annotations

import os
import random

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_llm_ros.core.models import model_spec
from timely_llm_ros.core.skills import SkillSet, load_skill_sets
from timely_llm_ros.core.skills.context import (fixed_places, grounded_objects, hazard_sides, scene_objects,
                                                task_hazards, task_phrases)
from timely_llm_ros.core.skills.grammar import loop_reservation, max_statements, plan_grammar
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.engine.grammar import GrammarCompiler, TokenMasks
from timely_llm_ros.engine.models import weights_folder
from timely_llm_ros.engine.tokenizer import load_tokenizer
from timely_llm_ros.evaluation.evalset import load_eval_tasks
from timely_llm_ros.evaluation.scene import Pose, Scene, SceneObject
from timely_llm_ros.evaluation.scene_builder import context_scene
from timely_llm_ros.evaluation.scene_run import run_plan
from timely_llm_ros.paths import config_dir
from tools.embedded_planner.corpus import generate

SKILLS = load_skill_sets()
ROBOTS = ("drone", "arm")
DRONE, ARM = SKILLS["drone"], SKILLS["arm"]
OBJECTS = ("cup", "red cube", "table")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(weights_folder(model_spec("smollm2")))


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return GrammarCompiler(tokenizer, 49152, [tokenizer.eos_token_id])


@pytest.fixture(scope="module")
def accepts(tokenizer, compiler):
    """accepts(grammar, text): the grammar takes the whole text, and may end there."""
    def check(grammar: str, text: str) -> bool:
        matcher = compiler.matcher(grammar)
        return matcher.consume_tokens(tokenizer.encode(text)) and matcher.is_accepting()
    return check


def yaml_examples() -> list[tuple[str, str, str, str]]:
    """(robot, scene, task, plan) of the skill-set YAMLs' worked examples."""
    out = []
    for robot in ROBOTS:
        with open(config_dir() / "skills" / f"{robot}.yaml", encoding="utf-8") as f:
            for ex in yaml.safe_load(f).get("examples") or []:
                out.append((robot, str(ex.get("scene", "")), str(ex["task"]), str(ex["plan"])))
    return out


# ----------------------------------------------------------------------------- what it admits
def test_the_grammar_accepts_every_reference_plan_with_its_tasks_grounded_objects(accepts):
    """The evaluation set's reference plans and the skill YAMLs' worked examples, each under the grammar of its own
    goal (the objects its scene lists plus its task's phrases, the hazards its task names and the sides its scene
    places them on), with or without a leading space; the embedded planner's training plans under grammars with
    free object slots."""
    def goal(robot, scene, task, plan):
        objects = grounded_objects(scene, task)
        hazards = task_hazards(task, objects)
        return robot, objects, hazards, scene_objects(scene), hazard_sides(scene, hazards), fixed_places(scene), plan
    plans = [goal(t.robot_type, t.scene, t.task, t.plan) for t in load_eval_tasks(ROBOTS)]
    plans += [goal(robot, scene, task, plan) for robot, scene, task, plan in yaml_examples()]
    assert len(plans) > 300 and all(objects for _, objects, *_ in plans)
    assert sum(bool(hazards) for _, _, hazards, *_ in plans) > 20        # the avoid tasks' hazards are guarded
    assert sum(bool(sides) for *_, sides, _, _ in plans) > 20             # ... and the sides they are on
    assert sum(len(listed) < len(objects) for _, objects, _, listed, *_ in plans) > 300   # the task adds phrases
    assert sum(bool(fixed) for *_, fixed, _ in plans) > 100               # the arm's places are never picked
    plans += [(e.robot_type, (), (), (), (), (), e.plan) for e in generate(600, seed=0) if e.robot_type in ROBOTS]
    for robot, objects, hazards, listed, sides, fixed, plan in plans:
        grammar = plan_grammar(SKILLS[robot], objects=objects, hazards=hazards, scene=listed, hazard_sides=sides,
                               fixed=fixed)
        for text in (plan.strip(), " " + plan.strip()):
            assert accepts(grammar, text), (robot, objects, text)


def test_object_slots_take_only_the_goals_objects_and_stay_free_when_it_lists_none(accepts):
    grounded, free = plan_grammar(DRONE, objects=OBJECTS), plan_grammar(DRONE)
    assert accepts(grounded, "g('red cube');tp();") and accepts(grounded, "_1=od('table');?_1>50{g('cup');}")
    for outside in ("g('lamp');tp();", "g('red');", "g('Cup');", "?iv('lamp')==True{tp();}"):
        assert not accepts(grounded, outside) and accepts(free, outside), outside
    assert accepts(grounded, "l('a lamp is here');sa('what is left of the lamp?');")   # str slots stay free
    assert not accepts(grounded, "_1=p('what is it?');g(_1);") and accepts(free, "_1=p('what is it?');g(_1);")
    quoted = plan_grammar(DRONE, objects=("child's toy",))
    assert accepts(quoted, "g('child\\'s toy');") and not parse("g('child\\'s toy');", DRONE.skills).problems


def test_a_skill_that_approaches_never_takes_what_the_task_says_to_keep_away_from(accepts):
    """The drone's goto approaches its object; under a goal whose task keeps the robot away from the wasp, goto may
    not take the wasp (other skills still may: looking at it, measuring it), and when every object is a hazard goto
    is not offered at all."""
    objects = ("wasp", "window", "chair")
    hazards = task_hazards("there's a wasp near you, fly away from it toward the window", objects)
    assert hazards == ("wasp",)
    guarded, plain = plan_grammar(DRONE, objects=objects, hazards=hazards), plan_grammar(DRONE, objects=objects)
    assert accepts(plain, "g('wasp');") and not accepts(guarded, "g('wasp');")
    for fine in ("g('window');", "_1=od('wasp');?_1<100{mb(80);}", "s('wasp');tp();", "?iv('wasp')==True{ml(50);}"):
        assert accepts(guarded, fine), fine
    only = plan_grammar(DRONE, objects=("wasp",), hazards=("wasp",))
    assert not accepts(only, "g('wasp');") and accepts(only, "mb(80);tc(90);")
    assert plan_grammar(DRONE, objects=objects, hazards=("lamp",)) == plain            # not an object: no guard
    assert task_hazards("fly to the wasp and photograph it", objects) == ()
    assert task_hazards("put the knife away", ("knife", "drawer")) == ()              # "away" alone is no hazard
    assert task_hazards("don't fly into the wasp", objects) == ("wasp",)
    assert task_hazards("don't approach the wasp", objects) == ("wasp",)
    for escape in ("break away from the wasp", "the wasp is diving at you, swerve away", "dart away, wasp!"):
        assert task_hazards(escape, objects) == ("wasp",), escape          # verbs of escape, with "away"
    assert task_hazards("throw away the wasp trap", ("wasp trap", "bin")) == ()     # a thing thrown away is no hazard
    for coming in ("a wasp is swooping at you", "the wasp is heading straight for the drone", "wasp diving toward you"):
        assert task_hazards(coming, objects) == ("wasp",), coming           # something moving at the robot
    assert task_hazards("photograph the wasp looking at you", objects) == ()       # looking at it is no threat


def test_a_skill_that_approaches_goes_to_an_unlisted_object_only_inside_a_block_that_saw_it_in_view(accepts):
    """The drone's goto flies only to what it knows the place of: an object its scene lists, or one a condition on
    is_visible (in_view in the skill set) has just seen, inside that condition's block. "Anything here for sewing on
    a button?" names a button the room does not list: g('button') alone fails on the robot, and is refused."""
    grammar = plan_grammar(DRONE, objects=("treadmill", "telescope", "button", "needle"),
                           scene=("treadmill", "telescope"))
    admitted = ["g('treadmill');tp();", "s('button');?iv('button')==True{g('button');tp();->'found';}->'not found';",
                "s('button');?iv('button'){g('button');}", "3{?iv('button')==True{g('button');}tu(90);}",
                "?iv('button')==True{?iv('needle')==True{g('needle');}g('button');}",
                "?iv('button')==True&iv('needle')==True{tp();}", "?iv('button')==False{tp();}",
                "_1=iv('button');?_1==True{tp();}", "?iv('treadmill')==True{g('treadmill');}"]
    refused = ["g('button');tp();", "?iv('button')!=True{g('button');}tp();", "?iv('button')==False{g('button');}",
               "?iv('button')==True{tp();}g('button');", "?iv('needle')==True{g('button');}",
               "?iv('button')==True{?iv('needle')==True{tp();}g('needle');}"]
    for plan in admitted:
        assert accepts(grammar, plan), plan
    for plan in refused:
        assert not accepts(grammar, plan), plan
    only = plan_grammar(DRONE, objects=("lamp", "button"), scene=("lamp",), hazards=("lamp",))
    assert not accepts(only, "g('button');") and accepts(only, "s('button');?iv('button')==True{g('button');}")
    blind = plan_grammar(with_flags(DRONE, iv={"in_view": False}), objects=("treadmill", "button"),
                         scene=("treadmill",))
    assert accepts(blind, "g('button');")          # no query says what is in view: the slot stays as it was


def test_no_move_goes_to_the_side_where_the_scene_places_a_hazard(accepts):
    """"Don't collide with the tree" with the tree on the left: the drone may move any way but left; the sides come
    from the context's placed objects that the task names as hazards, and a move is refused only when its skill
    declares that side (turns, scans and hovering stay)."""
    scene, task = "tree on the left, 130 cm away; bench behind, 90 cm away", "don't collide with the tree"
    objects = grounded_objects(scene, task)
    hazards = task_hazards(task, objects)
    sides = hazard_sides(scene, hazards)
    assert "tree" in hazards and "bench" not in hazards and sides == ("left",)
    guarded = plan_grammar(DRONE, objects=objects, hazards=hazards, hazard_sides=sides)
    plain = plan_grammar(DRONE, objects=objects, hazards=hazards)
    assert accepts(plain, "ml(80);mu(40);") and not accepts(guarded, "ml(80);mu(40);")
    assert not accepts(guarded, "mr(50);ml(80);")
    for fine in ("mr(80);mu(40);", "mb(60);", "tc(90);mf(50);", "d(2);md(30);", "_1=od('tree');?_1<100{mr(50);}"):
        assert accepts(guarded, fine), fine
    assert hazard_sides(scene, ()) == () and hazard_sides("room: hall; objects: tree", ("tree",)) == ()
    above = hazard_sides("wasp above, 40 cm away; lamp on the right, 50 cm away", ("wasp", "lamp"))
    assert above == ("above", "right")
    cornered = plan_grammar(DRONE, objects=("wasp", "lamp"), hazards=("wasp", "lamp"), hazard_sides=above)
    assert not accepts(cornered, "mu(30);") and not accepts(cornered, "mr(30);") and accepts(cornered, "md(30);ml(60);")


def test_a_skill_marked_in_scene_takes_only_what_the_scene_lists(accepts):
    """The arm's goto, pick and take are in_scene (its table is what the context lists): "put the wrench in the blue
    bowl" with no wrench listed gives the phrase 'wrench', which the arm may scan for but neither go to nor pick; the
    scan searches, so the plan ends with it (on a table that lacks the wrench nothing else may run); the listed
    objects stay open to all of them."""
    scene, task = "table: red cube, blue bowl", "put the wrench in the blue bowl"
    objects, listed = grounded_objects(scene, task), scene_objects(scene)
    assert "wrench" in objects and "wrench" not in listed
    grammar = plan_grammar(ARM, objects=objects, scene=listed)
    assert accepts(grammar, "sc('red cube');gt('red cube');pi('red cube');gt('blue bowl');dr();")
    assert accepts(grammar, "sc('wrench');") and accepts(grammar, "tk('red cube');dr();sc('wrench');")
    assert not accepts(grammar, "sc('wrench');gt('red cube');pi('red cube');gt('blue bowl');dr();")
    assert not accepts(grammar, "sc('wrench')") and not accepts(grammar, "sc('wrench'); ")
    for outside in ("tk('red cube');gt('wrench');dr();", "gt('wrench');pi('wrench');dr();", "tk('wrench');dr();"):
        assert not accepts(grammar, outside) and accepts(plan_grammar(ARM, objects=objects), outside), outside
    assert plan_grammar(ARM, objects=listed, scene=listed) == plan_grammar(ARM, objects=listed)   # nothing to narrow
    drone = plan_grammar(DRONE, objects=objects, scene=listed)   # no drone skill is in_scene: it may fly to it
    assert accepts(drone, "s('wrench');g('red cube');tp();")


def test_a_task_phrase_that_is_part_of_a_listed_name_names_no_object():
    """"sort the fruit into the fruit basket": 'fruit' is part of the listed 'fruit basket', so it is no object a plan
    may name (a scan for it would fail at the robot); 'mango' and the basket by its whole name stay."""
    scene = "table: mango, kale; baskets: fruit basket"
    objects = grounded_objects(scene, "sort the fruit into the fruit basket")
    assert "fruit" not in objects and "basket" not in objects and {"mango", "fruit basket"} <= set(objects)
    assert "sort" in objects    # what is part of no listed name stays: the task may name what is not in view


def test_no_task_phrase_ends_in_a_verbs_past_form():
    """"the dog leash slid below the recliner": the leash is what to look for, and the grammar admits it, but not a
    'dog leash slid' (a plan once searched for that); a past form before a noun stays part of the name, and names
    that merely end in -ed stay names."""
    scene = "room: music room; objects: recliner, treadmill"
    objects = grounded_objects(scene, "the dog leash slid below the recliner, is it there?")
    assert {"dog leash", "leash", "recliner"} <= set(objects)
    assert not {"dog leash slid", "leash slid", "slid"} & set(objects)
    rolled = task_phrases("my keys rolled under the sofa")
    assert "keys" in rolled and not [p for p in rolled if p.endswith("rolled")]
    assert {"folded towel", "towel"} <= set(task_phrases("find the folded towel"))
    assert {"flower bed", "tool shed", "sled", "seed"} <= set(task_phrases(
        "look at the flower bed by the tool shed, the sled and the seed"))


def test_a_movable_skill_never_takes_a_fixed_place(accepts):
    """The arm's pick and take are movable: "places: scrap bucket, tool chest" lists places things go into, so no
    plan may pick one up (the robot would fail: it cannot lift a bin); going to one and scanning for one stay open,
    and so does picking anything the table lists. A context with no fixed places narrows nothing."""
    scene, task = "bench: offcut, chisel; places: scrap bucket, tool chest", "put the bench to rights"
    objects, listed, fixed = grounded_objects(scene, task), scene_objects(scene), fixed_places(scene)
    assert fixed == ("scrap bucket", "tool chest")
    grammar = plan_grammar(ARM, objects=objects, scene=listed, fixed=fixed)
    assert accepts(grammar, "sc('scrap bucket');gt('offcut');pi('offcut');gt('scrap bucket');dr();tk('chisel');"
                            "gt('tool chest');dr();")
    for lifted in ("gt('scrap bucket');pi('scrap bucket');", "tk('tool chest');dr();"):
        assert not accepts(grammar, lifted) and accepts(plan_grammar(ARM, objects=objects, scene=listed), lifted)
    assert fixed_places("table: red cube, blue bowl") == ()
    assert fixed_places("table: cup; places: cup, tray") == ("tray",)     # listed as an item too: not fixed
    assert plan_grammar(DRONE, objects=objects, fixed=fixed) == plan_grammar(DRONE, objects=objects)  # none movable

def without_hold(skill_set):
    """The skill set with its grasps, releases and after flags taken off (the grammar then follows nothing held)."""
    with open(config_dir() / "skills" / f"{skill_set.name}.yaml", encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    for entry in cfg["skills"]:
        for flag in ("grasps", "releases", "after"):
            entry.pop(flag, None)
    return SkillSet.from_config(cfg)


def with_flags(skill_set, **flags):
    """The skill set with some skills' YAML fields replaced: ``iv={"in_view": False}``."""
    with open(config_dir() / "skills" / f"{skill_set.name}.yaml", encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    for entry in cfg["skills"]:
        entry.update(flags.get(entry["short"], {}))
    return SkillSet.from_config(cfg)


ON_TABLE = "table: red block, blue block, green block; places: tray"


def test_the_arm_grammar_follows_what_the_gripper_holds(accepts):
    """The arm's pick grasps what its goto went above (after: gt), pick and take grasp, drop releases, a scan
    stays still: a grounded plan picks only where its last move went, never while holding, never goes to what it holds, drops
    only what it holds, never lifts a thing it dropped something onto, and never drops onto such a thing (it would
    land on what rests there). Each refused plan parses, and the same grammar without those flags takes it."""
    objects, fixed = scene_objects(ON_TABLE), fixed_places(ON_TABLE)
    grammar = plan_grammar(ARM, objects=objects, fixed=fixed)
    loose = plan_grammar(without_hold(ARM), objects=objects, fixed=fixed)
    assert grammar != loose
    for plan in ("gt('red block');pi('red block');gt('blue block');dr();gt('green block');pi('green block');"
                 "gt('red block');dr();",                                       # a tower of three
                 "tk('red block');gt('tray');dr();tk('blue block');mv(10, 20);dr();sc('tray');",
                 "gt('red block');pi('red block');dr();gt('red block');pi('red block');",   # put down where it was
                 "gt('red block');sc('blue block');pi('red block');",                      # a scan does not move
                 "gt('blue block');pi('blue block');gt('tray');dr();gt('blue block');pi('blue block');"):
        assert accepts(grammar, plan), plan
    for plan in ("gt('tray');pi('red block');",                        # the gripper is not above it
                 "gt('red block');mv(5, 5);pi('red block');",          # another action moved it
                 "gt('red block');tk('blue block');dr();pi('red block');",
                 "tk('red block');tk('blue block');",                  # it holds one thing at a time
                 "tk('red block');gt('red block');dr();",              # goes to what it holds
                 "tk('red block');sc('red block');",
                 "gt('tray');dr();",                                   # drops nothing
                 "gt('red block');pi('red block');gt('blue block');dr();tk('blue block');",   # red rests on blue
                 "gt('red block');pi('red block');gt('blue block');dr();gt('blue block');pi('blue block');",
                 "gt('red block');pi('red block');gt('blue block');dr();tk('green block');gt('blue block');dr();"):
        assert not parse(plan, ARM.skills, ARM.statement_forms).problems, plan
        assert not accepts(grammar, plan) and accepts(loose, plan), plan
    assert plan_grammar(ARM, objects=()) == plan_grammar(without_hold(ARM), objects=())   # free slots: not followed


def test_the_grammar_calls_only_the_skills_the_robot_advertises(accepts):
    advertised = ("mf", "tc", "iv", "tp")
    grammar = plan_grammar(DRONE, skills=advertised + ("fly",))      # a skill outside the set is left out
    assert accepts(grammar, "mf(50);?iv('cat')==True{tp();}")
    for plan in ("g('cat');", "mf(50);s('cat');", "fly(10);", "_1=od('cat');tp();"):
        assert not accepts(grammar, plan), plan
    with pytest.raises(ValueError, match="no action skill allowed"):
        plan_grammar(DRONE, skills=("iv", "od"))


TYPED = [   # (mistyped plan, the same plan typed right): each mistyped one parses, and fails on the robot or
         # before it is sent
    ("?od('cup')==True{g('cup');}", "?od('cup')>100{g('cup');}"),
    ("?iv('cup')>1{g('cup');}", "?iv('cup')==True{g('cup');}"),
    ("?od('cup'){g('cup');}", "?iv('cup'){g('cup');}"),
    ("?p('what colour is it?')>3{tp();}", "?p('what colour is it?')=='red'{tp();}"),
    ("_1=od('cup');?_1{g('cup');}", "_1=od('cup');?_1<=60{g('cup');}"),
    ("_1=iv('cup');?_1>100{tp();}", "_1=iv('cup');?_1==False{tp();}"),
    ("_1=od('cup');_2=iv('cup');?_1>_2{tp();}", "_1=od('cup');_2=od('table');?_1>_2{tp();}"),
    ("_1=od('cup');?_1>10{_1=iv('cup');}?_1>5{tp();}", "_1=od('cup');?_1>10{_1=od('table');}?_1>5{tp();}"),
]


def test_comparisons_are_typed_by_what_their_query_returns(accepts):
    scene = Scene({name: SceneObject(name, 2.0, 0.1 * i, 1.0) for i, name in enumerate(OBJECTS)}, Pose(), {})
    grammar = plan_grammar(DRONE, objects=OBJECTS)
    for wrong, right in TYPED:
        assert not parse(wrong, DRONE.skills).problems, wrong
        try:
            error = run_plan(DRONE, wrong, scene.copy()).error
        except ValueError as exc:   # the static check refuses it before it is sent (core/skills/static_check.py)
            error = str(exc)
        assert "cannot compare" in error or "needs" in error or "compares" in error, (wrong, error)
        assert not accepts(grammar, wrong), wrong
        assert accepts(grammar, right) and not run_plan(DRONE, right, scene.copy()).error, right


def test_the_grammar_refuses_a_plan_that_reads_a_variable_no_earlier_statement_surely_set(accepts):
    """These parse, but the interpreter ends them with a plan error (SmolLM2 wrote the first one on the demo): a
    variable is read before any assignment, or after one inside a block that may not have run. Variables are set in
    order (_1 first) and a new one only outside blocks, so two that would run are refused too."""
    grammar = plan_grammar(DRONE)
    refused = ["g('child');?_1>60{g('child');}", "mf(_1);", "?iv('cat')==True{_1=od('cat');}mf(_1);",
               "_1=od('cup');mf(_2);"]
    assert not accepts(grammar, "2{_1=od('cup');}g(_1);") and not accepts(grammar, "_2=od('cup');mf(_2);")
    fine = ["_1=od('child');?_1<60{mb(60);}", "_1=od('cup');?_1>10{_1=od('mug');}mf(_1);",
            "_1=p('what is here?');l(_1);"]
    for text in refused + fine:
        assert not parse(text, DRONE.skills).problems, text
    interpreter = Interpreter(lambda call: 1.0 if call.name == "od" else False)
    for text in refused:
        with pytest.raises(PlanError, match="is not set"):
            interpreter.run_segment(parse(text, DRONE.skills).program, PlanState())
        assert not accepts(grammar, text), text
    assert all(accepts(grammar, text) for text in fine)


def test_a_plan_makes_at_most_the_call_cap_with_its_loops_unrolled(accepts):
    """Under the default cap of 1,000 a loop reserves 128 calls: counts up to 128, a round of 16 calls at a count of
    8, seven full loops in a plan; under a cap of 50 a loop reserves 8; loops never nest."""
    grammar = plan_grammar(DRONE)
    assert loop_reservation(1000) == 128 and loop_reservation(50) == 8 and loop_reservation(3) == 1
    assert accepts(grammar, "128{tc(3);}") and not accepts(grammar, "129{tc(3);}")
    assert accepts(grammar, "8{" + "tp();" * 16 + "}") and not accepts(grammar, "8{" + "tp();" * 17 + "}")
    assert accepts(grammar, "128{tp();}" * 7) and not accepts(grammar, "128{tp();}" * 8)
    assert not accepts(grammar, "2{2{tp();}}") and not accepts(grammar, "2{?iv('cat'){3{tp();}}}")
    small = plan_grammar(DRONE, max_calls=50)
    assert accepts(small, "8{tp();}") and not accepts(small, "9{tp();}")
    for plan in ("128{tc(3);}", "8{" + "tp();" * 16 + "}", "128{tp();}" * 7):
        assert len(parse(plan, DRONE.skills).skills) <= 1000
    assert not accepts(grammar, "1000{1000{mf(1);}}")


def test_the_statement_bound_follows_the_plan_length_cap(accepts):
    """Under a 36-token cap a plan holds 3 simple statements: after the third only its end may follow."""
    assert max_statements(36) == 3 and max_statements(ARM.max_plan_tokens) >= 12
    grammar = plan_grammar(ARM, max_plan_tokens=36)
    assert accepts(grammar, "dr();dr();dr();") and not accepts(grammar, "dr();dr();dr();dr();")
    assert plan_grammar(SKILLS["chat"]) is None


INVALID = {
    "drone": ["fly(10);", "mf('ten');", "?iv('cat')==True{tp();", "tp();}", "g(cat);", "_1=;", "1001{tp();}",
              "mf(10,20);", "s('cat') tp();", "", "->;", "->'found';", "_1=iv('cat');->_1;", "tp(); ", "tp();  tp();"],
    "arm": ["2{dr();}", "?True{dr();}", "->'done';", "pi(3);", "mv(1);", "dr() dr();", "gt('box'));",
            "_1=sc('cup');"],
}


def test_the_grammar_rejects_plans_the_parser_rejects(accepts):
    """Hand-written invalid plans (unknown skill, wrong argument kind or count, unclosed or unopened block, a form
    the skill set does not allow, no action, stray whitespace) and random one-character edits of valid plans that
    the parser rejects."""
    rng = random.Random(5)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_'(){};,?=&|<>- "
    checked = 0
    for robot in ROBOTS:
        skills = SKILLS[robot]
        grammar = plan_grammar(skills)
        invalid = list(INVALID[robot])
        for e in [e for e in generate(400, seed=1) if e.robot_type == robot]:
            i = rng.randrange(len(e.plan))
            invalid.append(e.plan[:i] + rng.choice(["", rng.choice(alphabet)]) + e.plan[i + 1:])
        for text in invalid:
            parsed = parse(text, skills.skills, skills.statement_forms)
            if parsed.problems or not any(skills.skills[c.name].is_action for c in parsed.skills) \
                    or text in INVALID[robot]:
                assert not accepts(grammar, text), (robot, text)
                checked += 1
    assert checked >= 100


# ----------------------------------------------------------------------------- what a decoder can write under it
def random_scene(rng: random.Random, objects: tuple[str, ...]) -> Scene:
    """A random scene of the objects, lenient: a skill that asks the impossible of it (a pick of an object not on the
    table) does nothing instead of failing, so that a run fails only on what the grammar decides (kinds, variables)."""
    return Scene({o: SceneObject(o, rng.uniform(-4, 4), rng.uniform(-4, 4), rng.uniform(0, 2)) for o in objects},
                 Pose(z=rng.uniform(0.2, 2.0), yaw=rng.uniform(-180, 180)), {}, strict=False)


def decode_randomly(compiler: GrammarCompiler, grammar: str, eos: int, rng: random.Random, limit: int = 400,
                    run_on: bool = False) -> tuple[list[int], bool]:
    """Random constrained decoding: random logits each step, masked by the engine's TokenMasks, the best allowed
    token taken, until the end token (given a random head start, so that plans of every length come; ``run_on``
    gives it none, so that the plan runs on until the grammar ends it); (tokens, ended)."""
    matcher, masks, ids = compiler.matcher(grammar), TokenMasks(compiler.vocab_size), []
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    for _ in range(limit):
        logits = torch.rand(1, compiler.vocab_size, generator=generator)
        logits[0, eos] += -1.0 if run_on else 0.8 * rng.random()
        masks.apply(logits, [matcher])
        token = int(logits[0].argmax())
        assert logits[0, token] > float("-inf"), "no token allowed"
        if token == eos:
            assert matcher.is_accepting()
            return ids, True
        assert matcher.consume_token(token)
        ids.append(token)
    return ids, False


@settings(max_examples=int(os.environ.get("GRAMMAR_PROPERTY_EXAMPLES", "16")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), robot=st.sampled_from(ROBOTS), cap=st.sampled_from([1000, 1000, 60, 9]),
       objects=st.lists(st.sampled_from(["cup", "red cube", "table", "child's toy", "door", "cat"]), max_size=4,
                        unique=True))
def test_every_plan_decoded_under_the_grammar_parses_runs_and_stays_within_the_call_cap(
        tokenizer, compiler, seed, robot, cap, objects):
    """Random skill subsets (each with an action) and object lists, random decoding to the grammar's end (16 plans;
    GRAMMAR_PROPERTY_EXAMPLES=N for more): the plan parses, calls only allowed skills on the goal's objects, makes at most ``cap`` calls unrolled, and runs in a
    random scene with no plan error (a query about an object out of view fails as a skill, not as the plan)."""
    rng = random.Random(seed)
    skill_set = SKILLS[robot]
    skills = [name for name in sorted(skill_set.skills) if rng.random() < 0.7]
    skills += [rng.choice([n for n, s in skill_set.skills.items() if s.is_action and not (s.after or s.releases)])]
    grammar = plan_grammar(skill_set, skills=skills, objects=objects, max_calls=cap)
    ids, ended = decode_randomly(compiler, grammar, tokenizer.eos_token_id, rng)
    text = tokenizer.decode(ids)
    assert ended, text
    parsed = parse(text, skill_set.skills, skill_set.statement_forms)
    assert not parsed.problems, (text, parsed.problems)
    assert len(parsed.skills) <= cap and {c.name for c in parsed.skills} <= set(skills), text
    if objects:
        named = [a for c in parsed.skills for kind, a in zip(skill_set.skills[c.name].args, c.args) if kind == "object"]
        assert set(named) <= set(objects), text
    run = run_plan(skill_set, text, random_scene(rng, tuple(objects)))
    assert not run.error or "is not in view" in run.error, (text, run.error)


ITEMS = ["red block", "blue block", "cup", "child's toy", "apple", "sponge"]
PLACES = ["tray", "bin", "top drawer"]


def arm_table(rng: random.Random) -> str:
    """A random arm context: 1-4 items on the table, 0-2 fixed places."""
    items = rng.sample(ITEMS, rng.randint(1, 4))
    places = rng.sample(PLACES, rng.randint(0, 2))
    return "table: " + ", ".join(items) + (f"; places: {', '.join(places)}" if places else "")


@settings(max_examples=int(os.environ.get("GRAMMAR_PROPERTY_EXAMPLES", "16")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_every_arm_plan_decoded_under_its_grounded_grammar_runs_on_its_table(tokenizer, compiler, seed):
    """Random arm tables and random decoding to the grammar's end: the plan runs in the strict scene its context
    describes (evaluation/scene_builder.py: a pick needs the gripper above the thing, an empty gripper and nothing
    resting on it; a fixed place cannot be lifted) with no error at all."""
    rng = random.Random(seed)
    context = arm_table(rng)
    grammar = plan_grammar(ARM, objects=scene_objects(context), fixed=fixed_places(context))
    ids, ended = decode_randomly(compiler, grammar, tokenizer.eos_token_id, rng, run_on=rng.random() < 0.5)
    text = tokenizer.decode(ids)
    assert ended, text
    run = run_plan(ARM, text, context_scene("arm", context))
    assert not run.error, (context, text, run.error)


def test_the_random_decoder_finds_an_arm_plan_that_fails_without_the_hold_rules(tokenizer, compiler):
    """Mutation check of the property above: with the grasps, releases and after flags off, random decoding soon
    writes an arm plan that fails on its table (a pick where the gripper is not, a goto of what it holds)."""
    loose = without_hold(ARM)
    for seed in range(100):
        rng = random.Random(seed)
        context = arm_table(rng)
        grammar = plan_grammar(loose, objects=scene_objects(context), fixed=fixed_places(context))
        ids, ended = decode_randomly(compiler, grammar, tokenizer.eos_token_id, rng, run_on=True)
        if ended and run_plan(ARM, tokenizer.decode(ids), context_scene("arm", context)).error:
            return
    pytest.fail("random decoding never wrote an arm plan that fails on its table")


def drone_room(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A random drone context listing 1-3 things, and the grounded objects of a task naming 1-2 others."""
    things = ["cup", "sofa", "child's toy", "door", "lamp", "button", "red cube", "helmet"]
    listed = rng.sample(things, rng.randint(1, 3))
    named = rng.sample([t for t in things if t not in listed], rng.randint(1, 2))
    return f"room: kitchen; objects: {', '.join(listed)}", tuple(listed + named)


@settings(max_examples=int(os.environ.get("GRAMMAR_PROPERTY_EXAMPLES", "16")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_every_drone_plan_decoded_under_its_grounded_grammar_flies_only_to_what_it_knows(tokenizer, compiler, seed):
    """Random drone rooms and tasks that name things the room does not list, random decoding to the grammar's end:
    in the strict scene the context describes, goto never fails for want of knowing where its object is."""
    rng = random.Random(seed)
    context, objects = drone_room(rng)
    grammar = plan_grammar(DRONE, objects=objects, scene=scene_objects(context))
    ids, ended = decode_randomly(compiler, grammar, tokenizer.eos_token_id, rng, run_on=rng.random() < 0.5)
    text = tokenizer.decode(ids)
    assert ended, text
    error = run_plan(DRONE, text, context_scene("drone", context)).error or ""
    assert "has not seen" not in error, (context, text, error)


def test_the_random_decoder_finds_a_drone_plan_that_flies_to_an_unseen_object_without_the_sight_rule(tokenizer,
                                                                                                      compiler):
    """Mutation check of the property above: with is_visible's in_view flag off, random decoding soon writes a
    goto to a thing the drone has not seen."""
    blind = with_flags(DRONE, iv={"in_view": False})
    for seed in range(200):
        rng = random.Random(seed)
        context, objects = drone_room(rng)
        grammar = plan_grammar(blind, objects=objects, scene=scene_objects(context))
        ids, ended = decode_randomly(compiler, grammar, tokenizer.eos_token_id, rng)
        if ended and "has not seen" in (run_plan(DRONE, tokenizer.decode(ids), context_scene("drone", context)).error
                                        or ""):
            return
    pytest.fail("random decoding never flew to an object the drone had not seen")


def test_the_random_decoder_finds_a_plan_error_in_a_grammar_that_lets_one_through(tokenizer, compiler):
    """Mutation check of the property above: a grammar whose comparisons take any value (as before grounded
    decoding) lets the random decoder write a plan that fails on the robot."""
    loose = plan_grammar(DRONE, objects=("cup",)).replace("ORDER (NUMBER | var_float::_)", "ORDER BOOL")
    assert loose != plan_grammar(DRONE, objects=("cup",))
    scene = Scene({"cup": SceneObject("cup", 1.0, 0.0, 1.0)}, Pose(), {})
    for seed in range(200):
        ids, ended = decode_randomly(compiler, loose, tokenizer.eos_token_id, random.Random(seed))
        text = tokenizer.decode(ids)
        if not ended:
            continue
        try:
            error = run_plan(DRONE, text, scene.copy()).error or ""
        except ValueError as exc:   # the static check refuses it before it is sent (core/skills/static_check.py)
            error = str(exc)
        if "cannot compare" in error or "compares a float with a bool" in error:
            return
    pytest.fail("the random decoder never wrote a mistyped comparison")


def test_a_teams_own_skill_set_gets_the_same_grounded_grammar(accepts):
    """A team's own skill set (examples/rover) gets the same grammar: its worked examples pass, grounded."""
    from pathlib import Path

    rover_dir = Path(__file__).resolve().parent.parent / "examples" / "rover" / "skills"
    rover = load_skill_sets(rover_dir)["rover"]
    for ex in rover.examples:
        grammar = plan_grammar(rover, objects=grounded_objects(ex.scene, ex.task))
        assert accepts(grammar, ex.plan), ex.plan
