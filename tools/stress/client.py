"""An in-process rclpy Plan client that tracks every goal it sends (response, feedback, result) and the server's
~/state topic. Everything is recorded with time.monotonic(), comparable with the executors' timing log lines."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile

from timely_llm_ros.action import Plan
from timely_llm_ros.msg import SchedulerState
from timely_llm_ros.ros.action_client import ActionClient, deep_queues


@dataclass
class GoalRecord:
    """One goal's life as the client saw it."""

    phase: str
    kind: str
    expect: frozenset
    fields: dict
    sent: float
    responded: float | None = None
    accepted: bool | None = None
    handle: object = None
    request_id: str = ""
    states: list = field(default_factory=list)
    segment_fb: dict = field(default_factory=dict)   # index -> monotonic time the segment's feedback arrived
    done: float | None = None
    status: int | None = None
    code: int | None = None
    message: str = ""
    waiting_time: float = -1.0
    cancel_at_state: str = ""

    @property
    def terminal(self) -> bool:
        return self.done is not None or self.accepted is False


class StressClient:
    """Sends Plan goals from any thread; callbacks fill the GoalRecords."""

    def __init__(self, name: str = "stress_client") -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        # deep client-side queues, so that a goal lost in a burst is lost by the server, not by this client
        self.client = ActionClient(self.node, Plan, "/plan", callback_group=MutuallyExclusiveCallbackGroup(),
                                   **deep_queues(4096))
        self.state: SchedulerState | None = None
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._sub = self.node.create_subscription(SchedulerState, "/timely_server/state", self._on_state, latched)
        self.diagnostics: dict[str, str] = {}      # the server's latest /diagnostics key-values
        self.diagnostics_at = 0.0                  # when they arrived (monotonic s)
        self._diag_sub = self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.records: list[GoalRecord] = []
        self._lock = threading.Lock()
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spin = threading.Thread(target=self._spin_forever, daemon=True)
        self._spin.start()

    def _spin_forever(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # context shut down while closing
            pass

    def _on_state(self, msg: SchedulerState) -> None:
        self.state = msg

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("timely_server"):
                self.diagnostics = {kv.key: kv.value for kv in status.values}
                self.diagnostics_at = time.monotonic()

    def fresh_diagnostics(self, timeout: float) -> dict[str, str]:
        """The server's next /diagnostics values (published after this call); {} when none came in time."""
        asked = time.monotonic()
        end = asked + timeout
        while time.monotonic() < end:
            if self.diagnostics_at > asked:
                return dict(self.diagnostics)
            time.sleep(0.05)
        return {}

    def forget(self, records: list[GoalRecord]) -> None:
        """Stop keeping these (ended) records: a long run keeps only the goals still open."""
        gone = {id(r) for r in records}
        with self._lock:
            self.records = [r for r in self.records if id(r) not in gone]

    def wait_for_server(self, timeout: float) -> bool:
        return self.client.wait_until_answering(timeout_sec=timeout)

    def send(self, phase: str, kind: str, expect, fields: dict, on_feedback=None) -> GoalRecord:
        rec = GoalRecord(phase, kind, frozenset(expect), fields, time.monotonic())
        with self._lock:
            self.records.append(rec)
        fut = self.client.send_goal_async(Plan.Goal(**fields),
                                          feedback_callback=lambda m: self._on_feedback(rec, m.feedback, on_feedback))
        fut.add_done_callback(lambda f: self._on_response(rec, f))
        return rec

    def _on_feedback(self, rec: GoalRecord, fb, hook) -> None:
        now = time.monotonic()
        rec.request_id = rec.request_id or fb.request_id
        if not rec.states or rec.states[-1] != fb.state:
            rec.states.append(fb.state)
        if fb.new_segment:
            rec.segment_fb.setdefault(fb.segment.index, now)
        if hook is not None:
            hook(rec, fb)

    def _on_response(self, rec: GoalRecord, fut) -> None:
        rec.responded = time.monotonic()
        try:
            handle = fut.result()
        except Exception as exc:
            rec.accepted, rec.message = False, f"send failed: {exc}"
            return
        rec.handle, rec.accepted = handle, bool(handle.accepted)
        if handle.accepted:
            self.client.result_async(handle).add_done_callback(lambda f: self._on_result(rec, f))

    def _on_result(self, rec: GoalRecord, fut) -> None:
        try:
            wrapped = fut.result()
        except Exception as exc:
            rec.message = f"result lost: {exc}"
            rec.done = time.monotonic()
            return
        r = wrapped.result
        rec.status, rec.code, rec.message = wrapped.status, int(r.error_code), r.error_message
        rec.request_id, rec.waiting_time = rec.request_id or r.request_id, float(r.waiting_time)
        rec.done = time.monotonic()

    def cancel(self, rec: GoalRecord) -> None:
        """Request cancellation (any thread)."""
        if rec.handle is not None:
            rec.handle.cancel_goal_async()

    def wait_terminal(self, records: list[GoalRecord], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(r.terminal for r in records):
                return True
            time.sleep(0.05)
        return all(r.terminal for r in records)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self._spin.join(5.0)
        self.client.destroy()
        self.node.destroy_subscription(self._sub)
        self.node.destroy_subscription(self._diag_sub)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
