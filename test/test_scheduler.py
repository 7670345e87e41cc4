"""PlanScheduler behaviour, driven by the simulated engine on a virtual clock."""
from __future__ import annotations

import dataclasses

import pytest

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.execution import SegmentStatus
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState, SkillCall
from timely_llm_ros.core.scheduler import (PlanScheduler, RequestFinished, SchedulerConfig, SegmentReady,
                                           SegmentsWithdrawn, StateChanged)
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility

LATENCY = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
DRONE_PLAN = "s('cat');?iv('cat')==True{g('cat');tp();};mf(50);tc(90);"
ARM_PLAN = "sc('apple');gt('apple');pi('apple');gt('fruit basket');dr();"


def make(policy: str = "fcfs", **opts):
    clock = VirtualClock()
    engine = SimEngine(LATENCY, clock)
    sched = PlanScheduler(engine, make_policy(policy, max_batch=opts.pop("max_batch", 4)), load_skill_sets(),
                          load_exec_models(), clock)
    return sched, engine, clock


def request(rid: str, plan: str = DRONE_PLAN, robot: str = "drone", urgency: str = "normal", t: float = 0.0):
    return PlanRequest(req_id=rid, agent_id=f"{robot}_{rid}", robot_type=robot, task="look for the cat",
                       tuf=DEFAULT_URGENCY_CLASSES[urgency], arrival=t, urgency=urgency, forced_plan=plan)


def run_to_end(sched, clock, exec_s: float = 0.5, max_steps: int = 10_000, events0=()):
    """Step the scheduler; execute every dispatched segment for exec_s on the virtual clock (events0: events
    already returned by the caller's own calls)."""
    dispatched, finished, executing, robot_free = [], {}, [], {}
    for i in range(max_steps):
        events = list(events0) if i == 0 else []
        events += sched.step() if sched.busy() else []
        if not events and not sched.busy():
            if not executing:
                break
            rid, idx, end = executing.pop(0)
            clock.advance_to(max(clock(), end))
            events = sched.on_execution_finished(rid, idx, clock())
        for ev in events:
            if isinstance(ev, SegmentReady):
                dispatched.append((ev.req_id, ev.segment.index, ev.segment.text))
                start = max(clock(), robot_free.get(ev.req_id, 0.0))  # a robot runs its segments in order
                robot_free[ev.req_id] = start + exec_s
                assert not sched.on_execution_started(ev.req_id, ev.segment.index, start)
                executing.append((ev.req_id, ev.segment.index, start + exec_s))
                executing.sort(key=lambda x: x[2])
            elif isinstance(ev, RequestFinished):
                finished[ev.req_id] = ev.outcome
    return dispatched, finished


def test_segments_are_dispatched_in_order_and_rejoin_to_the_plan():
    sched, _, clock = make()
    sched.submit(request("a"))
    dispatched, finished = run_to_end(sched, clock)
    assert [i for _, i, _ in dispatched] == list(range(len(dispatched)))
    assert len(dispatched) >= 3
    assert "".join(t for _, _, t in dispatched).strip().startswith("s('cat');")
    out = finished["a"]
    assert out.ok and out.state == RequestState.DONE
    assert out.response_time > 0 and out.waiting_time >= out.response_time
    assert out.utility == pytest.approx(DEFAULT_URGENCY_CLASSES["normal"](out.response_time))


def test_trailing_statements_without_an_action_go_to_the_robot_as_the_last_segment():
    """A plan ending in a query and a return (_1=iv('cat');->_1;) has that text in no action segment. The robot must
    evaluate it (the return value comes from there), so it is sent as the plan's last segment, with its query and
    an estimate of ~0 s: the texts the robot receives are the result's segments and rejoin to the whole plan."""
    plan = "mf(50);_1=iv('cat');->_1;"
    sched, _, clock = make()
    sched.submit(request("r", plan))
    dispatched, finished = run_to_end(sched, clock)
    out = finished["r"]
    assert out.ok, out.message
    assert [text for _, _, text in dispatched] == [seg.text for seg in out.segments]
    assert "".join(seg.text for seg in out.segments) == out.plan_text
    last = out.segments[-1]
    assert last.text.strip() == "_1=iv('cat');->_1;" and [c.name for c in last.skills] == ["iv"]
    assert last.est_exec_s < 0.01


