"""The plans on one robot's executor: which segment runs next and the verdicts of those that will not run
(core/execution/robot_queue.py's rules, as ExecuteSegment results), and each plan's variables. Not thread-safe:
the executor base node holds its lock."""
from __future__ import annotations

import time

from timely_llm_ros.action import ExecuteSegment

from timely_llm_ros.core.execution import Ended, RobotQueue
from timely_llm_ros.ros.executor.job import SegmentJob
from timely_llm_ros.ros.executor.plans import PlanStates

R = ExecuteSegment.Result


class RobotPlans:
    """What the robot holds (``queue``) and each plan's variables (``variables``)."""

    def __init__(self, plan_rule: str, queue_size: int, logger) -> None:
        self.queue: RobotQueue[SegmentJob] = RobotQueue(plan_rule)
        self.variables = PlanStates()
        self.queue_size = queue_size
        self._log = logger

    def admit(self, job: SegmentJob, preempts: bool) -> list[SegmentJob]:
        """A segment arrives: it waits its turn, or gets its verdict now (NOT_RUN or PREEMPTED: its plan is over
        here; BUSY: ``queue_size`` segments wait and it belongs to no plan the robot holds, so a plan once taken is
        never cut short by BUSY). A preempting one stops the robot's plan: its running segment ends PREEMPTED after
        the skill in progress, its queued ones now: returned, with that verdict, to be started."""
        refused = self.queue.refusal(job.request_id, job.index)
        if refused is not None:
            job.verdict = R(success=False, error_code=R.PREEMPTED if refused.ended == Ended.PREEMPTED else R.NOT_RUN,
                            error_message=refused.message)
            return []
        if len(self.queue) >= self.queue_size and not self.queue.holds(job.request_id):
            job.verdict = R(success=False, error_code=R.BUSY, error_message=f"{len(self.queue)} segments already "
                            f"wait (queue_size {self.queue_size}); retry later or use another robot")
            return []
        job.queued = True
        arrival = self.queue.arrive(job.request_id, job.index, job, preempts)
        if not arrival.preempted_plan:
            return []
        why = f"preempted: plan {job.request_id} took the robot (plan_rule urgent_preempts)"
        for other in arrival.preempted:
            other.verdict = R(success=False, error_code=R.PREEMPTED, error_message=why)
        if arrival.stop is not None:
            arrival.stop.preempted_by = job.request_id
        self.variables.release(arrival.preempted_plan)
        stopped = ([arrival.stop] if arrival.stop is not None else []) + arrival.preempted
        self._log.info(f"[{arrival.preempted_plan}] preempted by plan {job.request_id}: segments "
                       f"{[j.index for j in stopped]} end PREEMPTED")
        return arrival.preempted

    def give_up_waiting(self, timeout_s: float) -> list[SegmentJob]:
        """Waiting segments whose plan's earlier segment has not arrived ``timeout_s`` after they did: taken out of
        the queue with a NOT_RUN verdict, to be started (0: they wait for ever)."""
        if timeout_s <= 0 or not self.queue.waiting:
            return []
        now = time.monotonic()
        given_up = []
        for job, missing in self.queue.missing_predecessor():
            if now - job.arrived < timeout_s:
                continue
            self.queue.remove(job)
            named = ", ".join(str(k) for k in missing)
            job.verdict = R(success=False, error_code=R.NOT_RUN,
                            error_message=f"not run: segment {named} of this plan never reached this robot within "
                                          f"{timeout_s:g} s (predecessor_timeout_s); a plan's segments run in index "
                                          "order, so send them from its first one")
            self._log.warning(f"[{job.request_id}] segment {job.index} not run: segment {named} of its plan never "
                              f"arrived within {timeout_s:g} s")
            given_up.append(job)
        return given_up

    def ended(self, job: SegmentJob, result: ExecuteSegment.Result | None) -> list[SegmentJob]:
        """The plan after this segment's end: its later segments waiting here end NOT_RUN when it did not succeed or
        returned (the server withdraws them too, one cancel at a time: the next one would start in between);
        returned, with that verdict, to be started. A refusal on arrival of a skill or a text the robot cannot run
        stops the plan too; other refusals (BUSY, shutting down, the plan over here) change nothing."""
        code = result.error_code if result is not None else R.FAILED
        if not job.queued and code not in (R.UNKNOWN_SKILL, R.FAILED):
            return []
        if result is not None and result.success:
            ended = Ended.RETURNED if result.returned else Ended.DONE
        else:
            ended = {R.NOT_RUN: Ended.NOT_RUN, R.PREEMPTED: Ended.PREEMPTED}.get(code, Ended.STOPPED)
        if ended != Ended.DONE:
            self.variables.release(job.request_id)
        orphans = self.queue.end(job.request_id, job.index, ended)
        if ended == Ended.RETURNED:
            why = summary = f"the plan returned at segment {job.index}"
        else:
            why = (f"segment {job.index} of this plan ended first "
                   f"({result.error_message if result is not None else 'executor error'})")
            summary = f"segment {job.index} ended without success"
        for orphan in orphans:
            if not orphan.handle.is_cancel_requested:   # its own cancel came too: it ends CANCELLED
                orphan.verdict = R(success=False, error_code=R.NOT_RUN, error_message=f"not run: {why}")
        if orphans:
            self._log.info(f"[{job.request_id}] segments {[j.index for j in orphans]} not run: {summary}")
        return orphans
