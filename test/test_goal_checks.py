"""Goal conditions judged on hand-made plans run through the robot's interpreter in the task's scenes
(evaluation/goals.py, goal_checks.py): plans other than the reference that do the task pass, plans that do not
(fly toward the hazard, name the objects without picking them, answer without looking) fail, and the five
measures and their rates say so."""
from __future__ import annotations

import math

import pytest

from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.evaluation.evalset import EvalTask, load_eval_tasks
from timely_llm_ros.evaluation.goal_checks import check_goal, goal_rates, hallucinated_arguments
from timely_llm_ros.evaluation.goals import (Approach, Avoid, Check, Either, FlightPath, GoalCondition, Missing,
                                             PhotosAround, Photograph, Placed, Tool, answer_polarity, names_object,
                                             read_goal)

SETS = load_skill_sets()


def task(robot_type: str, scene: str, text: str, goal: GoalCondition) -> EvalTask:
    return EvalTask(id="t", robot_type=robot_type, kind="k", split="test", urgency="normal", scene=scene, task=text,
                    plan="", key_objects=(), key_skills=("tp",), goal=goal)


def judged(t: EvalTask, plan: str):
    return check_goal(t, plan, SETS[t.robot_type])


FIND_SCARF = task("drone", "room: bedroom; objects: phone, thermos", "spot the scarf", Photograph("scarf"))


@pytest.mark.parametrize("plan, achieved, runs", [
    ("s('scarf');?iv('scarf')==True{g('scarf');tp();->'found';}->'not found';", True, True),
    ("s('scarf');g('scarf');tp();", True, True),            # not the reference, does the task
    ("sa('where is the scarf?');tp();", True, True),
    ("g('scarf');tp();", False, False),                      # it has never seen the scarf: the goto fails
    ("s('scarf');", False, True),                            # found it, took no picture
    ("g('phone');tp();->'found';", False, True),             # a picture of something else
])
def test_find_needs_a_picture_with_the_target_in_view(plan, achieved, runs):
    check = judged(FIND_SCARF, plan)
    assert (check.achieved, check.runs) == (achieved, runs), check.why()


def test_a_run_time_error_says_what_the_robot_could_not_do():
    check = judged(FIND_SCARF, "g('scarf');tp();")
    assert "has not seen 'scarf'" in check.why() and check.runs_by_variant[0].error


EITHER = task("drone", "room: hall; objects: lamp", "keys or wallet?", Either(("keys", "wallet")))


@pytest.mark.parametrize("plan, achieved", [
    ("s('keys');?iv('keys')==True{g('keys');tp();->'keys';}s('wallet');?iv('wallet')==True{g('wallet');tp();"
     "->'wallet';}->'none';", True),
    ("s('keys');?iv('keys')==True{->'found the keys';}s('wallet');?iv('wallet')==True{->'found the wallet';}"
     "->'nothing';", True),
    ("->'keys';", False),                                             # answers without looking
    ("s('keys');?iv('keys')==True{->'keys';}->'none';", False),       # misses the wallet when only it is there
    ("s('keys');?iv('keys')==True{->'keys';}s('wallet');->'found';", False),   # says found with nothing there
])
def test_either_reports_what_is_there_in_every_variant(plan, achieved):
    check = judged(EITHER, plan)
    assert [r.variant for r in check.runs_by_variant] == ["keys there", "wallet there", "none there"]
    assert check.achieved == achieved, check.why()


ON_SHELF = task("drone", "room: office; objects: shelf, chair", "is my cup on the shelf?", Check("cup", "on", "shelf"))
UNDER_BED = task("drone", "room: bedroom; objects: bed, lamp", "look under the bed for the toy",
                 Check("toy", "under", "bed"))
BEHIND_SOFA = task("drone", "room: den; objects: sofa", "is the sock behind the sofa?", Check("sock", "behind", "sofa"))


