"""Grammar-constrained decoding: the skill-set grammar (core/skills/grammar.py) against the project's parser and
plans, and constrained generations of the transformers engine on SmolLM2-135M-Instruct, token-exact through
suspension, host offload, preemption, prompt-KV eviction and interrupts."""
from __future__ import annotations

import random

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_llm_ros.evaluation.evalset import load_eval_tasks
from timely_llm_ros.core.models import model_spec
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.grammar import max_statements, plan_grammar
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engine.grammar import GrammarCompiler
from timely_llm_ros.engine.transformers.loader import load_pretrained
from timely_llm_ros.engine.models import weights_folder
from timely_llm_ros.engine.transformers.engine import TransformersEngine
from tools.embedded_planner.corpus import generate
from timely_llm_ros.paths import config_dir, default_model_dir

SKILLS = load_skill_sets()
ROBOTS = ("drone", "arm")
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
    """Compiled grammars on SmolLM2's tokenizer (the engine's own wrapper around xgrammar)."""
    return GrammarCompiler(smollm2.tokenizer, smollm2.model.config.vocab_size, [smollm2.tokenizer.eos_token_id])


def accepts(compiler: GrammarCompiler, robot: str, text: str, max_plan_tokens: int | None = None) -> bool:
    """Whether the robot type's grammar takes ``text`` whole (with EOS allowed at its end)."""
    m = compiler.matcher(plan_grammar(SKILLS[robot], max_plan_tokens))
    return m.accept_string(text) and m.is_completed()


def embedded_fleet_plans() -> list[tuple[str, str]]:
    """The plans the embedded planner writes for the demo workload's tasks (config/fleet_tasks.yaml), greedy."""
    loaded = load_pretrained(default_model_dir(), "cpu", "float32")
    engine = TransformersEngine(loaded)
    with open(config_dir() / "fleet_tasks.yaml", encoding="utf-8") as f:
        fleet = yaml.safe_load(f)
    plans = []
    for robot in ROBOTS:
        for i, entry in enumerate(fleet[robot]):
            gid = f"{robot}{i}"
            engine.add(gid, engine.encode(SKILLS[robot].build_prompt(entry["task"], entry["context"])), 200)
            while gid not in engine.step([gid]).finished:
                pass
            plans.append((robot, engine.decode(engine.output_ids(gid))))
    engine.close()
    return plans


def yaml_examples() -> list[tuple[str, str]]:
    """Worked example plans of the skill-set YAMLs (entries of ``examples`` with a ``plan``), where there are any."""
    out = []
    for robot in ROBOTS:
        with open(config_dir() / "skills" / f"{robot}.yaml", encoding="utf-8") as f:
            for example in yaml.safe_load(f).get("examples") or []:
                if isinstance(example, dict) and "plan" in example:
                    out.append((robot, str(example["plan"])))
    return out


# ----------------------------------------------------------------------------- the grammar
def test_the_grammar_accepts_every_plan_of_the_project(smollm2, compiler):
    """Corpus plans, the evaluation set's reference plans, the embedded planner's plans for the demo workload and
    the skill YAMLs' examples all parse, and the grammar takes each of them (with or without a leading space), under
    the skill set's plan-length cap and under SmolLM2's, counted in its tokens."""
    from timely_llm_ros.core.token_limits import effective_limits
    from timely_llm_ros.engine.model_setup import reference_encode

    limits = effective_limits(model_spec("smollm2"), SKILLS, smollm2.tokenizer.encode, reference_encode())
    plans = [(e.robot_type, e.plan) for e in generate(1200, seed=0) if e.robot_type in ROBOTS]
    plans += [(t.robot_type, t.plan) for t in load_eval_tasks(ROBOTS)]
    fleet = embedded_fleet_plans()
    plans += fleet + yaml_examples()
    assert len(fleet) == 11 and len(plans) > 1000
    for robot, plan in plans:
        skills = SKILLS[robot]
        assert not parse(plan, skills.skills, skills.statement_forms).problems, plan
        for text in (plan.strip(), " " + plan.strip()):
            assert accepts(compiler, robot, text), (robot, text)
        assert accepts(compiler, robot, plan.strip(), limits[robot].limits.max_plan_tokens), (robot, plan)


INVALID = {
    "drone": ["fly(10);", "mf('ten');", "?iv('cat')==True{tp();", "tp();}", "g(cat);", "_1=;", "1001{tp();}",
              "mf(10,20);", "s('cat') tp();", "", "->;",
              "->'found';", "_1=iv('cat');->_1;"],
    "arm": ["2{dr();}", "?True{dr();}", "->'done';", "pi(3);", "mv(1);", "dr() dr();", "gt('box'));",
            "_1=sc('cup');"],
}


