"""The hardware fit on a real engine (the embedded planner measured on this machine): a class is named exactly when
its ERT is shorter than the measured first segment, with its ERT and the measured time, and scaling such a
class makes it one this engine meets while keeping the shape of its time utility."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.fit import check_classes, scale_classes, unmet_classes
from timely_llm_ros.core.models import model_spec
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.request import Generation, PlanRequest
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.core.urgency import load_urgency_classes

NETWORK_DELAY_S = 0.008


@pytest.fixture(scope="module")
def fitted():
    """The embedded planner composed as the server composes it, warmed up, then measured."""
    from timely_llm_ros.engine.factory import make_engine
    from timely_llm_ros.engine.hardware_fit import fit_engine
    from timely_llm_ros.engine.model_setup import model_setup, setup_engine_options
    from timely_llm_ros.engine.models import weights_folder
    from timely_llm_ros.stack import warm_up

    spec = model_spec("embedded")
    engine = make_engine("transformers", str(weights_folder(spec)), device="cpu", dtype=spec.dtype, num_threads=1,
                         **setup_engine_options(spec))
    setup = model_setup(spec, engine, load_skill_sets())
    for prompt in setup.warm_up_prompts():
        warm_up(engine, prompt)
    fit, check = fit_engine(engine, setup.skill_sets, setup.prompts, load_urgency_classes(), NETWORK_DELAY_S, 4)
    yield fit, check, setup, engine
    engine.close()


def test_a_class_is_unmet_exactly_when_the_slowest_measured_first_segment_overruns_its_ert(fitted):
    """Built around what this machine measured, so the test holds on a fast or a slow machine: a class with twice the
    slowest first segment as its ERT is met, one with half of it is named, and each configured class lands on the
    side its ERT puts it."""
    fit, check, setup, _ = fitted
    assert set(fit.first_segment_s) == set(setup.skill_sets)
    slowest = max(fit.first_segment_s.values()) + NETWORK_DELAY_S
    classes = {"roomy": TimeUtility(ert=2.0 * slowest, alpha=-1.0, beta=1.0, late="drop"),
               "tight": TimeUtility(ert=0.5 * slowest, alpha=-1.0, beta=1.0, late="drop"),
               "patient": TimeUtility(ert=0.0, alpha=0.0, beta=1.0, late="serve")}
    probe = check_classes(classes, fit, NETWORK_DELAY_S)
    assert [u.name for u in probe.unmet] == ["tight"] and len(probe.warnings) == 1
    assert probe.classes == classes                              # warned about, not changed
    configured = load_urgency_classes()
    assert check.classes == configured
    assert sorted(u.name for u in check.unmet) == sorted(n for n, t in configured.items()
                                                         if t.alpha != 0 and slowest > t.ert), fit.describe()
    assert len(check.warnings) == len(check.unmet) and check.scaled == []


def test_a_class_no_engine_can_meet_is_named_with_its_ert_and_the_measured_first_segment(fitted):
    fit, *_ = fitted
    classes = {**load_urgency_classes(), "reflex": TimeUtility(ert=0.001, alpha=-100.0, beta=1.0, late="drop")}
    check = check_classes(classes, fit, NETWORK_DELAY_S)
    assert "reflex" in [u.name for u in check.unmet]
    slowest, took = max(fit.first_segment_s.items(), key=lambda kv: kv[1])
    (warning,) = [w for w in check.warnings if w.startswith("urgency class reflex:")]
    assert warning.startswith(f"urgency class reflex: ERT 0.00 s, one {slowest} first segment takes "
                              f"{took + NETWORK_DELAY_S:.2f} s on this engine")
    assert "DROPPED" in warning and "scale_unmet_classes" in warning
    assert check.classes["reflex"] == classes["reflex"]        # warned about, not changed


def test_scaling_an_unmet_class_makes_it_met_and_keeps_its_zero_crossing_ratio(fitted):
    fit, *_ = fitted
    tight = TimeUtility(ert=0.002, alpha=-500.0, beta=2.0, late="drop")
    unmet = unmet_classes({"tight": tight}, fit.first_segment_s, NETWORK_DELAY_S)
    scaled, lines = scale_classes({"tight": tight}, unmet, factor=2.0)
    new = scaled["tight"]
    assert new.ert == pytest.approx(2.0 * unmet[0].slowest_s)
    assert new.zero_crossing() / new.ert == pytest.approx(tight.zero_crossing() / tight.ert)
    assert (new.beta, new.late) == (tight.beta, tight.late)
    assert unmet_classes(scaled, fit.first_segment_s, NETWORK_DELAY_S) == []
    assert "'tight' scaled" in lines[0] and f"ERT 0.00 -> {new.ert:.2f} s" in lines[0]


def test_the_timely_policy_plans_with_the_fitted_step_times_before_it_has_measured_any(fitted):
    """Before any segment is seen, admission's segment lengths are the worked examples' (in the model's tokens)
    and its WCET's token time is the measured one."""
    fit, _, setup, _ = fitted
    policy = make_policy("timely", options={"max_segment_tokens": {n: ss.max_segment_tokens
                                                                   for n, ss in setup.skill_sets.items()},
                                            **fit.policy_options()})
    req = PlanRequest(req_id="r", agent_id="drone_1", robot_type="drone", task="look for the cat", context="",
                      arrival=0.0, tuf=load_urgency_classes()["normal"], urgency="normal")
    gen = Generation(req=req, prompt_ids=[1, 2, 3], enqueued_at=0.0)
    cap = setup.skill_sets["drone"].max_segment_tokens
    assert policy.segment_tokens(gen) == min(fit.segment_tokens["drone"], cap)
    assert policy.first_segment_tokens(gen) == min(fit.first_segment_tokens["drone"], cap)
    assert policy.token_time_s == fit.token_time_s
    assert policy.segment_time("drone") == fit.segment_gen_time_s["drone"]


def test_a_class_found_unmet_is_checked_again_on_a_second_measurement_and_a_met_one_is_not(fitted):
    """The first measurement is about a second of the machine: a moment of other load would change the classes
    served. So an unmet verdict is taken again on the faster of each kind of step of two measurements."""
    from timely_llm_ros.engine.hardware_fit import fit_engine

    _, _, setup, engine = fitted
    roomy = {"roomy": TimeUtility(ert=100.0, alpha=-0.01, beta=1.0, late="drop")}      # met on any machine
    once, once_check = fit_engine(engine, setup.skill_sets, setup.prompts, roomy, NETWORK_DELAY_S, 4)
    assert once.measured.rounds == 1 and not once_check.unmet
    classes = {**roomy, "reflex": TimeUtility(ert=0.001, alpha=-100.0, beta=1.0, late="drop")}  # met on none
    again, again_check = fit_engine(engine, setup.skill_sets, setup.prompts, classes, NETWORK_DELAY_S, 4)
    assert again.measured.rounds == 2 and "twice" in again.describe()[0]
    assert [u.name for u in again_check.unmet] == ["reflex"]


def test_two_measurements_combine_into_the_faster_of_each_kind_of_step():
    from timely_llm_ros.core.fit import Measurements, TypeTiming
    from timely_llm_ros.engine.hardware_fit import fastest

    a = Measurements(types={"drone": TypeTiming(800, 24, prefill_s=0.099, decode_s=0.0087)},
                     batch_decode_s={1: 0.0087, 4: 0.030}, seconds=1.5, engine="E")
    b = Measurements(types={"drone": TypeTiming(800, 24, prefill_s=0.075, decode_s=0.0110)},
                     batch_decode_s={1: 0.0110, 4: 0.026}, seconds=1.6, engine="E")
    both = fastest(a, b)
    assert (both.types["drone"].prefill_s, both.types["drone"].decode_s) == (0.075, 0.0087)
    assert both.batch_decode_s == {1: 0.0087, 4: 0.026}
    assert both.rounds == 2 and both.seconds == pytest.approx(3.1)