@pytest.mark.parametrize("t, plan, achieved", [
    (ON_SHELF, "g('shelf');?iv('cup')==True{tp();->'yes';}->'no';", True),
    (ON_SHELF, "g('shelf');_1=iv('cup');->_1;", True),                        # returns True / False
    (ON_SHELF, "?iv('cup')==True{->'yes';}->'no';", False),                  # too far to recognise a cup
    (ON_SHELF, "g('shelf');->'yes';", False),                                # yes whether it is there or not
    (UNDER_BED, "g('bed');md(60);s('toy');?iv('toy')==True{tp();->'found';}->'not found';", True),
    (UNDER_BED, "g('bed');md(20);s('toy');?iv('toy')==True{tp();->'found';}->'not found';", False),  # not low enough
    (BEHIND_SOFA, "g('sofa');mr(100);mf(100);tu(90);s('sock');?iv('sock')==True{tp();->'yes';}->'no';", True),
    (BEHIND_SOFA, "g('sofa');mu(100);?iv('sock')==True{tp();->'yes';}->'no';", True),   # over the top
    (BEHIND_SOFA, "g('sofa');s('sock');?iv('sock')==True{tp();->'yes';}->'no';", False),  # the sofa hides it
])
def test_a_check_is_answered_right_with_the_object_there_and_without_it(t, plan, achieved):
    check = judged(t, plan)
    assert len(check.runs_by_variant) == 2 and check.achieved == achieved, check.why()


SCISSORS = task("drone", "room: study; objects: scissors, cup", "something for cutting paper?",
                Tool(("scissors", "knife")))
NO_TOOL = task("drone", "room: study; objects: cup, rug", "something for cutting paper?", Tool(("scissors", "knife")))


@pytest.mark.parametrize("t, plan, achieved", [
    (SCISSORS, "g('scissors');tp();->'scissors';", True),
    (SCISSORS, "->'scissors';", True),                          # named: the user knows what to use
    (SCISSORS, "g('cup');tp();->'cup';", False),
    (NO_TOOL, "sa('what can be used for cutting paper?');rp();", True),
    (NO_TOOL, "s('knife');?iv('knife')==True{g('knife');tp();->'knife';}->'none here';", True),
    (NO_TOOL, "g('cup');tp();", False),                         # flies to something that would not do
    (NO_TOOL, "->'none';", False),                              # did not look
])
def test_a_tool_is_one_that_serves_or_none_after_looking(t, plan, achieved):
    assert judged(t, plan).achieved == achieved, judged(t, plan).why()


POLE = task("drone", "pole on the left, 120 cm away", "prevent a collision with the pole", Avoid("pole"))
BIRD = task("drone", "bird below, 120 cm away", "evade the bird", Avoid("bird"))


@pytest.mark.parametrize("t, plan, achieved, toward", [
    (POLE, "mr(80);mu(40);", True, False),
    (POLE, "tc(90);mf(80);", True, False),            # another way to go right
    (POLE, "g('pole');tp();", False, True),           # the demo's plan: flies to the pole
    (POLE, "ml(30);mr(100);", False, True),
    (POLE, "mu(10);", False, False),                  # not toward it, but hardly away
    (BIRD, "mu(80);mr(40);", True, False),
    (BIRD, "md(50);", False, True),
])
def test_avoid_fails_on_any_move_toward_the_hazard_and_needs_distance_gained(t, plan, achieved, toward):
    check = judged(t, plan)
    assert (check.achieved, check.moved_toward) == (achieved, toward), check.why()


APPROACH = task("drone", "room: hall; objects: door, clock", "if the clock is beyond 200 cm fly to it, then a photo",
                Approach("clock", 200))


