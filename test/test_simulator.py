"""Latency model, the virtual-clock SimEngine and the discrete-event simulator driving the real PlanScheduler."""
import dataclasses
import math

import pytest

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.evaluation.metrics import by_urgency, summarize, time_select
from timely_llm_ros.core.policies import SchedulingContext, make_policy
from timely_llm_ros.core.request import Generation, PlanRequest, RequestState
from timely_llm_ros.evaluation.sim import LatencyModel, PieceTokenizer, SimEngine, VirtualClock, load_latency_model
from timely_llm_ros.evaluation.sim.simulator import simulate
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.evaluation.workload import WorkloadSpec, generate, get_trace
from timely_llm_ros.evaluation.workload.generator import WorkloadTask
from timely_llm_ros.core.engine import EngineError

LAT = load_latency_model("llama3-8b-rtx4090")


def test_4090_profile_matches_table_1():
    assert LAT.cold_prefill_s(2884) == pytest.approx(0.328, abs=0.003)
    assert LAT.decode_s(1, 2900) == pytest.approx(0.022, abs=0.001)
    assert LAT.network_delay_s == pytest.approx(0.008)
    assert LAT.decode_s(8, 8 * 2900) > LAT.decode_s(1, 2900)  # batching is not free
    assert LatencyModel.from_dict(LAT.to_dict()) == LAT


def test_a_prefix_cached_for_one_generation_is_not_prefilled_and_the_others_keep_the_profiles():
    """A chat model's robot types cache system prompts of different lengths: set_prompt_tokens(..., cached) overrides
    the profile's cached_prefix_tokens for that generation only."""
    engine = SimEngine(LAT, VirtualClock())
    engine.set_prompt_tokens("drone", 820, cached=790)
    engine.set_prompt_tokens("arm", 2884)
    for gen in ("drone", "arm"):
        engine.add(gen, engine.encode("prompt"), max_new_tokens=4)
    assert engine.prefill_left("drone") == 30
    assert engine.prefill_left("arm") == 2884 - LAT.cached_prefix_tokens
    assert engine.step(["drone"]).elapsed_s == pytest.approx(LAT.prefill_s(30, 820) + LAT.prefill_c)


def test_tokenizer_round_trips_and_counts():
    tok = PieceTokenizer()
    text = " s('cat');?iv('cat')==True{g('cat')}"
    assert tok.decode(tok.encode(text)) == text
    assert tok.count(text) == len(tok.encode(text))
    assert tok.encode("mf(50);") == tok.encode("mf(50);")


def test_the_sim_engine_text_stream_adds_each_tokens_own_text():
    """Token by token, the stream's pieces join to what decoding the whole output gives, pad and eos adding
    nothing; pieces first seen after the stream was made (the vocabulary grows) included."""
    engine = SimEngine(LAT, VirtualClock())
    stream = engine.text_stream()
    ids = engine.encode(" tp(1.5);mf(20) x\n\n{é}") + [engine.tokenizer.pad_id, engine.tokenizer.eos_id]
    ids += engine.encode("  brand_new_piece 42")
    out, whole = "", []
    for i in ids:
        out += stream.push(i)
        whole.append(i)
        assert out == engine.decode(whole)


def test_sim_engine_replays_forced_plan_and_advances_clock():
    clock = VirtualClock()
    engine = SimEngine(LAT, clock)
    forced = engine.encode(" mf(50);")
    engine.set_prompt_tokens("a", 2884)
    engine.add("a", engine.encode("prompt"), max_new_tokens=50, forced_ids=forced)
    out, elapsed = [], []
    while True:
        r = engine.step(["a"])
        out.append(r.tokens["a"])
        elapsed.append(r.elapsed_s)
        if "a" in r.finished:
            break
    assert engine.decode(out) == " mf(50);"
    cached = LAT.cached_prefix_tokens
    assert elapsed[0] == pytest.approx(LAT.prefill_s(2884 - cached, 2884) + LAT.prefill_c)
    assert elapsed[1] == pytest.approx(LAT.decode_s(1, 2884 + 1))
    assert clock.now == pytest.approx(sum(elapsed))
    assert engine.memory().kv_device_bytes == (2884 + len(out)) * LAT.kv_bytes_per_token


