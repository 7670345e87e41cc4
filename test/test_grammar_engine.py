"""Grounded decoding in the engines: constrained generations of the transformers engine on SmolLM2-135M-Instruct
and on the embedded planner, token-exact through suspension, host offload, preemption, prompt-KV eviction and
interrupts; the scheduler building each goal's grammar from its robot's skills and its objects."""
from __future__ import annotations

import random

import pytest
import torch

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.core.models import model_spec
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.context import grounded_objects
from timely_llm_ros.core.skills.grammar import plan_grammar
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.engine.grammar import GrammarCompiler, allowed_tokens
from timely_llm_ros.engine.models import weights_folder
from timely_llm_ros.engine.transformers.engine import TransformersEngine
from timely_llm_ros.engine.transformers.loader import load_pretrained
from timely_llm_ros.paths import default_model_dir

SKILLS = load_skill_sets()
TASKS = {   # (robot type, task, scene) on today's raw prompt (core/skills/prompt.py)
    "d1": ("drone", "find a toy under the bed", "room: bedroom; objects: bed, chair, cup"),
    "d2": ("drone", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
    "a1": ("arm", "stack the red block on the blue block", "table: green block, red block, blue block"),
    "a2": ("arm", "sort the fruits", "table: apple, carrot"),
}


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(1)
    return load_pretrained(weights_folder(model_spec("smollm2")), "cpu", "float32")


@pytest.fixture(scope="module")
def compiler(smollm2):
    """Compiled grammars on SmolLM2's tokenizer (the engine's own compiler)."""
    return GrammarCompiler(smollm2.tokenizer, smollm2.model.config.vocab_size, [smollm2.tokenizer.eos_token_id])


# ----------------------------------------------------------------------------- the transformers engine on SmolLM2
def prompt(engine: TransformersEngine, key: str) -> list[int]:
    robot, task, scene = TASKS[key]
    return engine.encode(SKILLS[robot].build_prompt(task, scene))


def grammar(key: str) -> str:
    """The task's grounded grammar: its robot type's skills, the objects its scene lists and its task's phrases."""
    robot, task, scene = TASKS[key]
    return plan_grammar(SKILLS[robot], objects=grounded_objects(scene, task))


def named_objects(key: str, text: str) -> set[str]:
    """The objects a plan for the task names in object arguments."""
    skills = SKILLS[TASKS[key][0]]
    calls = parse(text, skills.skills, skills.statement_forms).skills
    return {a for c in calls for kind, a in zip(skills.skills[c.name].args, c.args) if kind == "object"}


def run_alone(engine: TransformersEngine, gid: str, ids: list[int], max_new: int, gram: str | None) -> list[int]:
    engine.add(gid, ids, max_new, grammar=gram)
    while gid not in engine.step([gid]).finished:
        pass
    out = engine.output_ids(gid)
    engine.release(gid)
    return out


@pytest.fixture(scope="module")
def alone(smollm2):
    """Each task's output run alone and undisturbed, constrained (key) and unconstrained (key + '-raw')."""
    engine = TransformersEngine(smollm2)
    out = {}
    for key in TASKS:
        out[key] = run_alone(engine, key, prompt(engine, key), 32, grammar(key))
        out[key + "-raw"] = run_alone(engine, key + "-raw", prompt(engine, key), 32, None)
    return out


def test_on_the_raw_prompt_smollm2_writes_prose_unconstrained_and_a_grounded_plan_under_the_grammar(smollm2, alone):
    engine = TransformersEngine(smollm2)
    for key in ("d1", "a1"):
        robot, task, scene = TASKS[key]
        skills = SKILLS[robot]
        raw, constrained = engine.decode(alone[key + "-raw"]), engine.decode(alone[key])
        assert parse(raw, skills.skills, skills.statement_forms).problems, raw
        plan = constrained if alone[key][-1] == engine.eos_token_id else constrained[:constrained.rfind(";") + 1]
        assert plan.strip() and not parse(plan, skills.skills, skills.statement_forms).problems, constrained
        assert named_objects(key, plan) <= set(grounded_objects(scene, task)), plan


def suspended_outputs(engine: TransformersEngine, seed: int) -> tuple[dict[str, list[int]], int, int]:
    """Random batches of three constrained generations and an unconstrained one: members left out of a step are
    suspended (preempted mid-output); the outputs, the suspensions and the steps a suspended one's KV was offloaded."""
    rng = random.Random(seed)
    keys = ["d1", "a1", "a2-raw", "d2"]
    for key in keys:
        engine.add(key, prompt(engine, key.removesuffix("-raw")), 32,
                   grammar=None if key.endswith("-raw") else grammar(key))
    done: dict[str, list[int]] = {}
    offloaded = suspended = 0
    while len(done) < len(keys):
        live = [k for k in keys if k not in done]
        chosen = [k for k in live if rng.random() < 0.6] or live[:1]
        for k in live:
            if k in chosen:
                engine.resume(k)
            elif engine._gens[k].prefilled:
                engine.suspend(k)
                suspended += 1
        res = engine.step(chosen)
        offloaded += sum(engine.is_offloaded(k) for k in live if k not in chosen)
        for k in res.finished:
            done[k] = engine.output_ids(k)
            engine.release(k)
    return done, suspended, offloaded


def test_constrained_generations_survive_suspension_offload_and_preemption_token_exact(smollm2, alone):
    """A tiny KV budget moves suspended KV to host memory, and each output equals its own undisturbed run."""
    engine = TransformersEngine(smollm2, kv_budget_mb=0.5)
    done, suspended, offloaded = suspended_outputs(engine, seed=7)
    assert suspended >= 10 and offloaded >= 5
    assert done == {k: alone[k] for k in done} and len(done) == 4
    assert len(engine.tokens.grammars) == 3     # each grounded grammar compiled once

class LayerTrip:
    """An interrupt_check that says "stop" at the n-th layer it is asked about in a step (armed per step)."""

    def __init__(self) -> None:
        self.asked, self.at = 0, None

    def arm(self, at: int | None) -> None:
        self.asked, self.at = 0, at

    def __call__(self) -> bool:
        self.asked += 1
        return self.at is not None and self.asked >= self.at


def interrupted_outputs(engine: TransformersEngine, seed: int) -> tuple[dict[str, list[int]], int]:
    """Three constrained generations and an unconstrained one arriving at different steps, about half the steps
    cut short at a random layer of their decode or prefill forward; the outputs and the steps cut."""
    rng = random.Random(seed)
    layers = engine.model.config.num_hidden_layers
    trip = LayerTrip()
    engine.interrupt_check = trip
    arrivals = {"d1": 0, "a1": 1, "d2-raw": 2, "a2": 4}
    outputs: dict[str, list[int]] = {}
    cut = 0
    for t in range(400):
        for key, at in arrivals.items():
            if at == t:
                engine.add(key, prompt(engine, key.removesuffix("-raw")), 32,
                           grammar=None if key.endswith("-raw") else grammar(key))
        live = [k for k, at in arrivals.items() if at <= t and k not in outputs]
        if not live:
            break
        trip.arm(rng.randrange(1, 2 * layers + 1) if rng.random() < 0.5 else None)
        res = engine.step(live)
        cut += res.interrupted
        for key in res.finished:
            outputs[key] = engine.output_ids(key)
            engine.release(key)
    return outputs, cut


def test_steps_cut_short_at_random_layers_leave_constrained_outputs_token_exact(smollm2, alone):
    outputs, cut = interrupted_outputs(TransformersEngine(smollm2), seed=11)
    assert cut >= 8
    assert outputs == {k: alone[k] for k in outputs} and len(outputs) == 4


def test_the_embedded_planner_decodes_grounded_plans_token_exact_through_suspension_and_interrupts():
    """The embedded planner (its own tokenizer of 1,048 tokens) under each task's grounded grammar: plans that
    parse and name only the task's objects, the same token for token when generations are suspended at random or
    steps cut short at random layers."""
    loaded = load_pretrained(default_model_dir(), "cpu", "float32")
    engine = TransformersEngine(loaded)
    alone = {}
    for key in TASKS:
        alone[key] = run_alone(engine, key, prompt(engine, key), 32, grammar(key))
        alone[key + "-raw"] = run_alone(engine, key + "-raw", prompt(engine, key), 32, None)
        robot, task, scene = TASKS[key]
        text = engine.decode(alone[key])
        plan = text if alone[key][-1] == engine.eos_token_id else text[:text.rfind(";") + 1]   # cut at 32 tokens
        assert not parse(plan, SKILLS[robot].skills, SKILLS[robot].statement_forms).problems, text
        assert named_objects(key, plan) <= set(grounded_objects(scene, task)), text
    assert all(alone[key][-1] == engine.eos_token_id for key in ("d1", "d2"))
    done, suspended, _ = suspended_outputs(engine, seed=3)
    assert suspended >= 5 and done == {k: alone[k] for k in done} and len(done) == 4
    outputs, cut = interrupted_outputs(engine, seed=5)
    assert cut >= 4 and outputs == {k: alone[k] for k in outputs} and len(outputs) == 4


def test_the_interrupt_test_fails_if_a_cut_short_step_advanced_the_grammar(smollm2, alone):
    """Mutation check: an engine that moves a constrained generation's matcher on by one token (one its mask
    allows) when that generation's forward was cut short, as if the step had emitted it, fails the comparison."""
    engine = TransformersEngine(smollm2)
    real_step = engine.step

    def step_that_advances_on_cut_steps(gen_ids):
        before = {g: len(engine._gens[g].output) for g in gen_ids}
        res = real_step(gen_ids)
        if res.interrupted:
            for g in gen_ids:
                gen = engine._gens[g]
                if gen.matcher is not None and len(gen.output) == before[g]:
                    allowed = [t for t in allowed_tokens(gen.matcher, engine.model.config.vocab_size)
                               if t != engine.eos_token_id]
                    if allowed:
                        gen.matcher.consume_token(allowed[0])
        return res

    engine.step = step_that_advances_on_cut_steps
    try:
        outputs, _ = interrupted_outputs(engine, seed=11)
        broken = outputs != {k: alone[k] for k in outputs}
    except EngineError:          # the engine emitted a token the advanced matcher no longer allows
        broken = True
    assert broken


def test_prompt_kv_eviction_keeps_the_grammar_state_wherever_the_kv_lives(smollm2):
    """A constrained generation evicts half its prompt KV after 6 tokens, once while resident and once while
    suspended with its KV offloaded to host: both continue to the same output, a plan the parser accepts."""
    outs = []
    for offload in (False, True):
        engine = TransformersEngine(smollm2, kv_budget_mb=0.01 if offload else None)
        engine.add("g", prompt(engine, "a1"), 32, grammar=grammar("a1"))
        for _ in range(6):
            engine.step(["g"])
        if offload:
            engine.suspend("g")
            assert engine.is_offloaded("g")
        engine.evict_prompt_kv("g", 0.5)
        engine.resume("g")
        while "g" not in engine.step(["g"]).finished:
            pass
        outs.append(engine.output_ids("g"))
    assert outs[0] == outs[1]
    text = engine.decode(outs[0])
    assert not parse(text[:text.rfind(";") + 1], SKILLS["arm"].skills, ("call",)).problems, text


def test_constrained_unconstrained_and_forced_rows_share_a_batch_each_giving_what_it_gives_alone(smollm2, alone):
    engine = TransformersEngine(smollm2)
    forced = engine.encode(" mf(50);tp();")
    engine.add("d1", prompt(engine, "d1"), 32, grammar=grammar("d1"))
    engine.add("a1-raw", prompt(engine, "a1"), 32)
    engine.add("replay", prompt(engine, "d2"), 32, forced_ids=forced, grammar=grammar("d2"))   # replay: not masked
    outputs: dict[str, list[int]] = {}
    while len(outputs) < 3:
        res = engine.step([k for k in ("d1", "a1-raw", "replay") if k not in outputs])
        for k in res.finished:
            outputs[k] = engine.output_ids(k)
    assert outputs == {"d1": alone["d1"], "a1-raw": alone["a1-raw"], "replay": forced}


# ----------------------------------------------------------------------------- the scheduler and the goal flag
def test_a_goal_is_constrained_where_the_server_applies_the_grammar_unless_it_says_unconstrained():
    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    from timely_llm_ros.core.validation import GoalFields, validate_goal

    def constrained(server: bool, unconstrained: bool) -> bool:
        goal = GoalFields("drone_1", "drone", "look for the cat", urgency_class="normal", unconstrained=unconstrained)
        return validate_goal(goal, "r", 0.0, SKILLS, DEFAULT_URGENCY_CLASSES, grammar=server).constrained
    assert [constrained(s, u) for s in (True, False) for u in (False, True)] == [True, False, False, False]


def make_scheduler(loaded):
    import time

    from timely_llm_ros.core.exec_time import load_exec_models
    from timely_llm_ros.core.policies import make_policy
    from timely_llm_ros.core.scheduler import PlanScheduler

    engine = TransformersEngine(loaded)
    return engine, PlanScheduler(engine, make_policy("fcfs", max_batch=4), SKILLS, load_exec_models(), time.monotonic)


def goal_request(rid: str, key: str, **fields):
    """The request of task ``key``'s goal as the server validates it (grammar on), with these goal fields."""
    import time

    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    from timely_llm_ros.core.validation import GoalFields, validate_goal

    robot, task, scene = TASKS[key]
    goal = GoalFields(f"{robot}_1", robot, task, context=scene, urgency_class="normal", **fields)
    return validate_goal(goal, rid, time.monotonic(), SKILLS, DEFAULT_URGENCY_CLASSES, grammar=True)


def run_to_the_end(scheduler) -> tuple[dict, dict[str, list[int]]]:
    """Step the scheduler until every submitted request has ended, each segment run by its robot at once; the
    outcomes and the segment indices sent, by request id."""
    import time

    from timely_llm_ros.core.scheduler import RequestFinished, SegmentReady

    sent: dict[str, list[int]] = {}
    outcomes = {}
    while scheduler.busy():
        events = scheduler.step()
        while events:
            ev = events.pop(0)
            if isinstance(ev, SegmentReady):
                sent.setdefault(ev.req_id, []).append(ev.segment.index)
                now = time.monotonic()
                events += scheduler.on_execution_started(ev.req_id, ev.segment.index, now)
                events += scheduler.on_execution_finished(ev.req_id, ev.segment.index, now)
            elif isinstance(ev, RequestFinished):
                outcomes[ev.req_id] = ev.outcome
    return outcomes, sent


def test_the_scheduler_decodes_constrained_goals_under_their_grammar_and_ends_an_unparsable_plan_invalid_plan(smollm2):
    """On SmolLM2 with the raw prompt, through PlanScheduler (grammars compiled ahead): the constrained arm goal's
    plan is executed segment by segment and ends DONE; the unconstrained drone goal's prose ends INVALID_PLAN,
    naming the problem, without a segment sent, and its outcome says it was unconstrained."""
    from timely_llm_ros.core.errors import ErrorCode

    engine, scheduler = make_scheduler(smollm2)
    scheduler.prepare_grammars()          # as the server does at configure: drone and arm (chat has none)
    assert len(engine.tokens.grammars) == 2
    scheduler.submit(goal_request("arm", "a2"))
    scheduler.submit(goal_request("drone", "d1", unconstrained=True))
    outcomes, sent = run_to_the_end(scheduler)
    arm, drone = outcomes["arm"], outcomes["drone"]
    assert arm.error_code == ErrorCode.NONE and len(sent["arm"]) == len(arm.segments) >= 1, arm.message
    assert not parse(arm.plan_text, SKILLS["arm"].skills, ("call",)).problems and arm.req.constrained
    assert drone.error_code == ErrorCode.INVALID_PLAN and "drone" not in sent and not drone.req.constrained
    assert "stopped parsing as drone skills" in drone.message and "unexpected character" in drone.message


def test_the_scheduler_builds_each_goals_grammar_from_its_robots_skills_and_objects(smollm2):
    """A drone whose executor advertises no goto and a goal that lists its objects: the plan calls only what the
    robot has and names only those objects. A robot that advertises none of its set's actions: the goal is refused
    at once (no plan can act), and nothing of it stays in the scheduler."""
    from timely_llm_ros.core.errors import ErrorCode, RequestError

    _, scheduler = make_scheduler(smollm2)
    request = goal_request("d", "d2", objects=("cat", "sofa"))
    request.skills = tuple(s for s in SKILLS["drone"].skills if s != "g")
    assert request.objects[:2] == ("cat", "sofa")      # the goal's own list, then the task's phrases
    scheduler.submit(request)
    outcome = run_to_the_end(scheduler)[0]["d"]
    calls = parse(outcome.plan_text, SKILLS["drone"].skills).skills
    assert outcome.error_code == ErrorCode.NONE and calls, outcome.message
    assert all(c.name in request.skills for c in calls) and named_objects("d2", outcome.plan_text) <= set(
        request.objects), outcome.plan_text
    idle = goal_request("x", "a1")
    idle.skills = ("wave",)             # the executor advertises none of the arm skill set's skills
    with pytest.raises(RequestError) as refused:
        scheduler.submit(idle)
    assert refused.value.code == ErrorCode.INVALID_TASK and "no action skill" in refused.value.message
    assert scheduler.active() == 0 and not scheduler.busy()


def test_the_process_and_evicting_engines_pass_the_grammar_on():
    """The embedded planner given a drone task under the arm grammar: unconstrained it writes drone skills; through
    a ProcessEngine (the engine in a child process) and an EvictingEngine its constrained output is the in-process
    engine's, an arm plan. (RoutedEngine, the simulator's two-engine wrapper, hands add()'s arguments on whole.)"""
    from timely_llm_ros.core.eviction import EvictingEngine
    from timely_llm_ros.engine.process_engine import ProcessEngine

    arm = SKILLS["arm"]
    loaded = load_pretrained(default_model_dir(), "cpu", "float32")
    local = TransformersEngine(loaded)
    ids = local.encode(SKILLS["drone"].build_prompt("look for the cat", "room: living room; objects: sofa, cat"))
    free = run_alone(local, "free", ids, 40, None)
    reference = run_alone(local, "arm", ids, 40, plan_grammar(arm))
    assert parse(local.decode(free), arm.skills, arm.statement_forms).problems
    assert reference[-1] == local.eos_token_id
    assert not parse(local.decode(reference), arm.skills, arm.statement_forms).problems
    remote = ProcessEngine("transformers", str(default_model_dir()), num_threads=1)
    try:
        remote.prepare_grammar(plan_grammar(arm))    # compiled in the child, ahead of the add
        for engine in (remote, EvictingEngine(TransformersEngine(loaded), lambda gen_id: 0.0)):
            assert run_alone(engine, "arm", ids, 40, plan_grammar(arm)) == reference, type(engine).__name__
    finally:
        remote.close()


def test_greedy_rows_whose_top_token_the_grammar_allows_skip_the_mask_and_emit_the_same_tokens(smollm2):
    """The engine masks a greedy row only when its highest logit is a token the grammar does not allow: the same
    four constrained generations, batched, give the same tokens as with every row masked, and both kinds of rows
    occur."""
    outputs = []
    for every_row in (False, True):
        engine = TransformersEngine(smollm2)
        engine.tokens.grammar_compiler()
        masks = engine.tokens.masks
        if every_row:
            masks.greedy_tokens = lambda logits, matchers: (masks.apply(logits, matchers), logits.argmax(-1).tolist())[1]
        for key in TASKS:
            engine.add(key, prompt(engine, key), 24, grammar=grammar(key))
        done: dict[str, list[int]] = {}
        while len(done) < len(TASKS):
            for key in engine.step([k for k in TASKS if k not in done]).finished:
                done[key] = engine.output_ids(key)
        outputs.append(done)
        if not every_row:
            assert masks.kept_rows >= 10 and masks.masked_rows >= 4
    assert outputs[0] == outputs[1]


def test_a_masked_greedy_row_takes_its_best_allowed_token_from_the_candidates_or_else_through_the_mask(compiler):
    """Rows whose top token the grammar forbids: the best allowed token among the highest logits is the one the
    full mask's argmax gives; a row with no allowed token among them goes through the mask kernel, with the same
    result."""
    from timely_llm_ros.engine.grammar import CANDIDATES, TokenMasks

    vocab = compiler.vocab_size
    matchers = [compiler.matcher(grammar(key)) for key in TASKS][:3]
    masks = TokenMasks(vocab)
    allowed = [allowed_tokens(m, vocab) for m in matchers]
    forbidden = [sorted(set(range(vocab)) - set(a)) for a in allowed]
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(7))
    logits[0, forbidden[0][0]] = 50.0                                  # row 0: an allowed token 2nd-5th best
    logits[0, allowed[0][-1]] = 40.0
    logits[1, forbidden[1][:CANDIDATES + 5]] = 60.0 + torch.arange(CANDIDATES + 5.0)   # row 1: none in the candidates
    logits[2, allowed[2][0]] = 70.0                                    # row 2: its top token is allowed
    reference = logits.clone()
    masks.apply(reference, matchers)
    assert masks.greedy_tokens(logits.clone(), matchers) == reference.argmax(-1).tolist()
    assert (masks.masked_rows, masks.kept_rows, masks.kernel_rows) == (2, 1, 1)
