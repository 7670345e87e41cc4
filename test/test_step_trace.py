"""Step traces: what each engine step did and took, and the machine factors (slowdown, per-step overhead) measured
from them against a latency profile; the profile's step overhead and its loaded variant."""
from __future__ import annotations

import threading

import pytest

from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.runtime import SchedulerThread
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SegmentReady
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.step_trace import StepRecord, StepTraceWriter, breakdown, load_factors, read_step_trace
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES

# every coefficient non-zero, so a wrong token or context count changes the predicted time
LAT = LatencyModel(prefill_a=1e-6, prefill_b=2e-4, prefill_c=3e-3, decode_base=2e-3, decode_per_seq=5e-4,
                   decode_per_kv_token=1e-5)
PLANS = {"drone": "s('cat');?iv('cat')==True{g('cat');tp();};mf(50);tc(90);",
         "arm": "sc('apple');gt('apple');pi('apple');gt('fruit basket');dr();"}


def test_step_overhead_passes_on_the_clock_but_is_not_the_engines_step_time():
    lat = LatencyModel(prefill_a=1e-6, prefill_b=2e-4, prefill_c=3e-3, decode_base=2e-3, decode_per_seq=5e-4,
                       decode_per_kv_token=1e-5, step_overhead_s=1e-3)
    assert LatencyModel.from_dict(lat.to_dict()) == lat
    clock = VirtualClock()
    engine = SimEngine(lat, clock)
    engine.add("a", list(range(10)), 4)
    prefill = lat.step_s([(10, 10)], 0, 0)                # 1e-6*100 + 2e-4*10 + 3e-3
    assert prefill == pytest.approx(1e-4 + 2e-3 + 3e-3)
    first = engine.step(["a"])
    assert first.elapsed_s == pytest.approx(prefill)     # what a real engine would report: its forward
    assert clock() == pytest.approx(prefill + 1e-3)       # what the serving loop took around it
    second = engine.step(["a"])                           # a decode of 1 over 11 context tokens
    assert second.elapsed_s == pytest.approx(2e-3 + 5e-4 + 1e-5 * 11)
    assert clock() == pytest.approx(prefill + second.elapsed_s + 2e-3)


def test_under_load_scales_the_forward_and_sets_the_overhead_but_not_the_kv_facts():
    loaded = LAT.under_load(1.5, 0.002)
    assert loaded.decode_s(4, 200) == pytest.approx(1.5 * LAT.decode_s(4, 200))
    assert loaded.cold_prefill_s(64) == pytest.approx(1.5 * LAT.cold_prefill_s(64))
    assert loaded.step_s([(8, 8)], 2, 50) == pytest.approx(1.5 * LAT.step_s([(8, 8)], 2, 50))
    assert loaded.step_overhead_s == 0.002
    assert loaded.reload_s(100) == LAT.reload_s(100) and loaded.kv_bytes_per_token == LAT.kv_bytes_per_token


def test_load_factors_is_a_ratio_of_sums_without_reloads_and_a_mean_overhead():
    # step A: forward 10 ms where the profile says 5 ms; step B: 100 ms as predicted (plus a 20-ms reload).
    # The ratio of sums is 110/105 = 1.048; the mean of per-step ratios would be 1.5.
    a_pred = LAT.step_s([], 1, 0)
    b_pred = LAT.step_s([(100, 100)], 0, 0)
    a = StepRecord(t=0.0, engine_s=2 * a_pred, decode_batch=1, iteration_s=2 * a_pred + 0.002)
    b = StepRecord(t=1.0, engine_s=b_pred + 0.020, prefills=((100, 100),), reload_s=0.020,
                   iteration_s=b_pred + 0.020 + 0.001)
    got = load_factors([a, b], LAT)
    assert got.slowdown == pytest.approx((2 * a_pred + b_pred) / (a_pred + b_pred))
    assert got.slowdown != pytest.approx((2 + 1) / 2)
    assert got.step_overhead_s == pytest.approx(0.0015)
    assert got.steps == 2
    with pytest.raises(ValueError, match="no steps"):
        load_factors([], LAT)