@pytest.mark.parametrize("plan, achieved", [
    ("_1=od('clock');?_1>200{g('clock');}tp();", True),
    ("?od('clock')<=200{tp();}?od('clock')>200{mf(250);tp();}", True),
    ("g('clock');tp();", False),     # flies to it also when it is near
    ("tp();", False),                # photographs it from afar
])
def test_approach_flies_only_when_the_object_is_beyond_the_distance(plan, achieved):
    check = judged(APPROACH, plan)
    assert [r.variant for r in check.runs_by_variant] == ["clock 300 cm ahead", "clock 100 cm ahead"]
    assert check.achieved == achieved, check.why()


ROOM = "room: hall; objects: door"


@pytest.mark.parametrize("goal, plan, achieved", [
    (PhotosAround(4), "4{tc(90);tp();}", True),
    (PhotosAround(4), "4{tu(90);tp();}", True),
    (PhotosAround(4), "3{tc(90);tp();}", False),
    (PhotosAround(4), "4{tc(45);tp();}", False),
    (PhotosAround(4), "4{mf(100);tc(90);tp();}", False),
    (FlightPath(400, round(100 * math.sqrt(2))), "4{mf(100);tc(90);}", True),
    (FlightPath(400, round(100 * math.sqrt(2))), "mf(100);ml(100);mb(100);mr(100);", True),
    (FlightPath(400, round(100 * math.sqrt(2))), "4{mf(200);tc(90);}", False),
    (FlightPath(400, round(100 * math.sqrt(2))), "mf(100);mb(100);mf(100);mb(100);", False),   # no square
    (FlightPath(600, 100), "3{mf(100);mb(100);}", True),
])
def test_loops_are_judged_by_the_pictures_and_the_path_they_make(goal, plan, achieved):
    check = judged(task("drone", ROOM, "loop", goal), plan)
    assert check.achieved == achieved, check.why()


PRODUCE = "table: kale, mango, pear; baskets: fruit basket, vegetable basket"
SORT = task("arm", PRODUCE, "sort the produce",
            Placed((("kale", "vegetable basket"), ("mango", "fruit basket"), ("pear", "fruit basket"))))
ONLY_FRUIT = task("arm", PRODUCE, "only the fruit", Placed((("mango", "fruit basket"), ("pear", "fruit basket")),
                                                          ("kale",)))
STACK = task("arm", "table: red cube, blue cube, green cube", "red on blue, green on red",
             Placed((("red cube", "blue cube"), ("green cube", "red cube"))))
AT = task("arm", "table: cup, pen", "move the cup to (30, 40)", Placed((("cup", (30.0, 40.0)),)))


@pytest.mark.parametrize("t, plan, achieved, runs", [
    (SORT, "gt('kale');pi('kale');gt('vegetable basket');dr();gt('mango');pi('mango');gt('fruit basket');dr();"
           "gt('pear');pi('pear');gt('fruit basket');dr();", True, True),
    (SORT, "tk('pear');gt('fruit basket');dr();tk('kale');gt('vegetable basket');dr();tk('mango');gt('pear');dr();",
     True, True),                                     # the mango on the pear, in the fruit basket
    (SORT, "gt('kale');gt('mango');dr();", False, True),              # names them, picks nothing
    (SORT, "pi('kale');gt('vegetable basket');dr();", False, False),   # the gripper was not above the kale
    (ONLY_FRUIT, "tk('mango');gt('fruit basket');dr();tk('pear');gt('fruit basket');dr();", True, True),
    (ONLY_FRUIT, "tk('mango');gt('fruit basket');dr();tk('pear');gt('fruit basket');dr();tk('kale');"
                 "gt('vegetable basket');dr();", False, True),          # moved the kale, which was to stay
    (STACK, "tk('red cube');gt('blue cube');dr();tk('green cube');gt('red cube');dr();", True, True),
    (STACK, "tk('green cube');gt('red cube');dr();tk('red cube');gt('blue cube');dr();", False, False),  # top first
    (STACK, "tk('red cube');gt('blue cube');dr();tk('green cube');gt('blue cube');dr();", True, True),  # lands on red
    (AT, "tk('cup');mv(30, 40);dr();", True, True),
    (AT, "tk('cup');mv(40, 30);dr();", False, True),
    (AT, "tk('cup');mv(30, 40);", False, True),                        # still in the gripper
])
def test_arm_goals_are_the_final_placements(t, plan, achieved, runs):
    check = judged(t, plan)
    assert (check.achieved, check.runs) == (achieved, runs), check.why()