def test_the_grammar_rejects_plans_the_parser_rejects(compiler):
    """Hand-written invalid plans (unknown skill, wrong argument kind or count, unclosed or unopened block, a form
    the skill set does not allow, no action) and random one-character edits of valid plans that the parser rejects."""
    rng = random.Random(5)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_'(){};,?=&|<>- "
    checked = 0
    for robot in ROBOTS:
        skills = SKILLS[robot]
        invalid = list(INVALID[robot])
        for e in [e for e in generate(400, seed=1) if e.robot_type == robot]:
            i = rng.randrange(len(e.plan))
            invalid.append(e.plan[:i] + rng.choice(["", rng.choice(alphabet)]) + e.plan[i + 1:])
        for text in invalid:
            parsed = parse(text, skills.skills, skills.statement_forms)
            if parsed.problems or not any(skills.skills[c.name].is_action for c in parsed.skills):
                assert not accepts(compiler, robot, text), (robot, text)
                checked += 1
    assert checked >= 100


def test_the_grammar_refuses_a_plan_that_reads_a_variable_no_earlier_statement_surely_set(compiler):
    """These parse, but the interpreter would end them EXECUTION_FAILED (SmolLM2 wrote the first one on the demo): a
    variable is read before any assignment, or after one inside a block that may not have run."""
    drone = SKILLS["drone"]
    refused = ["g('child');?_1>60{g('child');}", "mf(_1);", "?iv('cat')==True{_1=od('cat');}mf(_1);",
               "_1=od('cup');mf(_2);", "_2=od('cup');mf(_2);", "2{_1=od('cup');}g(_1);"]
    fine = ["_1=od('child');?_1<60{mb(60);}", "_1=od('cup');_2=od('mug');?_1>_2{g('cup');}",
            "_1=od('cup');?_1>10{_1=od('mug');}mf(_1);", "_1=p('what is here?');l(_1);"]
    for text in refused + fine:
        assert not parse(text, drone.skills, drone.statement_forms).problems, text
    assert not any(accepts(compiler, "drone", text) for text in refused)
    assert all(accepts(compiler, "drone", text) for text in fine)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), robot=st.sampled_from(ROBOTS))
def test_every_text_the_token_mask_lets_through_parses_and_the_mask_never_dead_ends(smollm2, compiler, seed, robot):
    """A random walk through the mask (uniform over the allowed tokens) never reaches a state that allows no token,
    EOS is allowed only where the text so far is a whole plan the parser accepts, and the walk ends by EOS within
    the statement bound."""
    import xgrammar as xgr

    rng = random.Random(seed)
    skills = SKILLS[robot]
    tok = smollm2.tokenizer
    eos = tok.eos_token_id
    m = compiler.matcher(plan_grammar(skills))
    mask = xgr.allocate_token_bitmask(1, compiler.vocab_size)
    bits = torch.arange(32, dtype=torch.int32)
    ids: list[int] = []
    for _ in range(600):
        m.fill_next_token_bitmask(mask)
        allowed = ((mask[0][:, None] >> bits) & 1).flatten()[:compiler.vocab_size].nonzero().flatten().tolist()
        assert allowed, f"dead end after {tok.decode(ids)!r}"
        if eos in allowed:
            text = tok.decode(ids)
            # the grammar bounds no unrolled calls yet (the grounding branch adds that bound): the parser's cap
            # (max_plan_calls) is left out here
            assert not parse(text, skills.skills, skills.statement_forms, max_calls=None).problems, text
            if len(allowed) == 1 or rng.random() < 0.2:
                return
        token = rng.choice([t for t in allowed if t != eos])
        assert m.accept_token(token)
        ids.append(token)
    pytest.fail(f"no end after 600 tokens: {tok.decode(ids)!r}")


def test_the_statement_bound_follows_the_plan_length_cap(compiler):
    """Under a 36-token cap a plan holds 3 statements: after the third only EOS may follow."""
    skills = SKILLS["arm"]
    assert max_statements(36) == 3 and max_statements(skills.max_plan_tokens) >= 12
    m = compiler.matcher(plan_grammar(skills, max_plan_tokens=36))
    assert m.accept_string("dr();dr();dr();") and m.is_completed()
    assert not m.accept_string("d")
    assert plan_grammar(SKILLS["chat"]) is None


# ----------------------------------------------------------------------------- the engine on SmolLM2
def prompt(engine: TransformersEngine, key: str) -> list[int]:
    robot, task, scene = TASKS[key]
    return engine.encode(SKILLS[robot].build_prompt(task, scene))


def grammar(key: str) -> str:
    return plan_grammar(SKILLS[TASKS[key][0]])


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


def test_on_the_raw_prompt_smollm2_writes_prose_unconstrained_and_a_plan_under_the_grammar(smollm2, alone):
    engine = TransformersEngine(smollm2)
    for key in ("d1", "a1"):
        skills = SKILLS[TASKS[key][0]]
        raw, constrained = engine.decode(alone[key + "-raw"]), engine.decode(alone[key])
        assert parse(raw, skills.skills, skills.statement_forms).problems, raw
        plan = constrained if alone[key][-1] == engine.eos_token_id else constrained[:constrained.rfind(";") + 1]
        assert plan.strip() and not parse(plan, skills.skills, skills.statement_forms).problems, constrained


