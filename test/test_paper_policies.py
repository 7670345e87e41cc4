"""The other papers' schedulers (SLICE, RT-LM, semantic, TimeBill): formulas pinned, behaviour on the simulator,
and each paper's headline direction on its own preset (benchmarks/paper_presets.py, one seed)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from timely_llm_ros.core.policies import SchedulingContext, make_policy
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine
from timely_llm_ros.evaluation.sim.simulator import Simulator
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility
from timely_llm_ros.engine.routed import RoutedEngine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import paper_presets  # noqa: E402

CTX = SchedulingContext(now=0.0, kv_free_bytes=float("inf"), kv_bytes_per_token=1.0, step_time_s=None)


def gen(rid: str, *, task: str = "Tell me what you see", arrival: float = 0.0, tuf: TimeUtility | None = None,
        **fields) -> Generation:
    req = PlanRequest(req_id=rid, agent_id=f"chat_{rid}", robot_type="chat", task=task,
                      tuf=tuf or DEFAULT_URGENCY_CLASSES["normal"], arrival=arrival, **fields)
    return Generation(req=req, prompt_ids=[2, 3, 4])


# ------------------------------------------------------------------ SLICE
def test_slice_spread_mask_and_period_pinned():
    pol = make_policy("slice", options={"l_base_ms": 0.0, "l_per_seq_ms": 128 / 9})
    # a 4-token/s task in a 10-column cycle decodes in evenly spaced columns (the paper's literal mask: 0,1,2,3)
    assert [c for c in range(10) if pol.runs(4, 10, c)] == [2, 4, 7, 9]
    assert [c for c in range(10) if pol.runs(10, 10, c)] == list(range(10))
    # 9 tasks at 10/9/4 tokens/s: 69 token slots * 128/9 ms = 981.3 ms < 1 s
    assert pol.period_ms([10] * 3 + [9] * 3 + [4] * 3) == pytest.approx(69 * 128 / 9)
    assert pol.rate(gen("a", tpot_slo_ms=120)) == 9 and pol.rate(gen("b", tpot_slo_ms=250)) == 4


def test_slice_selects_by_utility_rate_within_one_cycle():
    pol = make_policy("slice", max_batch=16, options={"l_base_ms": 0.0, "l_per_seq_ms": 128 / 9})
    hi = TimeUtility(5.0, -1.0, 100.0)
    tasks = [gen(f"t{i}", tpot_slo_ms=100, tuf=hi) for i in range(9)]
    low = gen("low", tpot_slo_ms=250)          # r = 1 * 250 < 100 * 100: the cycle is full before it
    batch = pol.select([*tasks, low], [], CTX)
    assert low not in batch and len(batch) == 7   # 7 * 10 slots * 14.2 ms = 995 ms; an 8th would need 1138 ms
    for g in batch:
        g.prefilled = True
    # the mask then gives every selected 10-token/s task every column
    assert pol.select([low, *[t for t in tasks if t not in batch]], batch, CTX) == batch


def test_slice_static_preset_meets_all_classes_where_fcfs_meets_the_loosest():
    rows = {r["policy"]: r for r in paper_presets.run_slice(["fcfs", "slice"], [1])}
    assert rows["slice"]["attain_all"].startswith("1.000")
    assert rows["fcfs"]["attain_tpot250"].startswith("1.000")
    assert rows["fcfs"]["attain_tpot100"].startswith("0.000") and rows["fcfs"]["attain_tpot120"].startswith("0.000")


# ------------------------------------------------------------------ RT-LM
class FixedLength:
    """A stand-in predictor with known u per task text (the real MLP is tested in test_predictors.py)."""

    tau = 40.0

    def __init__(self, u: dict[str, float]) -> None:
        self.u = u

    def predict(self, task: str, context: str = "") -> float:
        return self.u[task]


def test_rtlm_priority_normalised_u_pinned():
    pol = make_policy("rtlm", options={"predictor": FixedLength({"a": 10, "b": 10, "c": 20}), "eta_s": 0.02})
    tight = gen("t", task="a", time_budget_s=2.0)
    loose = gen("l", task="b", time_budget_s=10.0)
    # p = (1 - u/tau) / (d - t - eta u) = 0.75 / 1.8 and 0.75 / 9.8
    assert pol.priority(tight, 0.0) == pytest.approx(0.75 / 1.8)
    assert pol.priority(loose, 0.0) == pytest.approx(0.75 / 9.8)
    # with raw u the numerator is 1 - 10 < 0 and the order inverts (loose before tight): normalised keeps it right
    raw = lambda u, slack: (1 - u) / slack  # noqa: E731
    assert raw(10, 1.8) < raw(10, 9.8) and pol.priority(tight, 0.0) > pol.priority(loose, 0.0)
    late = gen("x", task="c", time_budget_s=0.1)
    assert pol.priority(late, 0.0) > pol.priority(tight, 0.0)   # slack <= 0: most urgent


def test_rtlm_consolidation_cuts_at_length_jumps():
    pol = make_policy("rtlm", options={"predictor": FixedLength({str(u): u for u in (10, 12, 30, 40, 100)}),
                                       "lam": 1.5})
    gens = [gen(f"g{u}", task=str(u)) for u in (40, 100, 10, 30, 12)]
    groups = pol.consolidate(gens)
    assert [[pol.u(g) for g in gr] for gr in groups] == [[10, 12], [30, 40], [100]]


def test_rtlm_offloads_long_requests_to_the_second_instance_in_simulation():
    tasks = paper_presets.rtlm_tasks(1, n=20, rate=2.0)
    policy = paper_presets.build_policy("rtlm", 4)
    lat = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
    clock = VirtualClock()
    engine = RoutedEngine(SimEngine(lat, clock), SimEngine(paper_presets.RTLM_CPU, VirtualClock()),
                          route=policy.routes_to_secondary, clock=clock, sim=True)
    res = Simulator(policy, lat, engine=engine, clock=clock).run(tasks)
    done = {o.req.req_id: o for o in res.outcomes if o.state == RequestState.DONE}
    assert len(done) == len(tasks)
    flagged = {rid for rid, o in done.items() if policy.predictor.predict(o.req.task, o.req.context) > policy.tau}
    assert flagged and engine.secondary_ids == flagged   # exactly the u > tau ones ran on the second instance
    long_ids = sorted(done, key=lambda i: -len(done[i].plan_text))[:2]
    assert set(long_ids) & engine.secondary_ids
    for t in tasks:   # offloaded or not, every plan came out whole
        assert done[t.task_id].plan_text.strip() == t.plan.strip()


# ------------------------------------------------------------------ semantic scheduling
class Levels:
    """A stand-in urgency classifier with known levels per text (the real one: test_predictors.py)."""

    def __init__(self, levels: dict[str, int]) -> None:
        self.levels = levels

    def level(self, text: str) -> int:
        return self.levels[text]


class Tokens:
    def __init__(self, n: int) -> None:
        self.n = n

    def predict(self, task: str, context: str = "") -> int:
        return self.n


def test_semantic_remaining_time_and_keep_vs_recompute_pinned():
    pol = make_policy("semantic", options={"a1": 1e-8, "a2": 8e-5, "g1": 2.5e-7, "g2": 0.02, "b": 7.28e-6,
                                           "classifier": Levels({}), "length_predictor": Tokens(10)})
    g = gen("a", urgency="normal")
    g.prompt_ids = list(range(100))
    # prefill 1e-8*100^2 + 8e-5*100 = 0.0081; decode sum_{m'=1..10} 2.5e-7 (100 + m' - 1) + 0.02 = 0.20026125
    assert pol.remaining_s(g) == pytest.approx(0.0081 + 2.5e-7 * (10 * 100 + 45) + 0.2)
    # keep iff b < a1 n + a2: n = 100 -> 7.28e-6 < 8.1e-5 keep; the paper's sentence (offload if b > ...) would recompute
    assert pol.keep_prompt_kv(100)
    slow_link = make_policy("semantic", options={"b": 1e-4, "a1": 1e-8, "a2": 8e-5})
    assert not slow_link.keep_prompt_kv(100) and slow_link.keep_prompt_kv(3000)   # 1e-4 < 1e-8*3000 + 8e-5


def test_semantic_strict_urgency_and_stage_aware_selection():
    pol = make_policy("semantic", max_batch=2, options={"classifier": Levels({"fire": 0, "tidy": 4, "look": 3}),
                                                         "length_predictor": Tokens(20)})
    tidy, look = gen("t", task="tidy"), gen("l", task="look")
    tidy.prefilled = look.prefilled = True
    fire = gen("f", task="fire")
    # the emergency's prefill leads: it runs now and takes the least urgent running one's slot (strict preemption)
    assert pol.select([fire], [tidy, look], CTX) == [fire, look]
    assert pol.evicted == {"t": "offload"}
    # once the emergency decodes, a waiting routine prefill does not join the decode batch (stage-aware)
    fire.prefilled = True
    new = gen("n", task="look")
    assert pol.select([new, tidy], [fire, look], CTX) == [fire, look]


def test_semantic_burst_keeps_most_urgent_latency_flat_while_fcfs_grows():
    rows = {r["policy"]: r for r in paper_presets.run_semantic(["fcfs", "semantic"], [1], _GPU, (5, 100))}
    val = lambda pol, b: float(rows[pol][f"L0_latency_s_b{b}"].split()[0])  # noqa: E731
    assert val("fcfs", 100) > 5 * val("fcfs", 5)
    assert val("semantic", 100) < 2 * val("semantic", 5) and val("semantic", 100) < val("fcfs", 100) / 5


_GPU = LatencyModel.from_dict({"prefill": {"a": 1.0e-8, "b": 8.0e-5, "c": 0.0141},
                               "decode": {"base": 0.0205, "per_seq": 0.0008, "per_kv_token": 2.5e-7},
                               "network_delay_s": 0.008, "cached_prefix_tokens": 2600})


# ------------------------------------------------------------------ TimeBill
def test_alpha_star_corrected_closed_form_pinned_and_printed_eq11_disagrees():
    from timely_llm_ros.core.predictors.ete import ExecTimeEstimator, alpha_star, printed_eq11

    # N_x 10000, N_W 101, p 1e-6, q 0.03, R 3.5 s:
    # 1 - 3.5/(1e-6*1e4*100) + 99/20000 + 0.03/(1e-6*1e4) = 1 - 3.5 + 0.00495 + 3 = 0.50495
    a = alpha_star(3.5, 10_000, 101, 1e-6, 0.03)
    assert a == pytest.approx(0.50495)
    # it is the smallest ratio that fits: the decode phase at alpha* takes exactly R
    ete = ExecTimeEstimator(0, 0, 0, 1e-6, 0.03)
    assert ete.decode_phase_s(10_000, a, 101) == pytest.approx(3.5)
    # printed Eq. 11 (stray p in the middle term) drops 99/20000 to 4.95e-9: a different, too small, ratio
    assert printed_eq11(3.5, 10_000, 101, 1e-6, 0.03) == pytest.approx(0.5) != pytest.approx(a)
    assert ete.decode_phase_s(10_000, 0.5, 101) > 3.5   # ... and overruns the budget
    # a generous budget: the corrected form clamps at 0, the printed one goes negative; tight: alpha_max
    assert alpha_star(20.0, 10_000, 101, 1e-6, 0.03) == 0.0 and printed_eq11(20.0, 10_000, 101, 1e-6, 0.03) < 0
    assert alpha_star(0.5, 10_000, 101, 1e-6, 0.03) == 0.95


def test_ete_least_squares_recovers_coefficients():
    from timely_llm_ros.core.predictors.ete import ExecTimeEstimator

    pre = [(n, 2e-8 * n * n + 5e-5 * n + 0.01) for n in (100, 500, 1000, 4000, 8000)]
    dec = [(n, 6e-7 * n + 0.04) for n in (100, 2000, 9000)]
    est, m = ExecTimeEstimator.fit(pre, dec)
    assert (est.a, est.b, est.c, est.p, est.q) == pytest.approx((2e-8, 5e-5, 0.01, 6e-7, 0.04), rel=1e-6)
    assert m["prefill_mape"] < 1e-9 and m["decode_step_mape"] < 1e-9


def test_eviction_shortens_the_simulated_context():
    from timely_llm_ros.core.eviction import EvictingEngine

    lat = LatencyModel(prefill_a=0.0, prefill_b=0.0, prefill_c=0.0, decode_base=0.0, decode_per_seq=0.0,
                       decode_per_kv_token=1e-6)
    eng = EvictingEngine(SimEngine(lat, VirtualClock()), {"a": 0.75}.get)
    eng.add("a", list(range(1000)), 5)
    eng.step(["a"])                      # prefill: the ratio applies from the first decode
    assert eng.step(["a"]).elapsed_s == pytest.approx(1e-6 * (250 + 1))
    assert eng.applied == {"a": 0.75}


def test_timebill_budget_sweep_completes_like_alpha95_with_less_eviction():
    rows = {r["policy"]: r for r in paper_presets.run_timebill(
        ["timebill", "timebill-a50", "timebill-a75", "timebill-a95"], [1], None, (5.0,))}
    val = lambda pol, k: float(rows[pol][k].split()[0])  # noqa: E731
    tb_done, tb_alpha = val("timebill", "within_T5"), val("timebill", "alpha_T5")
    assert tb_alpha < 0.75 and tb_done >= val("timebill-a95", "within_T5")
    for fixed in ("timebill-a50", "timebill-a75"):   # fixed ratios evicting about as much complete fewer
        assert val(fixed, "within_T5") < tb_done


def test_timebill_kill_and_skip_next():
    lat = paper_presets.TIMEBILL_DEV
    tasks = paper_presets.timebill_tasks(1, 1.0, n=12, rate=2.0)
    same_agent = [paper_presets.dataclasses.replace(t, agent_id="drone_0") for t in tasks]
    out = {}   # one named robot: Skip-Next skips that robot's next job, so its jobs must share it
    for overrun in ("kill", "skip-next"):
        pol = make_policy("timebill", 4, {"overrun": overrun, "ete": paper_presets.TIMEBILL_ETE, "fixed_alpha": 0.0})
        out[overrun] = Simulator(pol, lat, seed=1, robots="named").run(same_agent).outcomes
    kill = [o for o in out["kill"] if "TimeBill Kill" in o.message]
    skip = [o for o in out["skip-next"] if "Skip-Next" in o.message]
    assert kill and all(o.state == RequestState.DROPPED for o in kill)
    assert skip and not any("Kill" in o.message for o in out["skip-next"])


# ------------------------------------------------------------------ Plan goal fields these policies read
def test_goal_fields_budget_slos_and_text_only_urgency():
    from timely_llm_ros.core.errors import ErrorCode, RequestError
    from timely_llm_ros.core.validation import GoalFields, validate_goal

    types = {"drone": object()}
    req = validate_goal(GoalFields("drone_1", "drone", "look for the cat", time_budget=4.0, tpot_slo_ms=120.0,
                                   ttft_slo_ms=800.0), "r1", 0.0, types, DEFAULT_URGENCY_CLASSES)
    assert (req.time_budget_s, req.tpot_slo_ms, req.ttft_slo_ms) == (4.0, 120.0, 800.0)
    assert req.urgency == "" and req.tuf == DEFAULT_URGENCY_CLASSES["normal"]   # text-only: normal TUF, no class
    named = validate_goal(GoalFields("drone_1", "drone", "x", urgency_class="urgent"), "r2", 0.0, types,
                          DEFAULT_URGENCY_CLASSES)
    assert named.time_budget_s == 0.0 and named.urgency == "urgent"
    with pytest.raises(RequestError) as err:
        validate_goal(GoalFields("drone_1", "drone", "x", urgency_class="normal", time_budget=-1.0), "r3", 0.0,
                      types, DEFAULT_URGENCY_CLASSES)
    assert err.value.code == ErrorCode.INVALID_TIME_REQUIREMENT and "time_budget" in str(err.value)


# ------------------------------------------------------------------ each policy serves the fleet over ROS
@pytest.fixture(scope="module")
def drone_executor():
    pytest.importorskip("rclpy")
    from ros_harness import start_executor

    node = start_executor("drone_1", "drone", 0.05)
    try:
        yield node
    finally:
        node.stop()


@pytest.mark.parametrize("policy", ["slice", "rtlm", "semantic", "timebill"])
def test_policy_serves_plans_over_ros(drone_executor, policy):
    """The real server (real planner, DDS on loopback) runs each paper policy by name: a goal with the new
    time_budget / tpot_slo_ms fields, and a text-only-urgency goal (empty class, zero TUF) both complete."""
    from action_msgs.msg import GoalStatus

    from ros_harness import plan_client, start_server

    server = start_server(f"policy:={policy}", "max_batch:=2", "expected_agents:=[drone_1]")
    try:
        server.wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            runs = [client.send(agent_id="drone_1", robot_type="drone", task="look for the cat",
                                context="cat, chair, table", urgency_class="normal", time_budget=60.0,
                                tpot_slo_ms=500.0, ttft_slo_ms=5000.0),
                    client.send(agent_id="drone_1", robot_type="drone", task="a ball is coming at you, dodge it",
                                context="ball in front, 50 cm away")]
            for run in runs:
                status, result = run.result(180.0)
                assert status == GoalStatus.STATUS_SUCCEEDED, (result.error_code, result.error_message)
                assert result.error_code == 0 and result.segments and all(s.executed for s in result.segments)
    finally:
        server.stop()
    assert f"policy={policy}" in server.output()


def test_fifo_static_and_rtlm_static_never_join_a_running_batch():
    first, second = gen("a", arrival=0.0), gen("b", arrival=1.0)
    first.prefilled = True
    assert make_policy("fifo-static", 4).select([second], [first], CTX) == [first]
    assert make_policy("fifo-static", 4).select([second, first], [], CTX) == [first, second]
    pol = make_policy("rtlm", 4, {"predictor": FixedLength({"Tell me what you see": 10}), "static": True})
    assert pol.select([second], [first], CTX) == [first]
    assert pol.select([second], [], CTX) == [second]


def test_engine_wrappers_report_how_their_engine_runs_a_step():
    """timely's prefill_alone rule is off on engines that fuse a step's prefills and decodes (vLLM); the RT-LM and
    TimeBill wrappers must say what the engine they wrap does, not the Engine default."""
    from timely_llm_ros.core.eviction import EvictingEngine

    lat = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
    for fused in (False, True):
        inner = SimEngine(lat, VirtualClock())
        # a stand-in for VllmEngine (it declares fused_steps); vLLM is not built here
        inner.capabilities = dataclasses.replace(inner.capabilities, fused_steps=fused)
        assert EvictingEngine(inner, {}.get).capabilities.fused_steps is fused
        assert RoutedEngine(inner, SimEngine(lat, VirtualClock())).capabilities.fused_steps is fused


def test_the_routed_engine_reports_the_prefill_its_chosen_engine_has_left():
    """RT-LM's routed engine asks the engine a generation was routed to how much prompt it has left to prefill
    (here a chunked primary, 30 tokens a step, and an unchunked secondary) and what its step budget is: admission
    must see those, not the Engine defaults (None: the whole prompt; no budget)."""
    lat = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
    clock = VirtualClock()
    routed = RoutedEngine(SimEngine(lat, clock, step_token_budget=30), SimEngine(lat, VirtualClock()),
                          route={"b": True}.get, clock=clock, sim=True)
    assert routed.capabilities.step_token_budget == 30
    for g in ("a", "b"):
        routed.add(g, list(range(100)), 5)
    assert routed.prefill_left("a") is None       # placed at its first step
    out = routed.step(["a", "b"])
    assert routed.prefill_left("a") == 70 and "a" not in out.tokens
    assert routed.prefill_left("b") == 0          # the secondary prefills it whole (its tokens come when done)
