"""A plan that would fail on the robot is stopped as it is generated, before the statement that would fail is sent:
the interpreter's run-time errors found statically (core/skills/static_check.py), the cap on unrolled calls
(max_plan_calls), and skills the robot's executor does not have (UNKNOWN_SKILL)."""
from __future__ import annotations

import time

import pytest

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SchedulerConfig, SegmentReady
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.core.skills.static_check import PlanChecker
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine

SETS = load_skill_sets()
DRONE = SETS["drone"]
LATENCY = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)

# plans the grammar of the comparison rule accepted and the robot cannot run, with what the check says
FAILING = [
    ("mf(_1);", "read before any statement sets it"),
    ("?iv('cup'){_1=od('cup');}mf(_1);", "may be unset"),
    ("?od('cup')==True{g('cup');}", "compares a float with a bool"),
    ("?p('what colour is the cup?')>3{tp();}", "compares a str with a float"),
    ("_1=tp();?_1==True{l('x');}", "no value"),
    ("?od('cup'){tp();}", "needs a bool"),
    ("?p('which?')<'b'{tp();}", "needs numbers"),
    ("_1=od('cup');?iv('cup'){_1=p('size?');}?_1>2{tp();}", "depends on the branch"),
    ("g(od('cup'));", "g argument 1 must be str"),
    ("mf(p('how far?'));", "mf argument 1 must be int"),
]


class Scene:
    """Answers every query with a value of its declared kind (the cup is in view, 150 cm away)."""

    VALUES = {"bool": True, "float": 150.0, "str": "a"}

    def __call__(self, call):
        spec = DRONE.skills[call.name]
        if spec.is_action:
            if spec.args and spec.args[0] == "int" and not isinstance(call.args[0], (int, float)):
                raise TypeError(f"{call.name} needs a number, got {call.args[0]!r}")
            if spec.args and spec.args[0] in ("str", "object") and not isinstance(call.args[0], str):
                raise TypeError(f"{call.name} needs a name, got {call.args[0]!r}")
            return None
        return self.VALUES[spec.returns]


def run_on_robot(text: str) -> None:
    returns = {n: s.returns for n, s in DRONE.skills.items() if s.returns}
    Interpreter(Scene(), returns).run_segment(parse(text, DRONE.skills).program, PlanState())


@pytest.mark.parametrize("text, says", FAILING)
def test_a_plan_that_fails_on_the_robot_is_named_by_the_static_check(text, says):
    problems = PlanChecker(DRONE.skills).check(parse(text, DRONE.skills).program)
    assert problems and says in problems[0], problems


@pytest.mark.parametrize("text", [t for t, _ in FAILING if "unset" not in t and "p('size" not in t
                                  and "?iv('cup'){_1" not in t])
def test_the_plans_the_check_refuses_do_fail_on_the_robot(text):
    """The check names real failures: each refused plan (whose failure does not depend on the scene) raises on an
    interpreter whose queries answer with their declared kinds."""
    with pytest.raises((PlanError, TypeError)):
        run_on_robot(text)


@pytest.mark.parametrize("text", [
    "_1=od('printer');?_1>200{g('printer');}tp();",
    "s('helmet');?iv('helmet')==True{g('helmet');tp();->'found';}->'not found';",
    "4{mf(100);tc(90);}",
    "2{_1=od('x');mf(_1);}",
    "_1=iv('x');?_1{tp();}?_1==False|od('x')<50.5{mb(20);}",
    "_1=p('which door?');?_1=='left'{ml(50);}->_1;",
    "?iv('x'){_2=1;}_2=3;mf(_2);",
])
def test_plans_that_run_on_every_scene_pass(text):
    assert PlanChecker(DRONE.skills).check(parse(text, DRONE.skills).program) == []
    run_on_robot(text)


def test_every_reference_plan_of_the_evaluation_sets_passes():
    import yaml
    from timely_llm_ros.paths import config_dir
    for robot_type in ("drone", "arm"):
        skills = SETS[robot_type].skills
        for task in yaml.safe_load((config_dir() / "eval" / f"{robot_type}.yaml").read_text())["tasks"]:
            assert PlanChecker(skills).check(parse(task["plan"], skills).program) == [], task["id"]