def test_constrained_generations_survive_suspension_offload_and_preemption_token_exact(smollm2, alone):
    """Random batches of constrained and unconstrained generations: members left out of a step are suspended
    (preempted mid-output), a tiny KV budget moves suspended KV to host memory, and each output equals its own
    undisturbed run."""
    engine = TransformersEngine(smollm2, kv_budget_mb=0.5)
    rng = random.Random(7)
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
    assert suspended >= 10 and offloaded >= 5
    assert done == {k: alone[k] for k in keys}
    assert len(engine.tokens.grammars) == 2     # the drone grammar compiled once for its two generations, the arm's


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


def test_the_interrupt_test_fails_if_a_cut_short_step_advanced_the_grammar(smollm2, alone):
    """Mutation check: an engine that moves a constrained generation's matcher on by one token (one its mask
    allows) when that generation's forward was cut short, as if the step had emitted it, fails the comparison."""
    import xgrammar as xgr

    engine = TransformersEngine(smollm2)
    real_step = engine.step

    def step_that_advances_on_cut_steps(gen_ids):
        before = {g: len(engine._gens[g].output) for g in gen_ids}
        res = real_step(gen_ids)
        if res.interrupted:
            for g in gen_ids:
                gen = engine._gens[g]
                if gen.matcher is not None and len(gen.output) == before[g]:
                    mask = xgr.allocate_token_bitmask(1, engine.model.config.vocab_size)
                    gen.matcher.fill_next_token_bitmask(mask)
                    bits = ((mask[0][:, None] >> torch.arange(32, dtype=torch.int32)) & 1).flatten()
                    allowed = [t for t in bits.nonzero().flatten().tolist() if t != engine.eos_token_id]
                    if allowed:
                        gen.matcher.accept_token(allowed[0])
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


def test_the_scheduler_decodes_constrained_goals_under_their_grammar_and_ends_an_unparsable_plan_invalid_plan(smollm2):
    """On SmolLM2 with the raw prompt, through PlanScheduler (grammars compiled ahead): the constrained arm goal's plan is executed segment by
    segment and ends DONE; the unconstrained drone goal's prose ends INVALID_PLAN, naming the problem, without a
    segment sent."""
    import time

    from timely_llm_ros.core.errors import ErrorCode
    from timely_llm_ros.core.exec_time import load_exec_models
    from timely_llm_ros.core.policies import make_policy
    from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SegmentReady
    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    from timely_llm_ros.core.validation import GoalFields, validate_goal

    engine = TransformersEngine(smollm2)
    scheduler = PlanScheduler(engine, make_policy("fcfs", max_batch=4), SKILLS, load_exec_models(), time.monotonic)
    scheduler.prepare_grammars()          # as the server does at configure: drone and arm (chat has none)
    assert len(engine.tokens.grammars) == 2
    for rid, key, unconstrained in (("arm", "a2", False), ("drone", "d1", True)):
        robot, task, scene = TASKS[key]
        goal = GoalFields(f"{robot}_1", robot, task, context=scene, urgency_class="normal",
                          unconstrained=unconstrained)
        scheduler.submit(validate_goal(goal, rid, time.monotonic(), SKILLS, DEFAULT_URGENCY_CLASSES, grammar=True))
    sent: dict[str, list[int]] = {"arm": [], "drone": []}
    outcomes = {}
    while scheduler.busy() or len(outcomes) < 2:
        events = scheduler.step() if scheduler.busy() else []
        while events:
            ev = events.pop(0)
            if isinstance(ev, SegmentReady):        # the robot runs it at once
                sent[ev.req_id].append(ev.segment.index)
                now = time.monotonic()
                events += scheduler.on_execution_started(ev.req_id, ev.segment.index, now)
                events += scheduler.on_execution_finished(ev.req_id, ev.segment.index, now)
            elif isinstance(ev, RequestFinished):
                outcomes[ev.req_id] = ev.outcome
    arm, drone = outcomes["arm"], outcomes["drone"]
    assert arm.error_code == ErrorCode.NONE and len(sent["arm"]) == len(arm.segments) >= 1, arm.message
    assert not parse(arm.plan_text, SKILLS["arm"].skills, ("call",)).problems
    assert drone.error_code == ErrorCode.INVALID_PLAN and sent["drone"] == [], drone.message
    assert "stopped parsing as drone skills" in drone.message and "unexpected character" in drone.message


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
    from timely_llm_ros.engine.grammar import CANDIDATES, RowMasks

    vocab = compiler.vocab_size
    matchers = [compiler.matcher(grammar(key)) for key in TASKS][:3]
    masks = RowMasks(vocab)
    masks._fill(matchers)
    allowed = [[t for t in range(vocab) if (int(masks._host[i, t >> 5]) >> (t & 31)) & 1] for i in range(3)]
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