def test_a_segment_that_returned_ends_the_request_with_its_value_and_stops_the_generation():
    """The robot reports a return in segment 0: the request ends DONE with the value at once; later segments are not
    waited for (the robot does not run them) and the generation is released."""
    sched, engine, clock = make()
    sched.submit(request("r", "?iv('cat')==True{tp();->'cat';}mf(50);tc(90);mf(50);->'none';"))
    first = None
    for _ in range(500):
        first = next((ev for ev in sched.step() if isinstance(ev, SegmentReady)), None)
        if first is not None:
            break
    assert first is not None and first.segment.index == 0
    sched.on_execution_started("r", 0, clock())
    events = sched.on_execution_finished("r", 0, clock() + 0.5, executed=[SkillCall("iv", ("cat",)),
                                                                          SkillCall("tp", ())],
                                         returned=True, return_value="cat")
    out = next(ev.outcome for ev in events if isinstance(ev, RequestFinished))
    assert out.ok and out.state == RequestState.DONE and out.returned and out.return_value == "cat"
    assert [c.name for c in out.segments[0].executed_skills] == ["iv", "tp"]
    assert not sched.busy() and sched.active() == 0 and engine.memory().generations == 0


def test_segmented_policy_suspends_after_each_segment_and_serves_others():
    sched, engine, clock = make("fcfs", max_batch=1)
    sched.submit(request("long", ARM_PLAN * 3, robot="arm"))
    sched.submit(request("urgent", "mb(50);ml(30);", urgency="urgent"))
    order = []
    for _ in range(200):
        for ev in sched.step():
            if isinstance(ev, SegmentReady):
                order.append(ev.req_id)
        if "urgent" in order:
            break
    # with batch 1, the urgent request got the engine after the long one's first segment, not after its whole plan
    assert order.index("urgent") <= 2


def test_the_fcfs_whole_plan_policy_dispatches_only_after_the_whole_plan():
    sched, _, clock = make("fcfs-whole-plan")
    sched.submit(request("a"))
    first_dispatch_at = None
    while sched.busy():
        for ev in sched.step():
            if isinstance(ev, SegmentReady) and first_dispatch_at is None:
                first_dispatch_at = clock()
                assert sched.generations()[0].finished_generating
    assert first_dispatch_at is not None


def test_actual_completion_replaces_the_expected_end():
    sched, _, clock = make()
    sched.submit(request("a"))
    seg = None
    while seg is None:
        seg = next((ev.segment for ev in sched.step() if isinstance(ev, SegmentReady)), None)
    gen = sched.generations()[0]
    expected = gen.expected_exec_end
    assert expected is not None and expected >= seg.gen_finished + seg.est_exec_s - 1e-9
    sched.on_execution_started("a", seg.index, clock())
    early = clock() + 0.01
    sched.on_execution_finished("a", seg.index, early)
    assert len(gen.segments) == 1  # suspended after its first segment: nothing else is pending
    assert gen.expected_exec_end == pytest.approx(early)
    assert gen.expected_exec_end < expected


def test_cancel_frees_engine_state_and_reports_cancelled():
    sched, engine, clock = make()
    sched.submit(request("a"))
    sched.step()
    events = sched.cancel("a")
    outcome = next(ev.outcome for ev in events if isinstance(ev, RequestFinished))
    assert outcome.error_code == ErrorCode.CANCELLED
    assert engine.memory().generations == 0
    assert not sched.busy()


def test_executor_failure_ends_the_request_with_its_code():
    sched, engine, clock = make()
    sched.submit(request("a"))
    seg = None
    while seg is None:
        seg = next((ev.segment for ev in sched.step() if isinstance(ev, SegmentReady)), None)
    events = sched.on_execution_finished("a", seg.index, clock(), ok=False, error="motor stalled")
    outcome = next(ev.outcome for ev in events if isinstance(ev, RequestFinished))
    assert outcome.error_code == ErrorCode.EXECUTION_FAILED and "motor stalled" in outcome.message
    assert engine.memory().generations == 0