NO_WRENCH = task("arm", "table: red cube, blue bowl; places: tray", "put the wrench in the tray", Missing("wrench"))


@pytest.mark.parametrize("plan, achieved, runs", [
    ("sc('wrench');", True, True),                                                 # the scan finds none: stop
    ("sc('wrench');gt('red cube');pi('red cube');gt('tray');dr();", True, True),   # it stops before the lift
    ("sc('red cube');", True, True),                                               # moves nothing
    ("gt('red cube');pi('red cube');gt('tray');dr();", False, True),               # moves another object
    ("tk('red cube');", False, True),                                              # holds one
    ("sc('hammer');", False, False),            # a scan for something else the table lacks is a plain failure
])
def test_an_object_the_table_lacks_is_looked_for_and_nothing_moves(plan, achieved, runs):
    check = judged(NO_WRENCH, plan)
    assert (check.achieved, check.runs) == (achieved, runs), check.why()
    assert "wrench" not in check.hallucinated              # the object the task names is no hallucination


def test_a_missing_object_stays_missing_from_the_scene_and_must_be_sought():
    assert judged(NO_WRENCH, "sc('wrench');").roles is True
    assert judged(NO_WRENCH, "sc('red cube');").roles is False
    check = judged(NO_WRENCH, "sc('wrench');")
    assert check.runs_by_variant[0].ended_with.startswith("failed: sc('wrench')")   # the robot's own report
    with pytest.raises(ValueError, match="listed"):
        Missing("red cube").variants(["red cube", "blue bowl"])


def test_roles_count_what_a_plan_does_with_each_key_object_not_that_it_names_it():
    assert judged(SORT, "gt('kale');gt('mango');dr();").roles is False
    picked_not_dropped = "tk('kale');tk('mango');tk('pear');dr();"
    assert judged(SORT, picked_not_dropped).roles is False
    assert judged(SORT, "tk('kale');gt('vegetable basket');dr();tk('mango');gt('fruit basket');dr();tk('pear');"
                        "gt('fruit basket');dr();").roles is True
    assert judged(AT, "sc('cup');gt('cup');pi('cup');mv(30, 40);dr();").roles is True
    assert judged(AT, "tk('cup');mv(30, 40);gt('pen');dr();").roles is False    # not dropped at the point
    assert judged(FIND_SCARF, "s('scarf');tp();->'scarf';").roles is False     # never approached
    assert judged(POLE, "mr(80);").roles is None                               # no object has a role in avoiding


def test_hallucinated_arguments_are_object_arguments_naming_nothing_in_the_scene():
    check = judged(SORT, "gt('kale');gt('the Mango');sc('apple');gt('banana basket');dr();")
    assert check.hallucinated == ("apple", "banana basket") and not check.runs
    drone = SETS["drone"]
    assert hallucinated_arguments(drone, "l('unicorn');p('is it a unicorn?');g('unicorn')", {"cat"}) == ("unicorn",)
    assert judged(FIND_SCARF, "s('scarf');g('scarf');tp();").hallucinated == ()   # out of view, but in the scene


