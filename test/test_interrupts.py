"""Interrupts: a request that arrives during an engine step may end that step at the next decoder layer.

The rule (Policy.interrupts), where a modelled step ends (LatencyModel.interrupted_s), the simulator's replay of it
and the real path: a SchedulerThread driving the transformers engine, with the arrival announced mid-forward.
"""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState
from timely_llm_ros.core.runtime import SchedulerThread
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SegmentReady
from timely_llm_ros.evaluation.sim import LatencyModel
from timely_llm_ros.evaluation.sim.simulator import Simulator
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.step_trace import StepRecord, StepTraceWriter, load_factors, read_step_trace
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.evaluation.workload import get_trace
from timely_llm_ros.evaluation.workload.generator import WorkloadTask

# a prefill costs 1e-4 s a token and nothing else: a 3,000-token prompt is a 0.3 s step, a 200-token one 0.02 s
LAT = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.0, decode_base=0.02, decode_per_seq=0.0,
                   decode_per_kv_token=0.0, layers=10)


def gen(urgency: str, t: float = 0.0, k: int = 0, exec_end: float | None = None, rid: str = "x") -> Generation:
    req = PlanRequest(req_id=rid, agent_id=f"drone_{rid}", robot_type="drone", task="t",
                      tuf=DEFAULT_URGENCY_CLASSES[urgency], arrival=t, urgency=urgency)
    g = Generation(req=req, prompt_ids=[], enqueued_at=t)
    if k:
        g.segments = [None] * k   # type: ignore[list-item]   (k: the segment index is the count generated)
        g.expected_exec_end = exec_end
    return g


def task(rid: str, trace_id: int, arrival: float, prompt_tokens: int) -> WorkloadTask:
    tr = get_trace(trace_id)
    return WorkloadTask(rid, arrival, 0, f"{tr.robot_type}_{rid}", trace_id, tr.robot_type, tr.urgency, tr.task,
                        tr.context, tr.plan, prompt_tokens)


# ------------------------------------------------------------------------------------------------ the rule
def test_an_arrival_interrupts_only_when_the_policy_ranks_it_above_every_member():
    timely = make_policy("timely")
    normal_members = [gen("normal", 0.0, rid="a"), gen("normal", 0.05, rid="b")]
    assert timely.interrupts(gen("urgent", 0.1, rid="u"), normal_members, 0.1)
    assert not timely.interrupts(gen("normal", 0.1, rid="n"), [gen("urgent", 0.09, rid="v")], 0.1)
    # above one member, below the other: the step runs on
    assert not timely.interrupts(gen("urgent", 0.1, rid="u"), [*normal_members, gen("urgent", 0.02, rid="w")], 0.1)
    assert not timely.interrupts(gen("urgent", 0.1, rid="u"), [], 0.1)
    assert not make_policy("timely", options={"interrupt": False}).interrupts(gen("urgent", 0.1), normal_members, 0.1)
    assert not make_policy("timely-nointerrupt").interrupts(gen("urgent", 0.1), normal_members, 0.1)
    # arrival orders never put a newcomer first
    for name in ("fcfs", "fcfs-stream"):
        assert not make_policy(name).interrupts(gen("urgent", 0.1), normal_members, 0.1)
    # the four paper policies have no such rule unless asked
    assert not make_policy("slice").interrupt and make_policy("slice", options={"interrupt": True}).interrupt


def test_an_arrival_the_next_pick_could_not_take_interrupts_nothing():
    """A full batch of a policy that never leaves running generations out comes back whole after a cut, ahead of
    the newcomer: no interrupt. With room, or with preemption (timely), the newcomer runs next and it interrupts."""
    normal = [gen("normal", 0.01 * i, rid=f"m{i}") for i in range(4)]
    urgent = gen("urgent", 0.1, rid="u")
    assert not make_policy("edf", max_batch=4).interrupts(urgent, normal, 0.1)
    assert make_policy("edf", max_batch=5).interrupts(urgent, normal, 0.1)
    assert make_policy("timely", max_batch=4).interrupts(urgent, normal, 0.1)
    assert not make_policy("timely", max_batch=4, options={"preempt": False}).interrupts(urgent, normal, 0.1)
    assert not make_policy("timely", max_batch=4, options={"adaptive": False}).interrupts(urgent, normal, 0.1)
    assert make_policy("timely", max_batch=5, options={"preempt": False}).interrupts(urgent, normal, 0.1)


