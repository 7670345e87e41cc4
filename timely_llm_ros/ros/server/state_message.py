"""Build the SchedulerState message from the scheduler (runs on the scheduler thread)."""
from __future__ import annotations

import time
from typing import Sequence

from timely_llm_ros.msg import RequestStatus, SchedulerState

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.request import Generation, RequestState
from timely_llm_ros.core.scheduler import PlanScheduler, measure_outcome


def scheduler_state_msg(node, scheduler: PlanScheduler, counts: dict[str, int],
                        executors_ready: Sequence[str] = (), executors_pending: Sequence[str] = ()) -> SchedulerState:
    now = time.monotonic()
    gens = scheduler.generations()
    mem = scheduler.engine.memory()
    msg = SchedulerState(policy=scheduler.policy.name, engine=type(scheduler.engine).__name__)
    msg.stamp = node.get_clock().now().to_msg()
    by_state = {s: 0 for s in RequestState}
    for g in gens:
        by_state[g.state] += 1
    msg.queued = by_state[RequestState.QUEUED]
    msg.running = by_state[RequestState.GENERATING]
    msg.suspended = by_state[RequestState.SUSPENDED]
    msg.executing = by_state[RequestState.EXECUTING]
    msg.last_step_time = float(scheduler.last_step_time or 0.0)
    msg.kv_device_bytes = float(mem.kv_device_bytes)
    msg.kv_host_bytes = float(mem.kv_host_bytes)
    msg.kv_budget_bytes = float(mem.kv_budget_bytes) if mem.kv_budget_bytes != float("inf") else -1.0
    msg.requests_total = counts["total"]
    msg.requests_done = counts["done"]
    msg.requests_dropped = counts["dropped"]
    msg.requests_failed = counts["failed"]
    msg.engine_steps = scheduler.steps
    msg.interrupted_steps = scheduler.interrupted_steps
    msg.preemptions = scheduler.preemptions
    msg.executors_ready, msg.executors_pending = list(executors_ready), list(executors_pending)
    for g in gens:
        waiting = g.state in (RequestState.QUEUED, RequestState.SUSPENDED)
        msg.requests.append(RequestStatus(
            request_id=g.req_id, agent_id=g.req.agent_id, robot_type=g.req.robot_type, urgency_class=g.req.urgency,
            state=g.state.value, segments_generated=len(g.segments),
            segments_executed=sum(1 for s in g.segments if s.exec_finished is not None),
            tokens_generated=len(g.output_ids),
            priority=float(scheduler.policy.priority(g, now)) if waiting else 0.0,
            age=now - g.req.arrival, utility_so_far=utility_so_far(g)))
    return msg


def utility_so_far(gen: Generation) -> float:
    """Eq. 3 over the segments the robot has executed so far (0 before the first one ran)."""
    if not any(s.exec_finished is not None for s in gen.segments):
        return 0.0
    return float(measure_outcome(gen, gen.state, ErrorCode.NONE, "", 0.0).total_utility)
