"""A real instruct model (SmolLM2-135M-Instruct, config/models.yaml `smollm2`): skill prompts through its chat
template, the shared system prompt's KV cached once, plan-length limits counted in its tokens; the embedded planner
keeps its raw prompts and limits."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.models import TokenLimits, model_spec
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.policies.timely import options_from_skill_sets
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.scheduler import PlanScheduler
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.token_limits import segment_texts
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.engine.transformers.loader import load_pretrained
from timely_llm_ros.engine.model_setup import model_setup
from timely_llm_ros.engine.models import weights_folder
from timely_llm_ros.engine.prefix_match import common_prefix
from timely_llm_ros.engine.transformers.engine import TransformersEngine
from timely_llm_ros.paths import default_model_dir

SMOL = model_spec("smollm2")
EMBEDDED = model_spec("embedded")
SKILLS = load_skill_sets()
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    return load_pretrained(weights_folder(SMOL, convert=False), "cpu", SMOL.dtype)


@pytest.fixture(scope="module")
def setup(smol):
    return model_setup(SMOL, TransformersEngine(smol), SKILLS)


@pytest.fixture(scope="module")
def embedded():
    return TransformersEngine(load_pretrained(default_model_dir(), "cpu", "float32"))


def greedy(engine: TransformersEngine, gen_id: str, prompt: list[int], n: int) -> list[int]:
    engine.add(gen_id, prompt, n)
    while gen_id not in engine.step([gen_id]).finished:
        pass
    out = engine.output_ids(gen_id)
    engine.release(gen_id)
    return out


def test_a_robot_types_system_prompt_opens_every_request_and_differs_between_robot_types(setup, smol):
    drone, arm = setup.skill_sets["drone"], setup.skill_sets["arm"]
    a = setup.prompts(drone, "find the red kite", "room: attic; objects: kite, trunk")
    b = setup.prompts(drone, "fly up 20 cm", "room: hall; objects: door")
    c = setup.prompts(arm, "find the red kite", "room: attic; objects: kite, trunk")
    shared = setup.prompts.shared_tokens(drone)
    assert a[:shared] == b[:shared] and common_prefix(a, c) < shared
    raw = smol.tokenizer._tok
    system, request = raw.decode(a[:shared]), raw.decode(a[shared:])
    assert "mf(cm: int): move forward by cm centimetres" in system and "od(object: str) -> float" in system
    assert "kite" not in system and "attic" not in system
    assert "scene: room: attic; objects: kite, trunk" in request and "task: find the red kite" in request
    assert request.endswith("<|im_start|>assistant\n")
    # turn-aligned ids are the template's whole text tokenized at once (ChatML separates turns by special tokens)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "scene: x\ntask: y"}]
    text = raw.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert smol.tokenizer.encode_chat(messages) == raw.encode(text, add_special_tokens=False)


def test_bos_comes_once_from_the_template_or_from_the_entry(setup, smol, embedded):
    drone = setup.skill_sets["drone"]
    bos = smol.tokenizer.bos_token_id
    ids = setup.prompts(drone, "find the cat", "room: den")
    assert ids[0] == bos and ids[1] != bos                  # SmolLM2's template opens with <|im_start|> (its BOS)
    forced = model_setup(dataclasses.replace(SMOL, add_bos=True), TransformersEngine(smol), SKILLS)
    assert forced.prompts(drone, "find the cat", "room: den") == ids   # add_bos never doubles it
    raw = model_setup(dataclasses.replace(EMBEDDED, add_bos=True), embedded, SKILLS)
    plain = embedded.encode(SKILLS["drone"].build_prompt("find the cat", "room: den"))
    assert raw.prompts(SKILLS["drone"], "find the cat", "room: den") == [embedded.tokenizer.bos_token_id, *plain]


def test_the_second_request_reuses_the_system_prompts_kv_and_plans_token_identically(smol, setup):
    arm = setup.skill_sets["arm"]
    first = setup.prompts(arm, "put the kettle in the sink", "table: kettle, cup; places: sink, shelf")
    second = setup.prompts(arm, "move the blue scarf to (12, 30)", "table: blue scarf, hat")
    cached = TransformersEngine(smol, prefix_cache_mb=SMOL.prefix_cache_size_mb())
    greedy(cached, "first", first, 2)
    assert cached.prefix_cache.hits == 0
    cached.add("second", second, 12)
    shared = setup.prompts.shared_tokens(arm)
    assert cached.prefill_left("second") <= len(second) - shared      # admission plans with the suffix only
    while "second" not in cached.step(["second"]).finished:
        pass
    assert cached.prefix_cache.hits == 1 and shared <= cached.prefix_cache.reused_tokens < len(second)
    assert cached.output_ids("second") == greedy(TransformersEngine(smol), "alone", second, 12)


def test_limits_are_counted_in_the_models_tokens_and_reach_the_scheduler_and_the_policy(smol, setup):
    encode = smol.tokenizer.encode
    for name, skill_set in setup.skill_sets.items():
        assert setup.limits[name].source == "derived"
        for ex in skill_set.examples:      # the bounds cover every worked example in this model's tokens
            assert skill_set.max_plan_tokens >= len(encode(ex.plan))
            assert all(skill_set.max_segment_tokens >= len(encode(t.strip())) for t in segment_texts(skill_set, ex.plan))
    # SmolLM2 spells numbers digit by digit (more tokens for a drone plan), and has whole words for a chat reply
    assert setup.skill_sets["drone"].max_plan_tokens > SKILLS["drone"].max_plan_tokens
    assert setup.skill_sets["chat"].max_plan_tokens < SKILLS["chat"].max_plan_tokens
    drone = setup.skill_sets["drone"]
    options = options_from_skill_sets(setup.skill_sets)
    assert options["max_segment_tokens"]["drone"] == drone.max_segment_tokens
    engine = TransformersEngine(smol)
    sched = PlanScheduler(engine, make_policy("timely", options=options), setup.skill_sets, load_exec_models(),
                          VirtualClock(), prompts=setup.prompts)
    sched.submit(PlanRequest(req_id="r", agent_id="drone_1", robot_type="drone", task="find the cat",
                             tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, max_new_tokens=10_000))
    assert engine._gens["r"].max_new_tokens == drone.max_plan_tokens
    assert engine._gens["r"].prompt == setup.prompts(drone, "find the cat", "")
    given = model_setup(dataclasses.replace(SMOL, limits={"drone": TokenLimits(7, 70)}), engine, SKILLS)
    assert (given.skill_sets["drone"].max_segment_tokens, given.skill_sets["drone"].max_plan_tokens) == (7, 70)
    assert given.limits["drone"].source == "model entry" and given.limits["arm"].source == "derived"


def test_the_embedded_planner_keeps_its_raw_prompts_and_its_limits(embedded):
    setup = model_setup(EMBEDDED, embedded, SKILLS)
    assert not setup.prompts.chat
    for name, skill_set in SKILLS.items():
        ids = setup.prompts(setup.skill_sets[name], "look for the cat", "room: den; objects: cat")
        assert ids == embedded.encode(skill_set.build_prompt("look for the cat", "room: den; objects: cat"))
        mine = setup.skill_sets[name]
        assert (mine.max_segment_tokens, mine.max_plan_tokens) == (skill_set.max_segment_tokens,
                                                                  skill_set.max_plan_tokens)
    # an entry asking for a chat template its tokenizer lacks gets the raw prompt, and the log says so
    asked = model_setup(dataclasses.replace(EMBEDDED, chat_template=True), embedded, SKILLS)
    assert not asked.prompts.chat and any("no chat template" in line for line in asked.describe())


def test_a_robot_type_the_embedded_planner_was_never_trained_on_gets_a_warning(embedded):
    """The embedded planner knows only the plans of its corpus's robot types: for a team's rover the configure log
    warns, and says what to use instead; the package's own robot types get no warning."""
    own = model_setup(EMBEDDED, embedded, SKILLS)
    assert own.warnings == ()
    rover = load_skill_sets(REPO / "examples" / "rover" / "skills")
    with_rover = model_setup(EMBEDDED, embedded, {**SKILLS, **rover})
    [warning] = with_rover.warnings
    assert "was trained only on drone, arm, chat plans: for rover it has never seen the skills" in warning
    assert "make adapt" in warning
    assert model_setup(SMOL, embedded, {**SKILLS, **rover}).warnings == ()     # a general model: no such claim


def test_limits_below_a_robot_types_own_worked_examples_get_a_warning(embedded):
    """A team's skill set whose max_segment_tokens is under its own examples' longest segment (the newcomer's
    conveyor: "first segment 21 tokens" against a bound of 10) is warned about at configure, naming where to raise
    it. The package's own skill sets get no warning (the test above): a segment holding a loop or conditional
    outgrows the bound by design."""
    rover = load_skill_sets(REPO / "examples" / "rover" / "skills")["rover"]
    tight = {**SKILLS, "rover": rover.with_limits(2, 3)}
    warnings = [w for w in model_setup(EMBEDDED, embedded, tight).warnings if "was trained only" not in w]
    assert len(warnings) == 2, warnings
    assert "robot type rover: max_segment_tokens 2 is below the" in warnings[0]
    assert "in the rover skill set" in warnings[0]
    assert "max_plan_tokens 3 is below the" in warnings[1] and "PLAN_TOO_LONG" in warnings[1]
    entry = dataclasses.replace(EMBEDDED, limits={"drone": TokenLimits(1, 200)})
    [by_entry] = model_setup(entry, embedded, SKILLS).warnings
    assert "robot type drone: max_segment_tokens 1" in by_entry and "the model entry's limits" in by_entry