def test_eq4_lets_a_fresh_request_cut_a_later_segment_of_its_own_class_short_where_a_class_rule_would_not():
    """A member generating a later segment whose robot is busy for another 4 s has slack: Eq. 4 ranks a fresh
    normal request (ERT 1 s) above it, so the step ends early for the newcomer, although both are of one class and
    a "more urgent class" rule would let the step run. Pinned: the priorities that decide it."""
    timely = make_policy("timely")
    now = 10.0
    later = gen("normal", 6.0, k=2, exec_end=now + 4.0, rid="later")
    fresh = gen("normal", now, rid="fresh")
    g, d = 0.09, 0.008                                  # drone segment time, network delay
    assert timely.priority(fresh, now) == pytest.approx(1.0 / (g * 1.0))            # U = 1 (before its ERT), L = 1
    assert timely.priority(later, now) == pytest.approx(1.0 / (g * 4.0))            # TUF_1 = 1, L = 4 s
    assert timely.interrupts(fresh, [later], now)
    assert fresh.req.tuf.ert == later.req.tuf.ert                                  # the class rule: no interrupt
    # the same later segment due now (its robot finishing) outranks the newcomer: no interrupt
    due = gen("normal", 6.0, k=2, exec_end=now + g + d, rid="due")
    assert not timely.interrupts(fresh, [due], now)


# ------------------------------------------------------------------------------------------------ the model
def test_a_modelled_step_ends_at_the_layer_boundary_after_the_interrupt_its_kv_reloads_complete():
    # 0.02 s of KV reloads, then a 0.3 s forward of 10 layers (0.03 s each)
    assert LAT.interrupted_s(0.32, 0.02, 0.05) == pytest.approx(0.05)      # 0.03 into the forward: 1 layer done
    assert LAT.interrupted_s(0.32, 0.02, 0.051) == pytest.approx(0.08)     # inside layer 2: it completes
    assert LAT.interrupted_s(0.32, 0.02, 0.01) == pytest.approx(0.02)      # during the reload: before layer 1
    assert LAT.interrupted_s(0.32, 0.02, 0.31) == pytest.approx(0.32)      # in the last layer: the step's end
    one_layer = dataclasses.replace(LAT, layers=1)
    assert one_layer.interrupted_s(0.32, 0.02, 0.05) == pytest.approx(0.32)  # no boundary inside: never cut
    assert LatencyModel.from_dict(LAT.to_dict()).layers == 10


def run_pair(policy: str, latency: LatencyModel = LAT):
    """A normal drone plan with a 3,000-token prompt (a 0.3 s prefill) at 0, an urgent one (200 tokens) at 0.05."""
    tasks = [task("n", 1, 0.0, 3000), task("u", 6, 0.05, 200)]
    sim = Simulator(make_policy(policy), latency, network_delay_s=0.0)
    result = sim.run(tasks)
    return {o.req.req_id: o for o in result.outcomes}, sim


def test_an_urgent_arrival_ends_a_long_normal_prefill_at_the_next_layer_and_nothing_is_lost():
    got, sim = run_pair("timely")
    # cut at 0.06 (two 0.03 s layers), then the urgent prompt's 0.02 s prefill gives its first token
    assert sim.scheduler.interrupted_steps == 1 and sim.engine.interrupted_steps == 1
    first_u = got["u"].segments[0]
    assert first_u.gen_started == pytest.approx(0.06)
    waited, _ = run_pair("timely-nointerrupt")
    assert waited["u"].segments[0].gen_started == pytest.approx(0.3)     # behind the whole prefill
    assert got["u"].response_time < waited["u"].response_time - 0.2
    assert got["u"].utility > waited["u"].utility
    # the normal request still runs its whole plan; its prefill ran again after the urgent one's
    for out in (got, waited):
        assert all(o.state == RequestState.DONE for o in out.values())
    assert got["n"].plan_text == waited["n"].plan_text
    assert got["n"].segments[0].gen_finished > waited["n"].segments[0].gen_finished
    # one layer: nowhere to end the step early
    flat, sim1 = run_pair("timely", dataclasses.replace(LAT, layers=1))
    assert sim1.scheduler.interrupted_steps == 0 and flat["u"].segments[0].gen_started == pytest.approx(0.3)