def test_a_trace_file_reads_back_as_written(tmp_path):
    records = [StepRecord(t=1.25, engine_s=0.0123456, prefills=((12, 40), (3, 3)), decode_batch=5,
                          decode_kv_tokens=321, reload_s=0.001, iteration_s=0.015, inbox_s=0.001, events_s=0.002,
                          idle_s=0.0001, policy="timely"),
               StepRecord(t=1.5, engine_s=0.004, decode_batch=2, decode_kv_tokens=80, policy="edf-admit")]
    writer = StepTraceWriter(tmp_path / "sub" / "steps.csv")
    for r in records:
        writer.write(r)
    writer.close()
    writer.write(records[0])                 # after close: ignored, not an error
    assert writer.rows == 2
    assert read_step_trace(tmp_path / "sub" / "steps.csv") == records


def _scheduler(latency: LatencyModel) -> tuple[PlanScheduler, VirtualClock]:
    clock = VirtualClock()
    return PlanScheduler(SimEngine(latency, clock), make_policy("timely", max_batch=4), load_skill_sets(),
                         load_exec_models(), clock), clock


def _submit(sched: PlanScheduler, n: int) -> None:
    for i in range(n):
        robot = "drone" if i % 2 else "arm"
        sched.submit(PlanRequest(req_id=f"r{i}", agent_id=f"{robot}_{i}", robot_type=robot, task="look for the cat",
                                 tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, urgency="normal",
                                 forced_plan=PLANS[robot]))


def _trace_of(latency: LatencyModel, n: int = 6) -> list[StepRecord]:
    """Every step's record of n plans served to the end (segments executed at once) on the simulated engine."""
    sched, clock = _scheduler(latency)
    _submit(sched, n)
    records, finished = [], set()

    def handle(events) -> None:
        for ev in events:
            if isinstance(ev, SegmentReady):
                handle(sched.on_execution_started(ev.req_id, ev.segment.index, clock()))
                handle(sched.on_execution_finished(ev.req_id, ev.segment.index, clock()))
            elif isinstance(ev, RequestFinished):
                finished.add(ev.req_id)

    for _ in range(5000):
        if not sched.busy():
            break
        steps = sched.steps
        handle(sched.step())
        if sched.steps != steps:
            records.append(sched.last_step)
    assert len(finished) == n
    return records


def test_the_scheduler_records_each_step_as_the_engine_costed_it():
    """The simulated engine charges each step the profile's time of what it really did, so a trace of it must
    measure a slowdown of exactly 1 against that profile, and of 2 against the profile it was run 2x slower than:
    a wrong prefill or context count in the records would not."""
    records = _trace_of(LAT)
    assert any(r.prefills for r in records) and any(r.decode_batch for r in records)
    for r in records:
        assert r.engine_s == pytest.approx(r.predicted_s(LAT), rel=1e-9)
    assert load_factors(records, LAT).slowdown == pytest.approx(1.0, rel=1e-9)
    assert load_factors(_trace_of(LAT.under_load(2.0, 0.0)), LAT).slowdown == pytest.approx(2.0, rel=1e-9)


def test_the_scheduler_thread_hands_every_step_to_the_trace_with_its_iteration_time():
    sched, _ = _scheduler(LAT)
    got: list[StepRecord] = []
    done = threading.Event()
    finished: set[str] = set()

    def on_events(events) -> None:
        for ev in events:
            if isinstance(ev, SegmentReady):
                loop.post(lambda s, e=ev: [*s.on_execution_started(e.req_id, e.segment.index, s.clock()),
                                           *s.on_execution_finished(e.req_id, e.segment.index, s.clock())])
            elif isinstance(ev, RequestFinished):
                finished.add(ev.req_id)
                if len(finished) == 4:
                    done.set()

    loop = SchedulerThread(sched, on_events, trace=got.append)
    loop.start()
    loop.post(lambda s: _submit(s, 4))
    assert done.wait(30)
    loop.stop()
    assert len(got) == sched.steps > 0
    for r in got:      # the simulated forward takes no wall time, so the parts are what the iteration was made of
        assert 0.0 < r.inbox_s + r.events_s + r.idle_s <= r.iteration_s
    assert any(r.events_s > 0.0 for r in got) and any(r.inbox_s > 0.0 for r in got)