def test_a_later_segment_failing_unrun_while_an_earlier_one_runs_waits_for_that_ones_result():
    """A robot that ends a waiting segment FAILED (no skill run) before the running one's result arrives, as an
    executor going down may: the request fails at the running segment, with what it ran, not at the waiting one."""
    sched, engine, clock = make()
    sched.submit(request("a", "mf(50);tc(90);mb(20);"))
    sent = []
    while len(sent) < 2 and sched.busy():
        sent += [ev.segment.index for ev in sched.step() if isinstance(ev, SegmentReady)]
    sched.on_execution_started("a", 0, clock())
    early = sched.on_execution_finished("a", 1, clock() + 0.1, ok=False, error="executor shutting down")
    assert not [ev for ev in early if isinstance(ev, RequestFinished)]
    events = sched.on_execution_finished("a", 0, clock() + 0.2, ok=False, error="executor shutting down",
                                         executed=[SkillCall("mf", (50,))])
    outcome = next(ev.outcome for ev in events if isinstance(ev, RequestFinished))
    assert outcome.error_code == ErrorCode.EXECUTION_FAILED
    assert outcome.message.startswith("segment 0 failed: executor shutting down"), outcome.message
    assert [s.executed_skills for s in outcome.segments[:2]] == [[SkillCall("mf", (50,))], []]


def test_unknown_robot_type_and_duplicate_ids_are_rejected():
    sched, _, _ = make()
    with pytest.raises(RequestError) as err:
        sched.submit(request("a", robot="submarine"))
    assert err.value.code == ErrorCode.UNKNOWN_ROBOT_TYPE
    sched.submit(request("b"))
    with pytest.raises(RequestError):
        sched.submit(request("b"))


def test_plan_without_executable_skill_fails_clearly():
    sched, _, clock = make()
    sched.submit(request("a", plan="_1=od('cup');"))
    _, finished = run_to_end(sched, clock)
    assert finished["a"].error_code == ErrorCode.GENERATION_FAILED
    assert "no executable" in finished["a"].message


def test_a_plan_at_its_token_cap_names_the_cap_it_hit():
    """A goal with max_new_tokens 0 gets the server's cap: the message names that cap (not "0"), and a plan that
    reaches it inside its first open block says so, and what to do, instead of only "no executable skill"."""
    sched, _, clock = make()
    sched.submit(dataclasses.replace(request("long", plan="mf(50);" * 200), max_new_tokens=0))
    sched.submit(dataclasses.replace(request("open", plan="5{" + "mf(50);" * 200 + "}"), max_new_tokens=0))
    _, finished = run_to_end(sched, clock)
    cap = sched.skill_sets["drone"].max_plan_tokens
    assert finished["long"].error_code == ErrorCode.PLAN_TOO_LONG
    assert f"plan hit the {cap}-token cap" in finished["long"].message, finished["long"].message
    assert finished["open"].error_code == ErrorCode.GENERATION_FAILED
    assert f"within the plan's {cap}-token cap" in finished["open"].message, finished["open"].message


def test_plan_that_stops_parsing_ends_early_with_invalid_plan():
    sched, engine, clock = make()
    bad = "mf(50);zz(3);" + "mf(10);" * 30
    sched.submit(request("a", plan=bad))
    dispatched, finished = run_to_end(sched, clock)
    out = finished["a"]
    assert out.error_code == ErrorCode.INVALID_PLAN and "zz" in out.message
    assert [i for _, i, _ in dispatched] == [0]  # the valid first segment was still executed
    assert out.tokens < len(engine.encode(bad))  # generation stopped at the error, not at the end
    assert engine.memory().generations == 0


def test_a_plan_that_stops_parsing_before_any_segment_never_says_it_is_executing():
    """Nothing was sent to the robot: the request goes from generating straight to its INVALID_PLAN result; one
    whose first segment is out says executing while that segment runs."""
    sched, _, clock = make()
    sched.submit(request("none", plan="zz(3);" + "mf(10);" * 30))
    sched.submit(request("one", plan="mf(50);zz(3);" + "mf(10);" * 30))
    states: dict[str, list] = {"none": [], "one": []}
    events: list = []
    while sched.busy():
        events += sched.step()
    for ev in events:
        if isinstance(ev, StateChanged):
            states[ev.req_id].append(ev.state)
    assert RequestState.EXECUTING not in states["none"], states["none"]
    assert states["one"][-1] == RequestState.EXECUTING
    assert {ev.req_id: ev.outcome.error_code for ev in events if isinstance(ev, RequestFinished)} == \
        {"none": ErrorCode.INVALID_PLAN}