def test_a_skill_sets_own_context_labels_decide_what_is_in_the_scene(tmp_path):
    """A team's arm skill set with ``place_labels: [cell]``: "cell: 4" names where the arm is, so a plan that scans
    for "4" names nothing in the scene, as grounded decoding would have it, and its scan finds nothing; the
    package's arm reads 4 as an item on the table."""
    import yaml

    from timely_llm_ros.paths import config_dir

    arm = yaml.safe_load((config_dir() / "skills" / "arm.yaml").read_text(encoding="utf-8"))
    (tmp_path / "arm.yaml").write_text(yaml.safe_dump({**arm, "place_labels": ["cell"]}))
    team_arm = load_skill_sets(tmp_path)["arm"]
    t = task("arm", "cell: 4; table: cup; places: tray", "put the cup on the tray", Placed((("cup", "tray"),)))
    plan = "sc('4');tk('cup');gt('tray');dr();"
    team, package = check_goal(t, plan, team_arm), check_goal(t, plan, SETS["arm"])
    assert team.hallucinated == ("4",) and not team.runs
    assert package.hallucinated == () and package.achieved


def test_a_plan_the_server_stopped_neither_parses_nor_runs_nor_achieves():
    check = check_goal(FIND_SCARF, "s('scarf');g('scarf');tp();", SETS["drone"], ended=False)
    assert (check.parses, check.runs, check.achieved) == (False, False, False) and check.why() == "does not parse"


def test_rates_are_shares_of_plans_and_roles_only_over_tasks_that_give_roles():
    checks = [judged(SORT, "gt('kale');gt('mango');dr();"), judged(POLE, "mr(80);mu(40);"),
              judged(POLE, "g('pole');"), check_goal(FIND_SCARF, "x", SETS["drone"], ended=False)]
    r = goal_rates(checks)
    assert r["n"] == 4 and r["parses"] == 0.75 and r["runs"] == 0.75 and r["achieved"] == 0.25
    assert r["n_roles"] == 2 and r["roles"] == 0.0 and r["moved_toward"] == 1 and r["hallucinated"] == 0.0
    assert math.isnan(goal_rates([])["achieved"])


@pytest.mark.parametrize("value, polarity", [
    ("yes", 1), ("found", 1), ("True", 1), ("not found", -1), ("no", -1), ("none", -1), ("False", -1),
    ("keys", 0), (None, 0)])
def test_a_returned_value_says_yes_no_or_names_something(value, polarity):
    assert answer_polarity(value) == polarity


def test_a_value_names_an_object_by_whole_words():
    assert names_object("found the Coin Purse", "coin purse") and not names_object("purses", "purse")


def test_every_goal_of_the_set_reads_back_from_its_yaml_form():
    for t in load_eval_tasks():
        assert read_goal(t.goal.to_config()) == t.goal, t.id


@pytest.mark.parametrize("cfg, fragment", [
    ({"photograph": "cat", "avoid": "dog"}, "exactly one of"),
    ({"check": "cat"}, "exactly one of on, under, behind"),
    ({"placed": {"cup": [1]}}, "coordinates are [x, y]"),
    ({"path": {"length_cm": 100}}, "needs length_cm and farthest_cm"),
    ({"photos_around": 0}, "whole number >= 1"),
    ({"avoid": "dog", "speed": 3}, "unknown fields ['speed']"),
])
def test_a_malformed_goal_is_refused_with_what_it_takes(cfg, fragment):
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        read_goal(cfg)