def test_an_interrupted_step_is_traced_as_such_and_left_out_of_the_load_factors(tmp_path):
    whole = StepRecord(t=0.0, engine_s=0.3, prefills=((3000, 3000),))
    cut = StepRecord(t=0.3, engine_s=0.06, prefills=((3000, 3000),), interrupted=True)
    writer = StepTraceWriter(tmp_path / "trace.csv")
    for r in (whole, cut):
        writer.write(r)
    writer.close()
    assert read_step_trace(tmp_path / "trace.csv") == [whole, cut]
    assert load_factors([whole, cut], LAT).slowdown == pytest.approx(1.0)   # 0.06 s for a 0.3 s step is no speed-up
    assert load_factors([whole, cut], LAT).steps == 1
    with pytest.raises(ValueError):
        load_factors([cut], LAT)


# ------------------------------------------------------------------------------------------------ the real engine
def test_an_announced_urgent_request_ends_the_transformers_step_in_flight_and_runs_next():
    """The real path: a SchedulerThread on the transformers engine is in a normal request's prefill forward when an
    urgent request is posted and announced (from the forward itself, at layer 1, so the moment is exact). The
    gate before layer 2 ends the step; the next step prefills the urgent request; both plans are whole."""
    torch = pytest.importorskip("torch")
    from timely_llm_ros.engine.transformers.loader import build_random_model
    from timely_llm_ros.engine.transformers.layer_gate import decoder_layers
    from timely_llm_ros.engine.transformers.engine import TransformersEngine

    torch.set_num_threads(1)
    loaded = build_random_model("tiny", device="cpu", seed=3)
    engine = TransformersEngine(loaded)
    sched = PlanScheduler(engine, make_policy("timely", max_batch=4), load_skill_sets(), load_exec_models(),
                          time.monotonic)
    finished: dict[str, object] = {}
    done = threading.Event()

    def on_events(events):
        for ev in events:
            if isinstance(ev, SegmentReady):     # a robot that runs each segment at once, in no time
                loop.post(lambda s, e=ev: s.on_execution_finished(e.req_id, e.segment.index, time.monotonic()))
            elif isinstance(ev, RequestFinished):
                finished[ev.req_id] = ev.outcome
                if len(finished) == 2:
                    done.set()

    loop = SchedulerThread(sched, on_events)
    assert loop.interruptible and engine.interrupt_check is not None
    now = time.monotonic()
    plan = get_trace(1).plan
    normal = PlanRequest(req_id="n", agent_id="drone_n", robot_type="drone", task="look for the cat",
                         tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=now, urgency="normal", forced_plan=plan)
    urgent = dataclasses.replace(normal, req_id="u", agent_id="drone_u", tuf=DEFAULT_URGENCY_CLASSES["urgent"],
                                 urgency="urgent", forced_plan=get_trace(6).plan)
    steps: list[tuple[tuple[str, ...], bool]] = []   # (batch, interrupted) of each engine step
    first = decoder_layers(loaded.model)[0]
    fired = []

    def arrive_mid_forward(module, args):
        if not fired and sched._stepping and sched._stepping[0].req_id == "n":
            fired.append(1)
            urgent.arrival = time.monotonic()
            loop.post(lambda s: s.submit(urgent))
            loop.announce(urgent)

    hook = first.register_forward_pre_hook(arrive_mid_forward)
    inner_step = engine.step

    def logged_step(ids):
        result = inner_step(ids)
        steps.append((tuple(ids), result.interrupted))
        return result

    engine.step = logged_step   # type: ignore[method-assign]   (records each step's batch; the engine is unchanged)
    loop.start()
    try:
        loop.post(lambda s: s.submit(normal))
        assert done.wait(60), f"not finished: {finished}"
    finally:
        loop.stop()
        hook.remove()
    assert sched.interrupted_steps == 1 and engine.interrupted_steps == 1
    assert steps[0] == (("n",), True)                  # the normal prefill, cut short
    assert steps[1][0][0] == "u" and not steps[1][1]   # the next step prefills the urgent request first
    outcome_u, outcome_n = finished["u"], finished["n"]
    assert outcome_u.segments[0].gen_finished < outcome_n.segments[0].gen_finished   # the urgent plan went first
    assert outcome_u.plan_text.strip().startswith(get_trace(6).plan.strip()[:8])