def test_prompt_longer_than_the_model_context_is_rejected_before_the_engine():
    sched, engine, _ = make()
    engine.max_context = 64
    req = request("a")
    req.context = "a very cluttered room " * 40
    with pytest.raises(RequestError) as err:
        sched.submit(req)
    assert err.value.code == ErrorCode.INVALID_TASK and "64 tokens" in err.value.message
    assert engine.memory().generations == 0


def test_timely_priority_follows_the_reported_completion():
    """E (the expected end of the previous execution) moves to the executor's real finish time, and Eq. 4 with it."""
    sched, _, clock = make("timely")
    sched.submit(request("a"))
    seg = None
    while seg is None:
        seg = next((ev.segment for ev in sched.step() if isinstance(ev, SegmentReady)), None)
    gen = sched.generations()[0]
    policy, estimated = sched.policy, gen.expected_exec_end
    now = clock()
    before = policy.priority(gen, now)
    assert before == pytest.approx(1.0 / (0.09 * max(estimated - now, 0.09)))
    sched.on_execution_started("a", seg.index, now)
    finished = now + 0.02                        # far sooner than the estimate (the robot was fast)
    sched.on_execution_finished("a", seg.index, finished)
    assert gen.expected_exec_end == pytest.approx(finished)
    late = finished + 0.1                        # the robot has waited 0.1 s (+ G + d) for its next segment
    after = policy.priority(gen, late)
    assert after == pytest.approx((1.0 - 2.0 * (0.1 + 0.09 + 0.008)) / (0.09 * 0.09))
    assert after > before


def test_timely_preempts_running_generations_mid_segment_for_an_urgent_arrival_and_resumes_them_exactly():
    from timely_llm_ros.core.policies.timely import options_from_skill_sets
    from timely_llm_ros.evaluation.sim import load_latency_model

    lat = load_latency_model("llama3-8b-rtx4090")
    clock = VirtualClock()
    engine = SimEngine(lat, clock)
    policy = make_policy("timely", max_batch=16, options=options_from_skill_sets(load_skill_sets()))
    sched = PlanScheduler(engine, policy, load_skill_sets(), load_exec_models(), clock)
    for i in range(8):
        engine.set_prompt_tokens(f"arm{i}", 2884)
        sched.submit(request(f"arm{i}", ARM_PLAN * 2, robot="arm"))
    events = []
    while len(sched._running) < 8 or any(g.tokens_in_segment == 0 for g in sched._running.values()):
        events += sched.step()
    assert sched.preemptions == 0
    engine.set_prompt_tokens("u", 2884)
    sched.submit(request("u", "mb(50);ml(30);", urgency="urgent", t=clock()))
    events += sched.step()
    running = {g.req_id for g in sched.generations() if g.state == RequestState.GENERATING}
    suspended = [g for g in sched.generations() if g.req_id.startswith("arm") and g.req_id not in running]
    assert "u" in running and sched.preemptions > 0
    assert suspended and all(g.state == RequestState.SUSPENDED and g.tokens_in_segment > 0 for g in suspended)
    _, finished = run_to_end(sched, clock, events0=events)
    assert finished["u"].ok and finished["u"].response_time < 0.2     # the urgent one made its ERT
    for i in range(8):                                                 # the preempted plans resumed token-exact
        assert finished[f"arm{i}"].ok and finished[f"arm{i}"].plan_text.strip() == (ARM_PLAN * 2).strip()


def first_segment(sched):
    while True:
        for ev in sched.step():
            if isinstance(ev, SegmentReady):
                return ev.segment