DEMO_PLANS = {   # one plan per demo task (config/fleet_tasks.yaml) that does it, and the plans issue 35 read
    "look for the cat": ("s('cat');?iv('cat')==True{g('cat');tp();->'cat';}->'none';", "g('cat');tp();"),
    "a child is too close, avoid injuring them": ("mb(80);mu(40);", "g('child');"),
    "check for keys or wallet": ("s('keys');?iv('keys')==True{g('keys');tp();->'keys';}?iv('wallet')==True"
                                 "{g('wallet');tp();->'wallet';}->'none';", "g('keys');"),
    "prevent a collision with the pole": ("mr(80);mu(40);", "mf(50);tp();"),
    "find a toy under the bed": ("g('bed');md(60);s('toy');?iv('toy')==True{tp();->'found';}->'not found';",
                                 "g('toy');tp();"),
    "evade the bird": ("md(80);ml(40);", "g('bird');tp();"),
    "check the book on the cabinet": ("g('cabinet');?iv('book')==True{tp();->'yes';}->'no';", "->'no';"),
    "find a tool for cutting paper": ("g('scissors');tp();->'scissors';", "g('cup');tp();->'cup';"),
    "stack the red block on the blue block and the green block on top":
        ("tk('red block');gt('blue block');dr();tk('green block');gt('red block');dr();",
         "gt('green block');gt('blue block');pi('green block');gt('blue block');dr();"),
    "clean the desk": ("tk('paper');gt('trash bin');dr();tk('can');gt('trash bin');dr();tk('tissue');"
                       "gt('trash bin');dr();", "tk('paper');gt('drawer');dr();"),
    "sort the fruits and vegetables": ("tk('apple');gt('fruit basket');dr();tk('carrot');gt('vegetable basket');"
                                       "dr();tk('banana');gt('fruit basket');dr();", "gt('apple');gt('carrot');dr();"),
    "put the cup at (40, 20)": ("sc('cup');gt('cup');pi('cup');mv(40, 20);dr();", "gt('cup');pi('cup');mv(20, 40);dr();"),
}


def test_the_demo_tasks_are_judged_on_what_the_robot_reports_it_ran_in_its_staged_scene():
    """What fleet_workload does: the first variant's scene, the robot's executed calls replayed on it, its value."""
    import yaml

    from timely_llm_ros.core.skills.context import parse_context
    from timely_llm_ros.core.skills.interpreter import format_value
    from timely_llm_ros.evaluation.goal_checks import judge_robot_run
    from timely_llm_ros.evaluation.scene_builder import variant_scene
    from timely_llm_ros.evaluation.scene_run import run_plan
    from timely_llm_ros.paths import config_dir

    fleet = yaml.safe_load((config_dir() / "fleet_tasks.yaml").read_text(encoding="utf-8"))
    judged_tasks = [(robot, t) for robot in ("drone", "arm") for t in fleet[robot]]
    assert {t["task"] for _, t in judged_tasks} == set(DEMO_PLANS) and all("goal" in t for _, t in judged_tasks)
    for robot, entry in judged_tasks:
        goal = read_goal(entry["goal"])
        variant = goal.variants(parse_context(entry["context"]).objects)[0]
        verdicts = []
        for plan in DEMO_PLANS[entry["task"]]:
            scene = variant_scene(robot, entry["context"], goal, variant)
            robot_scene = scene.copy()                 # the robot runs it; the workload replays what it reports
            run = run_plan(SETS[robot], plan, robot_scene)
            value = format_value(run.value) if run.returned else None
            verdicts.append(judge_robot_run(goal, variant, scene, robot, run.executed, value, run.error).achieved)
        assert verdicts == [True, False], (entry["task"], verdicts)


def test_object_arguments_are_the_skill_sets_object_kind_whatever_the_argument_is_called():
    """A team's skill set names its arguments as it likes: an object argument called ``item`` is one, a str argument
    called ``target`` is not (the kind decides, as it does for grounded decoding)."""
    from timely_llm_ros.adapt.corpus import object_arguments as corpus_objects
    from timely_llm_ros.core.skills.skill_set import SkillSet
    from timely_llm_ros.core.skills.spec import SkillSpec

    rover = SkillSet("rover", "statements", [
        SkillSpec("fetch", "fetch", ("object",), "action", arg_names=("item",)),
        SkillSpec("say", "say", ("str",), "action", arg_names=("target",)),
    ], "rover", 20, 200)
    plan = "fetch('wrench');say('bolt');"
    assert hallucinated_arguments(rover, plan, {"hammer"}) == ("wrench",)
    assert hallucinated_arguments(rover, plan, {"wrench"}) == ()
    assert corpus_objects(plan, rover) == ["wrench"]