def test_the_simulator_on_a_real_engine_cuts_a_step_when_an_arrival_comes_due_mid_forward():
    """Simulator + transformers engine on the wall clock: an urgent task due at 0.05 s while the normal task's
    prefill forward is in flight (held at layer 1 until 0.08 s, so the order is certain) ends that step at the next
    layer; both plans still run whole, the urgent one's first."""
    pytest.importorskip("torch")
    from timely_llm_ros.evaluation.sim.clock import WallClock
    from timely_llm_ros.engine.transformers.loader import build_random_model
    from timely_llm_ros.engine.transformers.layer_gate import decoder_layers
    from timely_llm_ros.engine.transformers.engine import TransformersEngine

    loaded = build_random_model("tiny", device="cpu", seed=4)
    engine = TransformersEngine(loaded)
    clock = WallClock()
    sim = Simulator(make_policy("timely"), None, engine=engine, clock=clock, time_scale=0.01, network_delay_s=0.0)
    assert engine.interrupt_check is not None

    def hold(module, args):
        stepping = sim.scheduler._stepping
        if stepping and stepping[0].req_id == "n" and not stepping[0].prefilled:
            clock.advance_to(0.08)               # the urgent task comes due while this forward runs

    hook = decoder_layers(loaded.model)[0].register_forward_pre_hook(hold)
    try:
        result = sim.run([task("n", 1, 0.0, 0), task("u", 6, 0.05, 0)], max_sim_s=60)
    finally:
        hook.remove()
    got = {o.req.req_id: o for o in result.outcomes}
    assert sim.scheduler.interrupted_steps >= 1 and engine.interrupted_steps == sim.scheduler.interrupted_steps
    assert all(o.state == RequestState.DONE for o in got.values()), [o.message for o in got.values()]
    assert got["u"].segments[0].gen_finished < got["n"].segments[0].gen_finished


def test_a_driver_that_is_dropped_frees_its_engine_without_the_cycle_collector():
    """The engine's interrupt callback holds its driver weakly: dropping a Simulator (or a SchedulerThread) that drove
    a real engine frees the engine, KV store included, by reference counting alone (gc disabled)."""
    import gc
    import weakref

    pytest.importorskip("torch")
    from timely_llm_ros.evaluation.sim.clock import WallClock
    from timely_llm_ros.engine.transformers.loader import build_random_model
    from timely_llm_ros.engine.transformers.engine import TransformersEngine

    loaded = build_random_model("tiny", device="cpu", seed=5)
    gc.collect()
    gc.disable()
    try:
        engine = TransformersEngine(loaded)
        sim = Simulator(make_policy("timely"), None, engine=engine, clock=WallClock(), time_scale=0.01)
        sim.run([task("n", 1, 0.0, 0)], max_sim_s=30)
        ref = weakref.ref(engine)
        del sim, engine
        assert ref() is None, "the Simulator and its engine were kept alive by a reference cycle"
        engine = TransformersEngine(loaded)
        sched = PlanScheduler(engine, make_policy("timely"), load_skill_sets(), load_exec_models(), time.monotonic)
        loop = SchedulerThread(sched, lambda events: None)
        loop.start()
        loop.stop()            # as the server's cleanup does (a thread never started keeps its target)
        ref = weakref.ref(engine)
        del loop, sched, engine
        assert ref() is None, "the SchedulerThread and its engine were kept alive by a reference cycle"
    finally:
        gc.enable()