def test_execution_start_refreshes_e_and_the_open_loop_ablation_ignores_reports():
    for policy, follows in (("timely", True), ("timely-open-loop", False)):
        sched, _, clock = make(policy)
        sched.submit(request("a"))
        seg = first_segment(sched)
        gen = sched.generations()[0]
        estimated = gen.expected_exec_end
        late_start = clock() + 3.0                    # the robot started 3 s later than expected
        sched.on_execution_started("a", seg.index, late_start)
        assert (gen.expected_exec_end == pytest.approx(late_start + seg.est_exec_s)) is follows
        sched.on_execution_finished("a", seg.index, late_start + 0.1)
        assert (gen.expected_exec_end == pytest.approx(late_start + 0.1)) is follows
        if not follows:
            assert gen.expected_exec_end == pytest.approx(estimated)


def test_failed_segment_replans_with_a_context_naming_the_failed_skill():
    clock = VirtualClock()
    engine = SimEngine(LATENCY, clock)
    from timely_llm_ros.core.scheduler import SchedulerConfig
    sched = PlanScheduler(engine, make_policy("fcfs"), load_skill_sets(), load_exec_models(), clock,
                          SchedulerConfig(replan_on_failure=1))
    sched.submit(request("a", "mf(50);tc(90);mb(20);"))
    seg = first_segment(sched)
    sched.on_execution_started("a", seg.index, clock())
    events = sched.on_execution_finished("a", seg.index, clock() + 0.5, ok=False, error="motor stalled")
    assert not any(isinstance(ev, RequestFinished) for ev in events)
    gen = sched.generations()[0]
    prompt = engine.decode(gen.prompt_ids)
    assert "failed at skill mf" in prompt and "motor stalled" in prompt and gen.expected_exec_end == clock() + 0.5
    clock.advance(0.5)
    dispatched, finished = run_to_end(sched, clock)
    out = finished["a"]
    assert out.ok and out.replans == 1
    # the replanned generation redoes the failed segment and the rest; numbering continues
    assert [t.strip() for _, _, t in dispatched] == ["mf(50);", "tc(90);", "mb(20);"]
    assert [i for _, i, _ in dispatched][0] >= 1
    # without the option the request ends EXECUTION_FAILED (test_executor_failure_ends_the_request_with_its_code)


def test_a_replan_withdraws_the_segments_already_sent_behind_the_failed_one():
    """fcfs streams the plan: all three segments are out when the first fails. The replan withdraws the two
    behind it (the server cancels them at the robot), and none of the new plan's segments reuses their numbers."""
    clock = VirtualClock()
    engine = SimEngine(LATENCY, clock)
    from timely_llm_ros.core.scheduler import SchedulerConfig, SegmentsWithdrawn
    sched = PlanScheduler(engine, make_policy("fcfs"), load_skill_sets(), load_exec_models(), clock,
                          SchedulerConfig(replan_on_failure=1))
    sched.submit(request("a", "mf(50);tc(90);mb(20);"))
    sent = []
    while len(sent) < 3 and sched.busy():
        sent += [ev.segment.index for ev in sched.step() if isinstance(ev, SegmentReady)]
    assert sent == [0, 1, 2]
    sched.on_execution_started("a", 0, clock())
    events = sched.on_execution_finished("a", 0, clock() + 0.5, ok=False, error="motor stalled")
    assert [ev for ev in events if isinstance(ev, SegmentsWithdrawn)] == [SegmentsWithdrawn("a", (1, 2))]
    clock.advance(0.5)
    dispatched, finished = run_to_end(sched, clock)
    assert finished["a"].ok and [i for _, i, _ in dispatched] == [3, 4, 5]


@pytest.mark.parametrize("policy", ["timely", "timebill", "rtlm", "semantic"])
def test_a_long_running_scheduler_keeps_no_per_request_state_beyond_its_outcome_bound(policy):
    """A server runs for days: finished requests must not accumulate in the scheduler or the policy."""
    clock = VirtualClock()
    engine = SimEngine(LATENCY, clock)
    pol = make_policy(policy, max_batch=4, options=None if policy != "semantic" else
                      {"class_levels": {"normal": 3, "urgent": 0}})
    sched = PlanScheduler(engine, pol, load_skill_sets(), load_exec_models(), clock,
                          SchedulerConfig(keep_outcomes=3))
    for wave in range(3):
        events = []
        for i in range(4):
            events += sched.submit(request(f"w{wave}-{i}", t=clock()))
        run_to_end(sched, clock, exec_s=0.1, events0=events)
    assert len(sched.outcomes) == 3 and set(sched.outcomes) <= {f"w2-{i}" for i in range(4)}
    assert all(o.error_code == ErrorCode.NONE for o in sched.outcomes.values())
    per_request = {name: value for name, value in vars(pol).items()
                   if isinstance(value, (dict, set)) and any(str(k).startswith("w") for k in value)}
    assert per_request == {}, f"{policy} still holds state of finished requests: {sorted(per_request)}"
    held = {name: value for name, value in vars(sched.execution).items() if isinstance(value, dict) and value}
    assert held == {}, f"the execution tracker still holds finished plans or idle robots: {sorted(held)}"
    lengths = getattr(pol, "_lengths", None)
    assert lengths is None or not lengths._n