def test_the_check_carries_the_variables_of_earlier_statements_across_segments():
    seg = DRONE.segmenter()
    assert [s.text for s in seg.feed("_1=od('cup');mf(_1);")] == ["_1=od('cup');mf(_1);"]
    seg.feed("?_1>100{g('cup');}")
    assert seg.error is None
    seg.feed("?_1=='far'{g('cup');}")
    assert "compares a float with a str" in seg.error


def test_the_call_cap_is_counted_before_anything_is_unrolled():
    start = time.perf_counter()
    result = parse("1000{1000{1000{mf(1);}}}", DRONE.skills)
    elapsed = time.perf_counter() - start
    assert result.skills == [] and "more than 1000 skill calls" in result.problems[0]
    assert elapsed < 1.0        # 10^9 calls unrolled would take minutes; this bounds nothing else
    assert parse("10{mf(1);}", DRONE.skills, max_calls=10).problems == []
    assert parse("11{mf(1);}", DRONE.skills, max_calls=10).problems


def test_the_cap_counts_the_whole_plan_across_its_statements():
    seg = DRONE.segmenter(max_calls=5)
    assert len(seg.feed("3{mf(1);}")) == 1
    assert seg.feed("2{tc(1);}") and seg.error is None
    assert seg.feed("tp();") == [] and "more than 5 skill calls" in seg.error


# ----------------------------------------------------------------------------------------------- in the scheduler
def plan_ends(plan: str, robot_skills=None, **config):
    clock = VirtualClock()
    sched = PlanScheduler(SimEngine(LATENCY, clock), make_policy("fcfs", max_batch=4), SETS, load_exec_models(),
                          clock, SchedulerConfig(**config))
    if robot_skills is not None:
        sched.robot_skills = lambda agent: robot_skills
    events = sched.submit(PlanRequest(req_id="r", agent_id="drone_1", robot_type="drone", task="t",
                                      tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, forced_plan=plan))
    sent, outcome = [], None
    for _ in range(2000):
        for ev in events:
            if isinstance(ev, SegmentReady):
                sent.append(ev.segment.text.strip())
                events2 = sched.on_execution_started("r", ev.segment.index, clock())
                events2 += sched.on_execution_finished("r", ev.segment.index, clock())
                events += events2
            elif isinstance(ev, RequestFinished):
                outcome = ev.outcome
        if outcome is not None:
            return sent, outcome
        events = sched.step()
    raise AssertionError("the request did not end")


def test_an_unconstrained_plan_with_a_kind_error_ends_invalid_plan_before_that_statement_is_sent():
    sent, outcome = plan_ends("mf(50);_1=od('cup');?_1==True{g('cup');}tp();")
    assert sent == ["mf(50);"]
    assert outcome.error_code == ErrorCode.INVALID_PLAN and "compares a float with a bool" in outcome.message


def test_a_plan_over_the_call_cap_ends_invalid_plan_before_anything_of_it_is_unrolled_or_sent():
    sent, outcome = plan_ends("tc(90);40{mf(1);tc(1);}", max_plan_calls=50)
    assert sent == ["tc(90);"]
    assert outcome.error_code == ErrorCode.INVALID_PLAN and "more than 50 skill calls" in outcome.message


def test_a_skill_the_robots_executor_lacks_stops_the_plan_before_its_statement_is_sent():
    sent, outcome = plan_ends("mf(50);tc(90);tp();", robot_skills=frozenset({"mf", "tc"}))
    assert sent == ["mf(50);", "tc(90);"]
    assert outcome.error_code == ErrorCode.UNKNOWN_SKILL and "'tp'" in outcome.message
    sent, outcome = plan_ends("tp();mf(50);", robot_skills=frozenset({"mf", "tc"}))
    assert sent == [] and outcome.error_code == ErrorCode.UNKNOWN_SKILL