def test_sim_engine_offloads_suspended_kv_over_budget_and_charges_reload():
    lat = dataclasses.replace(LAT, kv_budget_bytes=150 * LAT.kv_bytes_per_token, reload_bytes_per_s=1e9)
    engine = SimEngine(lat)
    for gid in ("a", "b"):
        engine.add(gid, [0] * 100, 10, forced_ids=[5] * 5)
    engine.step(["a"])
    engine.suspend("a")
    with pytest.raises(EngineError):
        engine.step(["a"])
    engine.step(["b"])  # b's KV pushes a out to host memory
    mem = engine.memory()
    assert mem.kv_host_bytes == 101 * lat.kv_bytes_per_token and mem.kv_device_bytes <= mem.kv_budget_bytes
    engine.resume("a")
    t = engine.step(["a"]).elapsed_s
    assert t == pytest.approx(lat.decode_s(1, 101) + lat.reload_s(101))
    engine.release("a")
    engine.release("b")
    assert engine.memory().generations == 0


def burst(trace_ids, t=0.0):
    return [WorkloadTask(f"r{i}-{tid}", t, 0, f"agent_{i}", tid, get_trace(tid).robot_type, get_trace(tid).urgency,
                         get_trace(tid).task, get_trace(tid).context, get_trace(tid).plan, 2884)
            for i, tid in enumerate(trace_ids)]


def test_every_request_finishes_with_its_whole_plan_executed_in_order():
    tasks = burst([1, 6, 9, 3])
    result = simulate(make_policy("timely"), LAT, tasks)
    assert len(result.outcomes) == 4 and result.engine_steps > 0
    for o in result.outcomes:
        assert o.state == RequestState.DONE and o.plan_text.strip() == o.req.forced_plan
        assert "".join(s.text for s in o.segments).strip() == o.req.forced_plan
        starts = [s.exec_started for s in o.segments]
        assert starts == sorted(starts) and all(s.exec_finished >= s.exec_started for s in o.segments)
        assert o.response_time > 0 and o.waiting_time >= o.response_time


def test_fcfs_whole_plan_dispatches_only_after_the_whole_plan():
    result = simulate(make_policy("fcfs-whole-plan"), LAT, burst([9]))
    o = result.outcomes[0]
    assert o.segments[0].dispatched >= o.segments[-1].gen_finished
    stream = simulate(make_policy("fcfs-stream"), LAT, burst([9])).outcomes[0]
    assert stream.response_time < o.response_time


def test_timely_serves_urgent_requests_first_in_a_burst():
    tasks = burst([1, 2, 3, 4, 5, 6, 7, 8])
    res = {p: summarize(simulate(make_policy(p), LAT, tasks).outcomes, by_urgency) for p in ("timely", "fcfs", "fcfs-whole-plan")}
    assert res["timely"]["urgent"].utility > res["fcfs"]["urgent"].utility > res["fcfs-whole-plan"]["urgent"].utility
    assert res["timely"]["normal"].utility >= res["fcfs-whole-plan"]["normal"].utility
    assert res["timely"]["urgent"].response_time < res["fcfs"]["urgent"].response_time


def test_same_workload_same_result():
    spec = WorkloadSpec("T", eps=0.5, max_tpe=4, trace_ids=(1, 6, 9), agents=5, duration_s=30, seed=3)
    w = generate(spec)
    a = simulate(make_policy("timely"), LAT, w, seed=1)
    b = simulate(make_policy("timely"), LAT, w, seed=1)
    assert [(o.req.req_id, o.response_time, o.completion_time) for o in a.outcomes] == \
           [(o.req.req_id, o.response_time, o.completion_time) for o in b.outcomes]


def test_dropped_requests_are_reported_and_counted():
    tasks = burst([1] * 12)  # one agent each; prefill-only batch size 1 forces a queue
    result = simulate(make_policy("timely", max_batch=1), LAT, tasks)
    states = {o.state for o in result.outcomes}
    assert len(result.outcomes) == 12 and RequestState.DROPPED in states
    m = summarize(result.outcomes)["all"]
    assert 0 < m.dropped < 1 and m.served + m.dropped == pytest.approx(1.0)
    assert all(o.error_code != 0 and o.message for o in result.outcomes if o.state == RequestState.DROPPED)


