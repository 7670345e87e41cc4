"""The simulator's event loop on a real engine in real time (WallClock), and unchanged on the SimEngine."""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import pytest

from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.core.request import RequestState
from timely_llm_ros.evaluation.sim import SimEngine, VirtualClock, load_latency_model
from timely_llm_ros.evaluation.sim.clock import WallClock
from timely_llm_ros.evaluation.sim.simulator import Simulator
from timely_llm_ros.evaluation.workload import get_trace
from timely_llm_ros.evaluation.workload.generator import WorkloadTask
from timely_llm_ros.core.engine import Engine, EngineCapabilities, StepResult

LAT = load_latency_model("llama3-8b-rtx4090")


def task(i: int, trace_id: int, arrival: float) -> WorkloadTask:
    tr = get_trace(trace_id)
    return WorkloadTask(f"r{i}", arrival, i, f"{tr.robot_type}_{i}", trace_id, tr.robot_type, tr.urgency, tr.task,
                        tr.context, tr.plan, 2884)


THREE = [task(0, 1, 0.0), task(1, 6, 0.25), task(2, 9, 0.5)]


class StepLog(Engine):
    """Runs a real engine and writes down when each step ended, for whom, and how long it took. It declares the
    Engine defaults: its steps are never cut short (interrupt_check is not passed on) and it reports no prefill."""

    capabilities = EngineCapabilities()

    def __init__(self, inner: Engine, clock: WallClock) -> None:
        self.inner, self.clock = inner, clock
        self.eos_token_id = inner.eos_token_id
        self.log: list[tuple[float, tuple[str, ...], float]] = []

    def encode(self, text):
        return self.inner.encode(text)

    def decode(self, ids):
        return self.inner.decode(ids)

    def add(self, gen_id, prompt_ids, max_new_tokens, forced_ids=None, grammar=None):
        self.inner.add(gen_id, prompt_ids, max_new_tokens, forced_ids=forced_ids, grammar=grammar)

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        result = self.inner.step(gen_ids)
        self.log.append((self.clock(), tuple(gen_ids), result.elapsed_s))
        return result

    def suspend(self, gen_id):
        self.inner.suspend(gen_id)

    def resume(self, gen_id):
        self.inner.resume(gen_id)

    def release(self, gen_id):
        self.inner.release(gen_id)

    def memory(self):
        return self.inner.memory()


@pytest.fixture(scope="module")
def real_run():
    torch = pytest.importorskip("torch")
    from timely_llm_ros.engine.factory import make_engine

    threads = torch.get_num_threads()
    clock = WallClock()
    engine = StepLog(make_engine("transformers", random_config="tiny", num_threads=1), clock)
    sim = Simulator(make_policy("timely"), None, engine=engine, clock=clock, time_scale=0.02, network_delay_s=0.008)
    t0 = time.monotonic()
    try:
        result = sim.run(THREE, max_sim_s=120)
    finally:
        torch.set_num_threads(threads)
    return result, engine.log, time.monotonic() - t0


def test_wall_clock_sleeps_and_virtual_clock_jumps():
    wall, virtual = WallClock(), VirtualClock()
    t0 = time.monotonic()
    assert wall.advance_to(wall.now + 0.05) >= 0.05
    assert time.monotonic() - t0 >= 0.05  # a lower bound: sleeping never ends early
    t1 = time.monotonic()
    assert virtual.advance_to(100.0) == 100.0 and virtual() == 100.0
    assert time.monotonic() - t1 < 50.0   # jumped: sleeping would have taken 100 s (a functional bound, not speed)
    with pytest.raises(ValueError):
        wall.advance(-1.0)


def test_real_engine_serves_the_workload_in_real_time(real_run):
    result, log, elapsed = real_run
    assert sorted(o.req.req_id for o in result.outcomes) == ["r0", "r1", "r2"]
    for o in result.outcomes:
        assert o.state == RequestState.DONE, o.message
        assert o.plan_text.strip() == get_trace(int(o.req.task_type)).plan  # trace replay through real forward passes
        assert all(s.exec_finished is not None for s in o.segments)
        assert 0 < o.response_time <= o.waiting_time + 1e-9 and o.response_time <= o.completion_time
    # time is real: the loop ran as long as its clock says, past the last arrival plus that request's work
    assert sum(dt for _, _, dt in log) <= result.sim_time_s <= elapsed  # it includes every real step, nothing more
    assert result.sim_time_s >= max(o.req.arrival + o.completion_time for o in result.outcomes) - 1e-6
    assert result.engine_steps == len(log)


