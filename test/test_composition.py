"""The composition root (timely_llm_ros/stack.py over core/composition.py): one call builds engine, model setup,
policy and scheduler from typed options, and a live policy change composes the new policy exactly as configure
does. Real parts: the embedded planner on the transformers engine."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.composition import PolicyChoice
from timely_llm_ros.core.eviction import EvictingEngine
from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.models import model_spec
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.stack import EngineChoice, FitChoice, StackOptions, build_stack, load_engine

TASKS = ["search under the chair for a candle", "help me find the wallet", "is there a backpack below the bench?"]
CONTEXT = "room: kitchen; objects: " + ", ".join(f"{c} {o}" for c in ("red", "blue", "old", "small")
                                                for o in ("chair", "bench", "lamp", "plant", "box", "cup"))


@pytest.fixture(scope="module")
def engine_and_options():
    options = StackOptions(model=model_spec("embedded"), engine=EngineChoice("transformers", device="cpu",
                                                                             num_threads=1),
                           policy=PolicyChoice("fcfs", max_batch=4), warm_up=False)
    return load_engine(options.model, options.engine), options


def stack_for(engine_and_options, policy: str):
    engine, options = engine_and_options
    options = StackOptions(model=options.model, engine=options.engine, policy=options.policy.named(policy),
                           warm_up=False)
    # a clock that stands still: TimeBill's ratios depend on the budget left, so both runs see the same one
    return build_stack(options, load_skill_sets(), load_exec_models(), clock=lambda: 0.0, engine=engine)


def serve_burst(scheduler) -> dict[str, float]:
    """Three budgeted requests generated to the end; the prompt-KV eviction ratio each was given."""
    for i, task in enumerate(TASKS):
        scheduler.submit(PlanRequest(f"r{i}", f"drone_{i}", "drone", task, DEFAULT_URGENCY_CLASSES["normal"], 0.0,
                                     context=CONTEXT, max_new_tokens=24, time_budget_s=0.3, dry_run=True))
    for _ in range(200):
        if not scheduler.busy():
            break
        scheduler.step()
    assert not scheduler.busy(), "the burst must finish"
    return dict(scheduler.engine.applied)


def test_a_live_switch_to_timebill_evicts_exactly_as_a_configure_with_timebill(engine_and_options):
    configured = stack_for(engine_and_options, "timebill")
    at_configure = serve_burst(configured.scheduler)
    assert isinstance(configured.scheduler.engine, EvictingEngine)
    assert at_configure and any(ratio > 0 for ratio in at_configure.values())

    switched = stack_for(engine_and_options, "fcfs")
    assert not isinstance(switched.scheduler.engine, EvictingEngine)
    switched.switch_policy("timebill").apply(switched.scheduler)
    assert switched.scheduler.policy.name == "timebill"
    assert serve_burst(switched.scheduler) == at_configure


def test_a_live_switch_away_from_timebill_drives_the_engine_as_loaded(engine_and_options):
    stack = stack_for(engine_and_options, "timebill")
    stack.switch_policy("timely").apply(stack.scheduler)
    assert stack.scheduler.engine is stack.engine and stack.scheduler.policy.name == "timely"


def test_a_bad_policy_name_or_option_fails_before_the_model_loads(engine_and_options):
    _, options = engine_and_options
    with pytest.raises(ValueError, match="unknown policy 'timly'"):
        build_stack(StackOptions(model=options.model, policy=PolicyChoice("timly")), load_skill_sets(),
                    load_exec_models())
    with pytest.raises(ValueError, match="step_prefil_s"):
        build_stack(StackOptions(model=options.model, policy=PolicyChoice("timely", options={"step_prefil_s": 0.1})),
                    load_skill_sets(), load_exec_models())


def test_the_hardware_fit_measured_at_composition_sets_every_timely_step_time(engine_and_options):
    engine, options = engine_and_options
    options = StackOptions(model=options.model, engine=options.engine, policy=PolicyChoice("timely", max_batch=2),
                           fit=FitChoice(enabled=True), warm_up=False)
    stack = build_stack(options, load_skill_sets(), load_exec_models(), engine=engine)
    fitted = stack.fit.policy_options()
    assert stack.policy.token_time_s == fitted["token_time_s"]
    assert stack.policy.gen_time_s["drone"] == fitted["segment_gen_time_s"]["drone"]
    assert any("hardware fit" in line for _, line in stack.report())
    switched = stack.switch_policy("edf-admit")                # a live change keeps the fit's figures
    assert switched.policy.token_time_s == fitted["token_time_s"]