def test_the_breakdown_splits_the_iteration_and_the_summary_averages_it(tmp_path):
    r = StepRecord(t=0.0, engine_s=0.010, reload_s=0.002, iteration_s=0.020, inbox_s=0.001, events_s=0.003,
                   idle_s=0.0005)
    parts = breakdown(r)
    assert parts == pytest.approx({"forward": 0.008, "reloads": 0.002, "scheduling": 0.0055, "events": 0.003,
                                   "inbox": 0.001, "housekeeping": 0.0005})
    assert sum(parts.values()) == pytest.approx(r.iteration_s)
    writer = StepTraceWriter(tmp_path / "steps.csv")
    writer.write(r)
    writer.write(StepRecord(t=1.0, engine_s=0.004, iteration_s=0.004))
    writer.close()
    assert writer.summary() == ("2 engine steps; per step (ms): forward 6.00, reloads 1.00, scheduling 2.75, "
                                "events 1.50, inbox 0.50, housekeeping 0.25")


def test_the_command_line_summarises_a_trace_per_policy_and_plots_it(tmp_path, capsys):
    from timely_llm_ros.core.step_trace import main, summary_table

    t1 = LAT.decode_s(1, 0)
    records = [StepRecord(t=float(i), engine_s=2 * t1, decode_batch=1, iteration_s=2 * t1 + 0.001 * (i + 1),
                          events_s=0.001 * i, policy="timely" if i < 2 else "edf") for i in range(4)]
    table = summary_table(records, LAT)
    assert table.splitlines()[0] == "timely: 2 engine steps; forward x2.00 the profile, loop 1.50 ms a step beside it"
    # edf: events 2 and 3 ms (mean 2.50, max 3.00); scheduling = iteration - engine - events = 1 ms each
    assert "  events            2.50     3.00     3.00" in table.split("edf:")[1]
    assert "  scheduling        1.00     1.00     1.00" in table.split("edf:")[1]
    writer = StepTraceWriter(tmp_path / "steps.csv")
    for r in records:
        writer.write(r)
    writer.close()
    assert main([str(tmp_path / "steps.csv"), "--plot", str(tmp_path / "steps.png")]) == 0
    assert (tmp_path / "steps.png").stat().st_size > 1000
    assert "timely: 2 engine steps" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.csv")]) == 2
    assert "cannot read the step trace" in capsys.readouterr().err


def test_the_policy_plans_a_decode_step_as_the_engines_time_plus_the_loops_own_time():
    """The server's loop spends time around every forward (policy, events, goal intake, a child engine's round
    trip); admission planned with the forward alone and served urgent requests late. The scheduler measures the
    gap between back-to-back steps beyond the engine's time, and the policy's decode step is the last decode-only
    step plus its median. Here the simulated loop costs 4 ms a step (the clock passes it, the engine does not
    report it), so the period must be the decode step + 4 ms exactly; without a loop it is the decode step."""
    for overhead in (0.0, 0.004):
        sched, clock = _scheduler(LAT.under_load(1.0, overhead))
        _submit(sched, 2)
        for _ in range(6):
            sched.step()
        assert sched.decode_step_s is not None and len(sched.loop_s) >= 5
        assert sched.step_period_s() == pytest.approx(sched.decode_step_s + overhead, rel=1e-9)


def test_a_wait_for_work_is_not_loop_time():
    """When the scheduler runs out of work (every plan executing on its robot), the wait until the next request
    is no part of any step: a gap after such a step is not measured."""
    sched, clock = _scheduler(LAT)
    _submit(sched, 1)
    while sched.busy():
        sched.step()
    gaps = len(sched.loop_s)
    clock.advance(5.0)
    sched.submit(PlanRequest(req_id="late", agent_id="drone_9", robot_type="drone", task="look for the cat",
                             tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=clock(), urgency="normal",
                             forced_plan=PLANS["drone"]))
    sched.step()
    assert len(sched.loop_s) == gaps and max(sched.loop_s, default=0.0) < 1e-9