def test_select_over_a_thousand_queued_picks_a_full_batch_of_the_highest_priorities():
    # behaviour only; the speed target is `benchmarks/overhead.py scheduling`'s (timed assertions flake on shared boxes)
    tuf = DEFAULT_URGENCY_CLASSES["normal"]
    waiting = [Generation(PlanRequest(f"g{i}", "a", "drone", "t", tuf, i * 1e-3), [0] * 10) for i in range(1000)]
    ctx = SchedulingContext(now=0.0, kv_free_bytes=math.inf, kv_bytes_per_token=1.0, step_time_s=0.02)
    policy = make_policy("timely", max_batch=16)
    stats = time_select(policy, waiting, [], ctx, repeats=2)
    batch = policy.select(waiting, [], ctx)
    ranked = sorted(waiting, key=lambda g: policy.priority(g, ctx.now), reverse=True)
    assert stats.queued == 1000 and len(batch) == 16
    assert {g.req.req_id for g in batch} == {g.req.req_id for g in ranked[:16]}
    assert policy.priority(ranked[0], ctx.now) > policy.priority(ranked[-1], ctx.now)  # the queue is not all ties


def test_chunked_prefill_bounds_the_step_and_costs_what_one_chunk_costs():
    clock = VirtualClock()
    engine = SimEngine(LAT, clock, step_token_budget=128)
    engine.set_prompt_tokens("p", 2884)
    engine.add("p", [0], 10, forced_ids=[5, 6])
    engine.set_prompt_tokens("d", 2884)
    engine.add("d", [0], 10, forced_ids=[5] * 9)
    times, first = [], None
    while first is None:
        res = engine.step(["d", "p"] if engine.prefill_left("d") == 0 else ["d"])
        times.append(res.elapsed_s)
        first = res.tokens.get("p")
    suffix = 2884 - LAT.cached_prefix_tokens                       # 284 new tokens: 128 + 128 + 28 after d's own
    bound = LAT.prefill_s(128, 2884) + LAT.prefill_c + LAT.decode_s(1, 2884 + 8)
    assert max(times[1:]) <= bound and len(times) > 2
    # a budget that holds the whole suffix costs exactly the unchunked prefill
    costs = []
    for budget in (None, suffix):
        e = SimEngine(LAT, VirtualClock(), step_token_budget=budget)
        e.set_prompt_tokens("p", 2884)
        e.add("p", [0], 10, forced_ids=[5, 6])
        costs.append(e.step(["p"]).elapsed_s)
    assert costs[0] == pytest.approx(costs[1]) == pytest.approx(LAT.prefill_s(suffix, 2884) + LAT.prefill_c)


def test_timely_on_a_chunked_engine_serves_every_plan_in_full():
    tasks = burst([9, 10, 1, 6, 7, 8, 3])
    result = simulate(make_policy("timely"), LAT, tasks, step_token_budget=256)
    for o in result.outcomes:
        assert o.state == RequestState.DONE and o.plan_text.strip() == o.req.forced_plan


def test_closed_loop_next_task_follows_the_real_completion_and_noise_and_failures_apply():
    from dataclasses import replace

    from timely_llm_ros.core.scheduler import SchedulerConfig
    from timely_llm_ros.evaluation.sim.simulator import ExecNoise, Simulator

    first, second = burst([1, 3])
    second = replace(second, after=first.task_id, gap_s=0.5, arrival=99.0, agent_id=first.agent_id)
    finished = {}
    slow = ExecNoise(factor="uniform", low=2.0, high=2.0)
    Simulator(make_policy("timely"), LAT, exec_noise=slow, on_finished=lambda o: finished.update({o.req.req_id: o})
              ).run([first, second])
    a, b = finished[first.task_id], finished[second.task_id]
    assert b.req.arrival == pytest.approx(a.finished_at + 0.5)          # not the 99 s it was scheduled for
    assert all(s.exec_s >= 2 * s.est_exec_s - 1e-9 for s in a.segments)  # twice the (minimum) estimate or more
    failing = ExecNoise(failure_rate=1.0)
    res = Simulator(make_policy("timely"), LAT, exec_noise=failing).run([first])
    assert res.outcomes[0].error_code == ErrorCode.EXECUTION_FAILED and res.outcomes[0].state == RequestState.FAILED
    res = Simulator(make_policy("timely"), LAT, exec_noise=failing,
                    scheduler_config=SchedulerConfig(replan_on_failure=2)).run([first])
    assert res.outcomes[0].replans == 2 and res.outcomes[0].state == RequestState.FAILED
    assert len([s for s in res.outcomes[0].segments if s.exec_finished is not None]) == 3   # one per attempt


