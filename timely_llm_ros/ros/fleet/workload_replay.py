"""Replay of a recorded workload (a YAML or an .mcap bag of Plan goals, evaluation.workload.bag) by fleet_workload: each
goal is sent at its recorded offset from the start, with its recorded agent, robot type, task and urgency class,
whether or not earlier goals have finished (open loop); with record_bag, the goals as sent and their results are
written into a new mcap bag (evaluation.workload.bag write_run_bag) so two runs can be compared."""
from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from rclpy.serialization import serialize_message

from timely_llm_ros.action import Plan

from timely_llm_ros.evaluation.workload.bag import RunRecord, write_run_bag
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadTask
from timely_llm_ros.ros.fleet.outcome_table import OutcomeRow, code_name


class ReplayHost(Protocol):
    """What a replay needs of the workload node that runs it (ros/fleet/workload_node.py FleetWorkloadNode)."""

    client: Any                     # the Plan action client (ros/action_client.py ActionClient)
    stop: threading.Event           # set on shutdown
    result_timeout_s: float         # how long to wait for results after the last goal
    record_bag: str                 # "" or the mcap bag to write the run into

    def get_logger(self) -> Any: ...
    def give_up(self) -> bool: ...
    def report(self, rows: list[OutcomeRow]) -> int: ...


class ReplayRun:
    """Sends a recorded workload's goals at their recorded offsets and collects every result."""

    def __init__(self, node: ReplayHost, workload: Workload) -> None:
        self.node, self.workload = node, workload
        self.records: list[RunRecord] = []
        self.rows: dict[str, OutcomeRow] = {}
        self._pending = threading.Semaphore(0)
        self._handles: list = []         # (goal handle, its record), for every accepted goal
        self._lock = threading.Lock()
        self._closed = False             # the wait for results is over: rows are final, later answers not counted
        self._t0 = 0.0

    def run(self) -> int:
        node, tasks = self.node, self.workload.tasks
        log = node.get_logger()
        log.info(f"replaying {len(tasks)} goals of {self.workload.spec.name} over "
                 f"{max((t.arrival for t in tasks), default=0.0):.1f} s")
        self._t0 = time.monotonic()
        self._t0_wall_ns = time.time_ns()   # bag stamps: wall clock, so the bag lines up with other recordings
        late = 0.0
        for task in tasks:
            if node.stop.wait(max(0.0, self._t0 + task.arrival - time.monotonic())):
                log.info("stop requested: no more goals are sent")
                break
            late = max(late, self._now() - task.arrival)
            self._send(task)
        log.info(f"all goals sent (at most {late * 1e3:.0f} ms after their recorded time); waiting for results")
        deadline = time.monotonic() + float(node.result_timeout_s)
        cancel_deadline = None
        for _ in self.records:
            while not self._pending.acquire(timeout=0.05):
                now = time.monotonic()
                if now > deadline or (cancel_deadline is not None and now > cancel_deadline):
                    break
                if cancel_deadline is None and node.give_up():
                    with self._lock:
                        handles = [h for h, _ in self._handles]
                    for handle in handles:
                        handle.cancel_goal_async()
                    cancel_deadline = now + 3.0
            else:
                continue
            break
        with self._lock:
            self._closed = True
            for rec in self.records:
                row = self.rows[rec.task.task_id]
                if rec.result_at is None and row.status == "?":
                    row.status = "no result"
                    row.message = ("timed out waiting for the result" if rec.outcome.get("accepted")
                                   else "no goal response from /plan")
            records = list(self.records)
            unanswered = [h for h, rec in self._handles if rec.result_at is None]
        for handle in unanswered:     # reported "no result": the server should not go on planning for them
            handle.cancel_goal_async()
        if node.record_bag:
            write_run_bag(node.record_bag, self.workload, records, start_ns=self._t0_wall_ns)
            log.info(f"recorded {len(records)} goals and {sum(r.result_at is not None for r in records)} results "
                     f"to {node.record_bag}")
        return node.report(list(self.rows.values()))

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _send(self, task: WorkloadTask) -> None:
        goal = Plan.Goal(agent_id=task.agent_id, robot_type=task.robot_type, task=task.task, context=task.context,
                         urgency_class=task.urgency)
        rec = RunRecord(task, sent_at=self._now())
        row = OutcomeRow(agent=task.agent_id, robot_type=task.robot_type, task=task.task, urgency=task.urgency,
                         sent_at=rec.sent_at)
        with self._lock:
            self.records.append(rec)
            self.rows[task.task_id] = row
        future = self.node.client.send_goal_async(goal)
        future.add_done_callback(lambda f: self._on_goal_response(f, rec, row))

    def _on_goal_response(self, future, rec: RunRecord, row: OutcomeRow) -> None:
        try:
            handle = future.result() if future.exception() is None else None
            if handle is not None and handle.accepted:
                with self._lock:
                    late = self._closed
                    if not late:
                        self._handles.append((handle, rec))
                        rec.outcome["accepted"] = True
                if late:    # its row already says "no goal response": cancel it rather than leave it planning
                    handle.cancel_goal_async()
                    return
                self.node.client.result_async(handle).add_done_callback(lambda f: self._on_result(f, rec, row))
                return
            with self._lock:
                row.status, row.message = "no result", "goal not accepted by the plan server"
        except Exception as exc:  # a callback must never lose a request: count it, say why
            with self._lock:
                row.status, row.message = "no result", f"sending the goal failed: {exc!r}"
        self._pending.release()

    def _on_result(self, future, rec: RunRecord, row: OutcomeRow) -> None:
        try:
            res = future.result().result if future.exception() is None else None
            with self._lock:
                if self._closed:    # after the wait ended: its row is reported "no result" already
                    return
                if res is None:
                    row.status, row.message = "no result", f"result request failed: {future.exception()}"
                else:
                    rec.result_at = self._now()
                    rec.result_cdr = serialize_message(res)
                    row.fill(res, code_name(res.error_code))
                    rec.outcome = {"request_id": res.request_id, "status": row.status,
                                   "error_code": int(res.error_code)}
            self.node.get_logger().info(f"{rec.task.agent_id}: {row.status} '{row.task}' segments={row.segments} "
                                        f"response={row.response_time:.2f}s utility={row.utility:.2f}")
        except Exception as exc:
            with self._lock:
                row.status, row.message = "no result", f"reading the result failed: {exc!r}"
        finally:
            self._pending.release()