def test_kv_reloads_are_paid_once_and_never_evict_a_member_of_the_same_batch():
    """Budget for two 101-token KVs (1 byte/token), reload 1,000 bytes/s (0.101 s per generation). a, b, c
    prefill in turn, so c's arrival pushes a (least recently suspended) to host. The batch [a, b] must resume b
    (resident) before a: resuming a first would evict b to make room and reload it in the same step. The step
    costs one reload (a) plus the decode; the scheduler's decode measurement leaves the reload out, and a
    running generation carries no reload cost into the next pick (admission would count it again)."""
    from timely_llm_ros.core.policies.base import Policy

    class Scripted(Policy):
        name = "scripted-test"

        def __init__(self, script):
            super().__init__(8)
            self.script, self.seen = list(script), []

        def priority(self, gen, now):
            return 0.0

        def select(self, waiting, running, ctx):
            self.seen.append({g.req_id: g.reload_s for g in running})
            by_id = {g.req_id: g for g in [*waiting, *running]}
            return [by_id[r] for r in self.script.pop(0)]

    lat = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0, kv_bytes_per_token=1.0, kv_budget_bytes=250.0,
                       reload_bytes_per_s=1000.0)
    clock = VirtualClock()
    engine = SimEngine(lat, clock)
    policy = Scripted([["a"], ["b"], ["c"], ["a", "b"], ["a", "b"]])
    sched = PlanScheduler(engine, policy, load_skill_sets(), load_exec_models(), clock)
    for rid in "abc":
        engine.set_prompt_tokens(rid, 100)
        sched.submit(request(rid, ARM_PLAN * 3, robot="arm"))
    for _ in range(3):
        sched.step()
    assert engine.reload_s("a") == pytest.approx(0.101) and engine.reload_s("b") == 0.0
    sched.step()                                         # [a, b]: one reload, then a decode of two
    assert sched.last_step_time == pytest.approx(0.101 + 0.022)
    assert sched.decode_step_s == pytest.approx(0.022) and sched.decode_batch == 2
    sched.step()
    assert policy.seen[-1] == {"a": 0.0, "b": 0.0}


def _same_robot(rid: str, plan: str = DRONE_PLAN, urgency: str = "normal", t: float = 0.0, tuf=None):
    req = request(rid, plan, urgency=urgency, t=t)
    req.agent_id = "drone_1"
    if tuf is not None:
        req.tuf = tuf
    return req


def test_submit_reports_queued_with_the_requests_progress():
    sched, _, _ = make()
    [queued] = sched.submit(request("a"))
    assert isinstance(queued, StateChanged) and queued.state == RequestState.QUEUED
    assert (queued.progress.segments_generated, queued.progress.segments_executed) == (0, 0)