def test_generator_closed_loop_chains_chat_requests_and_long_plan_caps():
    spec = WorkloadSpec("C", eps=0.5, max_tpe=3, trace_ids=(1, 12, 13), agents=4, duration_s=40, seed=2, chain=3,
                        think_s=1.0, max_new_tokens=400)
    w = generate(spec)
    followers = [t for t in w.tasks if t.after]
    assert followers and all(t.gap_s == 1.0 for t in followers)
    ids = {t.task_id: t for t in w.tasks}
    assert all(ids[t.after].agent_id == t.agent_id for t in followers)
    assert {"chat", "drone"} <= {t.robot_type for t in w.tasks}
    assert all(t.max_new_tokens == 400 for t in w.tasks)
    result = simulate(make_policy("timely"), LAT, w)
    chat = [o for o in result.outcomes if o.req.robot_type == "chat"]
    assert chat and all(o.state == RequestState.DONE and len(o.segments) >= 2 for o in chat)
    assert len(result.outcomes) == len(w.tasks)


def test_a_simulated_robot_runs_one_plan_at_a_time_and_a_more_urgent_plan_preempts_under_urgent_preempts():
    """Two plans for one robot (core/execution's rules): under queue the second starts when the first has ended
    (the timely policy with drop="never", so the late one is served late); under urgent_preempts the urgent one
    stops the first at the end of its skill in progress, which ends PREEMPTED."""
    first, second = burst([1, 6])
    second = dataclasses.replace(second, agent_id=first.agent_id, arrival=1.0)

    def runs(result):
        return sorted((s.exec_started, s.exec_finished, o.req.req_id) for o in result.outcomes for s in o.segments
                      if s.exec_started is not None and s.exec_finished is not None)

    queued = simulate(make_policy("timely", options={"drop": "never"}), LAT, [first, second], robots="named")
    by_id = {o.req.req_id: o for o in queued.outcomes}
    assert by_id[first.task_id].ok and by_id[second.task_id].ok
    assert by_id[second.task_id].segments[0].exec_started >= by_id[first.task_id].segments[-1].exec_finished
    waited = by_id[second.task_id].response_time
    preempted = simulate(make_policy("timely"), LAT, [first, second], plan_rule=lambda agent: "urgent_preempts",
                         robots="named")
    by_id = {o.req.req_id: o for o in preempted.outcomes}
    stopped, urgent = by_id[first.task_id], by_id[second.task_id]
    assert stopped.error_code == ErrorCode.PREEMPTED and urgent.ok and urgent.response_time < waited
    last = max((s for s in stopped.segments if s.exec_finished is not None), key=lambda s: s.exec_finished)
    assert urgent.segments[0].exec_started == pytest.approx(last.exec_finished)   # the robot turned to it at once
    for result in (queued, preempted):
        spans = runs(result)
        assert all(end <= nxt for (_, end, _), (nxt, _, _) in zip(spans, spans[1:])), spans   # never two at once


def test_by_default_each_task_gets_a_free_robot_and_a_closed_loop_chain_keeps_its_own():
    """robots="per_task" (the paper's setting: a task goes to a free agent): two overlapping tasks named for one
    agent run at once on two robots; a chain's next task runs on the robot of the task before it."""
    first, second = burst([1, 1])
    second = dataclasses.replace(second, agent_id=first.agent_id, arrival=0.5)
    by_id = {o.req.req_id: o for o in simulate(make_policy("timely"), LAT, [first, second]).outcomes}
    a, b = by_id[first.task_id], by_id[second.task_id]
    assert a.ok and b.ok and a.req.agent_id != b.req.agent_id
    assert b.segments[0].exec_started < a.segments[-1].exec_finished        # it did not wait for the first plan
    follower = dataclasses.replace(second, task_id="follower", after=first.task_id, gap_s=0.5, arrival=0.0)
    result = simulate(make_policy("timely"), LAT, [first, follower])
    by_id = {o.req.req_id: o for o in result.outcomes}
    assert by_id["follower"].req.agent_id == by_id[first.task_id].req.agent_id
