"""The simulator composes through the composition root (core/composition.py), as the server does: what a policy
changes beyond itself happens in simulation too."""
from __future__ import annotations

import dataclasses

from timely_llm_ros.core.eviction import EvictingEngine
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.evaluation.sim import load_latency_model
from timely_llm_ros.evaluation.sim.simulator import Simulator
from timely_llm_ros.evaluation.workload import get_trace
from timely_llm_ros.evaluation.workload.generator import WorkloadTask

LAT = load_latency_model("llama3-8b-rtx4090")


@dataclasses.dataclass(frozen=True)
class BudgetTask(WorkloadTask):
    """A workload task whose request has a time budget (TimeBill decides eviction only under one)."""

    time_budget_s: float = 30.0

    def to_request(self, *args, **kwargs):
        return dataclasses.replace(super().to_request(*args, **kwargs), time_budget_s=self.time_budget_s)


def burst(trace_ids: list[int]) -> list[WorkloadTask]:
    return [BudgetTask(f"r{i}-{tid}", 0.0, 0, f"agent_{i}", tid, get_trace(tid).robot_type, get_trace(tid).urgency,
                       get_trace(tid).task, get_trace(tid).context, get_trace(tid).plan, 2884)
            for i, tid in enumerate(trace_ids)]


def test_a_simulated_timebill_evicts_prompt_kv_as_the_live_one_does():
    """TimeBill decides an eviction ratio per request; on the SimEngine, as on a live engine, the composition wraps
    the engine so that every prefilled prompt loses that share of its KV before it decodes."""
    tasks = burst([1, 6, 9, 3])
    sim = Simulator(make_policy("timebill", options={"fixed_alpha": 0.5}), LAT)
    driven = sim.scheduler.engine
    assert isinstance(driven, EvictingEngine) and driven.wrapped is sim.engine
    result = sim.run(tasks)
    assert {o.req.req_id for o in result.outcomes} == {t.task_id for t in tasks}
    assert all(o.ok for o in result.outcomes)
    assert driven.applied == {t.task_id: 0.5 for t in tasks}


def test_a_policy_that_evicts_nothing_drives_the_simulated_engine_itself():
    sim = Simulator(make_policy("fcfs"), LAT)
    assert sim.scheduler.engine is sim.engine