def test_a_queued_plans_first_segment_is_not_expected_to_start_before_the_running_plan_ends():
    """Two plans for one robot: the second is held while the first runs. Its generation is weighed with the
    robot's earliest start (the first plan's E): the timely policy does not count on the robot starting it sooner,
    ranks it below the same request for a free robot, and drops it when even that start earns nothing."""
    sched, _, clock = make("timely")
    sched.submit(_same_robot("a"))
    first = first_segment(sched)
    sched.on_execution_started("a", first.index, clock())
    lenient = TimeUtility(ert=0.5, alpha=-0.01, beta=1.0)     # served late rather than dropped
    sched.submit(_same_robot("b", t=clock(), tuf=lenient))
    gens = {g.req_id: g for g in sched.generations()}
    a, b = gens["a"], gens["b"]
    assert b.earliest_start == pytest.approx(a.expected_exec_end)
    now, policy = clock(), sched.policy
    free = Generation(req=request("free", t=b.req.arrival), prompt_ids=[])
    free.req.tuf = lenient
    ready = now + policy.segment_time("drone") + policy.network_delay_s
    assert a.expected_exec_end > ready
    assert policy.utility_if_started(b, now) == pytest.approx(lenient(a.expected_exec_end - b.req.arrival))
    assert policy.utility_if_started(free, now) == pytest.approx(lenient(ready - b.req.arrival))
    assert policy.priority(b, now) < policy.priority(free, now)
    normal = _same_robot("c", t=now)
    hopeless = Generation(req=normal, prompt_ids=[], earliest_start=a.expected_exec_end)
    assert a.expected_exec_end - now > 1.5 and policy.should_drop(hopeless, now)   # normal: no utility after 1.5 s
    assert policy.should_drop(Generation(req=normal, prompt_ids=[]), now) is None
    # the robot never gets b's segments while a runs: they are sent once a has ended
    sent, finished = [], {}
    pending: list = []
    for _ in range(10_000):
        if "b" in finished:
            break
        events, pending = pending + (sched.step() if sched.busy() else []), []
        if not events and not sched.busy():
            events = sched.on_execution_finished("a", first.index, clock())     # a's first segment ends
        for ev in events:
            if isinstance(ev, SegmentReady):
                sent.append((ev.req_id, clock()))
                sched.on_execution_started(ev.req_id, ev.segment.index, clock())
                clock.advance(0.5)
                pending += sched.on_execution_finished(ev.req_id, ev.segment.index, clock())
            elif isinstance(ev, RequestFinished):
                finished[ev.req_id] = ev.outcome
    assert finished["a"].ok and finished["b"].ok
    assert [t for r, t in sent if r == "b"] and min(t for r, t in sent if r == "b") >= finished["a"].finished_at


def test_an_urgent_plan_preempts_the_robots_running_plan_under_urgent_preempts():
    """The robot's rule urgent_preempts: a plan with a shorter ERT takes the robot as soon as its first segment is
    ready. It is sent with preempts; the running plan's generation stops and the request ends PREEMPTED once the
    robot reports its segment there PREEMPTED."""
    clock = VirtualClock()
    engine = SimEngine(LATENCY, clock)
    sched = PlanScheduler(engine, make_policy("fcfs"), load_skill_sets(), load_exec_models(), clock,
                          plan_rule=lambda robot: "urgent_preempts")
    sched.submit(_same_robot("slow", DRONE_PLAN * 3))
    slow = first_segment(sched)
    sched.on_execution_started("slow", slow.index, clock())
    sched.submit(_same_robot("fast", "mb(50);ml(30);", urgency="urgent", t=clock()))
    events = []
    while not any(isinstance(ev, SegmentReady) and ev.req_id == "fast" for ev in events):
        events += sched.step()
    events0 = [ev for ev in events if isinstance(ev, SegmentReady)]
    assert [ev.req_id for ev in events0][-1] == "fast" and events0[-1].preempts
    assert not sched.is_running("slow") and engine.memory().generations == 1   # its generation stopped
    events = sched.on_execution_finished("slow", slow.index, clock() + 0.2, ok=False, ended=SegmentStatus.PREEMPTED,
                                         error="preempted: plan fast took the robot", code=ErrorCode.PREEMPTED)
    [out] = [ev.outcome for ev in events if isinstance(ev, RequestFinished)]
    assert out.error_code == ErrorCode.PREEMPTED and "more urgent" in out.message
    _, finished = run_to_end(sched, clock, events0=[ev for ev in events0 if ev.req_id == "fast"])
    assert finished["fast"].ok


