"""Properties of random plans of every statement-mode robot type (the package's drone and arm, the example rover),
as the planner server cuts them and a robot runs them:

- the segmenter never splits a block, however the text arrives (each segment parses on its own);
- the interpreter runs every plan in a random world (each query answers a random value of its kind) without a
  run-time error;
- the skills a segment executes are a subsequence of its worst case;
- the estimator's expected time is within its worst case, and once it has seen a run its worst case bounds it.

`make test` runs TIMELY_PLAN_EXAMPLES (default 40) plans per robot type; `make stress` at least 10,000 in all
(tools/stress: the plans phase)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_strategies import plans, with_cuts
from timely_llm_ros.core.plan_time import PlanTimeEstimator
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.robot_types import load_robot_types
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanState, SegmentRun
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.core.skills.program import Var, worst_case_calls

TYPES = load_robot_types(Path(__file__).resolve().parent.parent / "examples" / "rover")
ROBOT_TYPES = sorted(n for n, s in TYPES.skill_sets.items() if s.mode == "statements")
EXAMPLES = int(os.environ.get("TIMELY_PLAN_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def segments(skill_set, deltas: list[str]) -> tuple[list[str], str]:
    """The segment texts the server sends for a plan fed in these deltas (trailing statements without an action as
    the last one), and the segmenter's error."""
    seg = skill_set.segmenter()
    texts = [s.text for d in deltas for s in seg.feed(d)]
    last = seg.finish()
    if last is not None:
        texts.append(last.text)
    if seg.error is None and seg.pending.strip():
        texts.append(seg.pending)
    return texts, seg.error


class RandomWorld:
    """Answers each query with a random value of the kind its skill declares; actions do nothing."""

    def __init__(self, skill_set, rng: random.Random) -> None:
        self.skill_set, self.rng = skill_set, rng

    def __call__(self, call: SkillCall):
        spec = self.skill_set.skills[call.name]
        for kind, arg in zip(spec.args, call.args):   # a skill gets arguments of its kinds
            assert kind != "int" or (isinstance(arg, (int, float)) and not isinstance(arg, bool)), (call, arg)
            assert kind != "str" or isinstance(arg, str), (call, arg)
        if spec.is_action:
            return None
        return {"bool": lambda: self.rng.random() < 0.5, "float": lambda: self.rng.uniform(0, 400),
                "str": lambda: self.rng.choice(["yes", "no", "left", "cup"])}[spec.returns]()


def run(skill_set, texts: list[str], rng: random.Random) -> list[tuple[list, SegmentRun]]:
    """Each segment's statements and what running it did, until the plan returns."""
    returns = {n: s.returns for n, s in skill_set.skills.items() if s.returns}
    interpreter, state, out = Interpreter(RandomWorld(skill_set, rng), returns), PlanState(), []
    for index, text in enumerate(texts):
        program = parse(text, skill_set.skills, skill_set.statement_forms).program
        out.append((program, interpreter.run_segment(program, state, index)))
        if state.returned:
            break
    return out


def is_subsequence(executed: list[SkillCall], worst: list[SkillCall]) -> bool:
    """Each executed call matches the next worst-case call of its name whose literal arguments it has."""
    it = iter(worst)
    return all(any(w.name == c.name and all(isinstance(a, (Var, SkillCall)) or a == b
                                            for a, b in zip(w.args, c.args)) for w in it) for c in executed)


def segmenter_never_splits_a_block(skill_set, text: str, deltas: list[str]) -> list[str]:
    """However the text arrives, the same segments, rejoining to it, each one parsing on its own (a cut inside a
    loop or conditional would leave a piece that does not); returns them."""
    texts, error = segments(skill_set, deltas)
    assert error is None, (text, error)
    assert "".join(texts) == text
    assert texts == segments(skill_set, [text])[0]
    for piece in texts:
        assert parse(piece, skill_set.skills, skill_set.statement_forms).problems == [], (text, piece)
    return texts


def executed_is_a_subsequence_of_the_worst_case(text: str, program, ran: SegmentRun) -> None:
    assert is_subsequence(ran.executed, worst_case_calls(program)), (text, ran.executed)


def estimate_within_worst_case_and_worst_case_bounds_a_seen_run(robot_type: str, model, estimator, text: str,
                                                                 program, variables: dict, ran: SegmentRun) -> None:
    before = dict(variables)
    times = estimator.estimate(robot_type, model, program, variables)
    assert 0.0 <= times.expected <= times.worst + 1e-9, text
    assert estimator.observe(robot_type, model, program, before, ran.executed), (text, ran.executed)
    seen = estimator.estimate(robot_type, model, program, dict(before))
    assert model.min_time(ran.executed) <= seen.worst + 1e-9, (text, ran.executed)


@pytest.mark.parametrize("robot_type", ROBOT_TYPES)
def test_random_plans_are_cut_whole_run_without_error_and_timed_within_their_worst_case(robot_type):
    """Each random plan: cut by the segmenter (never inside a block), run segment by segment in a random world by
    the interpreter (no run-time error: PlanError would fail here), each segment executing a subsequence of its
    worst case, and timed by the estimator within its worst case."""
    skill_set = TYPES.skill_sets[robot_type]
    model = TYPES.exec_models[skill_set.exec_profile]

    @SETTINGS
    @given(with_cuts(plans(skill_set)), st.randoms(use_true_random=False))
    def check(case, rng):
        text, deltas = case
        texts = segmenter_never_splits_a_block(skill_set, text, deltas)
        estimator, variables = PlanTimeEstimator(), {}
        for program, ran in run(skill_set, texts, rng):
            executed_is_a_subsequence_of_the_worst_case(text, program, ran)
            estimate_within_worst_case_and_worst_case_bounds_a_seen_run(robot_type, model, estimator, text, program,
                                                                        variables, ran)
    check()