def test_response_times_include_the_engine_steps_that_generated_the_first_segment(real_run):
    result, log, _ = real_run
    for o in result.outcomes:
        seg0 = o.segments[0]
        steps = [(end, dt) for end, ids, dt in log if o.req.req_id in ids and end <= seg0.gen_finished + 1e-9]
        assert len(steps) >= 1
        # each step gives one token, so the first segment took as many steps as it has tokens or more
        assert o.response_time >= sum(dt for _, dt in steps) - 1e-6
        assert o.response_time >= seg0.gen_finished - o.req.arrival
        assert seg0.gen_finished - o.req.arrival >= steps[0][1]  # at least the prefill, in wall time


def test_robot_execution_is_scaled_real_time(real_run):
    result, _, _ = real_run
    for o in result.outcomes:
        for s in o.segments:
            took = s.exec_finished - s.exec_started
            assert took > 0
            assert took <= 0.02 * 40  # time_scale 0.02: no LRTrace segment runs 40 s


def test_sim_engine_loop_is_unchanged_and_deterministic():
    default = Simulator(make_policy("timely"), LAT, seed=3).run(THREE)
    clock = VirtualClock()
    injected = Simulator(make_policy("timely"), LAT, seed=3, engine=SimEngine(LAT, clock), clock=clock).run(THREE)
    again = Simulator(make_policy("timely"), LAT, seed=3).run(THREE)

    def key(res):
        return sorted((o.req.req_id, o.state, o.response_time, o.waiting_time, o.completion_time, o.total_utility,
                       [s.text for s in o.segments]) for o in res.outcomes)

    assert key(default) == key(injected) == key(again)
    assert default.sim_time_s == injected.sim_time_s and default.engine_steps == injected.engine_steps
    # modelled time: the lone first request's response is exactly its modelled prefill + decode steps + network
    first = next(o for o in default.outcomes if o.req.req_id == "r0")
    assert math.isfinite(first.response_time)
    assert first.response_time == pytest.approx(first.segments[0].gen_finished + LAT.network_delay_s)
    assert default.wall_s < 5.0


def test_time_scale_shrinks_robot_time_only():
    full = Simulator(make_policy("fcfs-whole-plan"), LAT, seed=1).run([task(0, 9, 0.0)]).outcomes[0]
    fast = Simulator(make_policy("fcfs-whole-plan"), LAT, seed=1, time_scale=0.1).run([task(0, 9, 0.0)]).outcomes[0]
    assert fast.response_time == pytest.approx(full.response_time)
    busy = lambda o: sum(s.exec_finished - s.exec_started for s in o.segments)  # noqa: E731
    assert busy(fast) == pytest.approx(0.1 * busy(full))


def _stops_parsing() -> WorkloadTask:
    """An urgent drone task whose plan has one complete segment, then stops parsing (a stray '}')."""
    return dataclasses.replace(task(0, 6, 0.0), plan="mu(80);}mb(100);")


def test_requests_unfinished_when_the_run_stops_are_reported_not_hidden():
    arm = task(0, 9, 0.0)  # ~30 s of robot work
    result = Simulator(make_policy("timely"), LAT).run([arm, task(1, 7, 1.0)], max_sim_s=10.0)
    by_id = {o.req.req_id: o for o in result.outcomes}
    assert set(by_id) == {"r0", "r1"}
    assert by_id["r1"].state == RequestState.DONE
    assert by_id["r0"].state == RequestState.CANCELLED and "run ended" in by_id["r0"].message
    assert by_id["r0"].segments[0].exec_started is not None  # it was being served, just not finished
    assert result.sim_time_s == pytest.approx(10.0)


def test_whole_plan_policy_sends_nothing_of_a_plan_that_stops_parsing_and_ends_it_invalid_plan():
    outcome = Simulator(make_policy("fcfs-whole-plan"), LAT).run([_stops_parsing()]).outcomes[0]
    assert outcome.error_code.name == "INVALID_PLAN" and "'}'" in outcome.message
    assert len(outcome.segments) == 1 and outcome.segments[0].dispatched is None   # complete, but never sent