def test_dry_runs_take_no_robot_and_count_as_executed_when_generated():
    sched, _, clock = make()
    events = []
    for rid in ("a", "b"):
        req = _same_robot(rid)
        req.dry_run = True
        events += sched.submit(req)
    while sched.busy():
        events += sched.step()
    assert not any(isinstance(ev, SegmentReady) for ev in events)
    outs = {ev.req_id: ev.outcome for ev in events if isinstance(ev, RequestFinished)}
    assert all(o.ok and all(s.exec_finished is not None for s in o.segments) for o in outs.values())
    assert set(outs) == {"a", "b"}


def test_a_robot_that_never_accepts_a_segment_ends_the_request_unavailable_and_it_is_withdrawn():
    clock = VirtualClock()
    sched = PlanScheduler(SimEngine(LATENCY, clock), make_policy("fcfs"), load_skill_sets(), load_exec_models(),
                          clock, SchedulerConfig(ack_timeout_s=2.0, exec_timeout_s=5.0))
    sched.submit(request("a"))
    seg = first_segment(sched)
    assert sched.check_deadlines() == []
    clock.advance(2.5)
    events = sched.check_deadlines()
    withdrawn = [ev for ev in events if isinstance(ev, SegmentsWithdrawn)]
    assert withdrawn and withdrawn[0].indices[0] == seg.index and withdrawn[0].reason == ErrorCode.EXECUTOR_UNAVAILABLE
    [out] = [ev.outcome for ev in events if isinstance(ev, RequestFinished)]
    assert out.error_code == ErrorCode.EXECUTOR_UNAVAILABLE and "did not accept" in out.message


def test_g_is_measured_as_the_engine_time_of_a_segments_steps_not_the_time_it_waited_suspended():
    """Online G (the server's) follows each segment's generation time: the steps it was in. An arm preempted
    mid-segment for an urgent arrival waits for it suspended; counting that wait made every arm segment look slower
    the longer the queue, until an urgent request arriving behind them ranked as hopeless (Eq. 4's U < 0)."""
    from timely_llm_ros.core.policies.timely import TimelyPolicy, options_from_skill_sets
    from timely_llm_ros.evaluation.sim import load_latency_model

    observed: list[tuple[str, float]] = []

    class Recording(TimelyPolicy):
        def observe_segment(self, robot_type: str, gen_time_s: float) -> None:
            observed.append((robot_type, gen_time_s))
            super().observe_segment(robot_type, gen_time_s)

    clock = VirtualClock()
    engine = SimEngine(load_latency_model("llama3-8b-rtx4090"), clock)
    in_steps: dict[str, float] = {}
    engine_step = engine.step

    def step(gen_ids):
        result = engine_step(gen_ids)
        for gid in gen_ids:
            in_steps[gid] = in_steps.get(gid, 0.0) + result.elapsed_s
        return result

    engine.step = step
    policy = Recording(max_batch=16, options={**options_from_skill_sets(load_skill_sets()), "online_gen_time": True})
    sched = PlanScheduler(engine, policy, load_skill_sets(), load_exec_models(), clock)
    for i in range(8):
        engine.set_prompt_tokens(f"arm{i}", 2884)
        sched.submit(request(f"arm{i}", ARM_PLAN * 2, robot="arm"))
    while len(sched._running) < 8 or any(g.tokens_in_segment == 0 for g in sched._running.values()):
        sched.step()
    engine.set_prompt_tokens("u", 2884)
    sched.submit(request("u", "mb(50);ml(30);", urgency="urgent", t=clock()))
    sched.step()
    suspended = [g.req_id for g in sched.generations() if g.state == RequestState.SUSPENDED]
    assert suspended                                   # arms wait for the urgent one mid-segment
    firsts: dict[str, tuple[float, float]] = {}        # first segment: (engine time of its steps, wall time)
    while len(firsts) < 8:
        for ev in sched.step():
            if isinstance(ev, SegmentReady) and ev.segment.index == 0 and ev.req_id.startswith("arm"):
                firsts[ev.req_id] = (in_steps[ev.req_id], ev.segment.gen_finished - ev.segment.gen_started)
    arm_times = [t for rt, t in observed if rt == "arm"]
    assert len(arm_times) == 8
    assert sorted(arm_times) == pytest.approx(sorted(engine_s for engine_s, _ in firsts.values()))
    for rid in suspended:                              # the wait suspended is not in it
        engine_s, wall_s = firsts[rid]
        assert engine_s < wall_s - 1e-6
