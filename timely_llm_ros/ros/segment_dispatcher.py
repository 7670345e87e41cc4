"""Sends generated segments to each robot's ExecuteSegment action server and reports back.

A segment's goal is sent by the thread that generated it, right after its feedback went to the Plan client, and
cancels from whichever thread decides them (our ActionClient registers a goal, and rclpy a cancel, under the
client's lock, so both are safe while the executor spins). An ActionClient is made only for an agent
whose executor is in the ROS graph (or listed in expected_agents): unknown agent ids leave nothing behind.

Results (and timeouts) are posted into the scheduler thread as real execution feedback. The segment's
execution time is the one the executor reports (result.execution_time), ending when its result arrives.
Timeouts: an executor must accept or reject a segment within ``ack_timeout_s`` (else EXECUTOR_UNAVAILABLE,
as when its action server leaves the graph); a segment's execution clock (estimate + ``timeout_s``, else
EXECUTOR_TIMEOUT) starts when it starts executing: at its first feedback, or when it becomes the oldest
accepted segment at its robot (the robot runs segments one at a time, in order).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment

from ..core.errors import ErrorCode
from ..core.request import Segment
from .action_client import ActionClient, deep_queues
from .conversions import execute_goal, plan_error_code, skill_from_msg

Post = Callable[[Callable], None]
# Every queue of the clients to the executors keeps 100 (rclpy's default is 10): a request the executor has not
# received yet stays in the client's history until the executor acknowledges it. With 10, a burst of goal writes
# evicted requests the executor never got; and once an executor had not answered for over a second (Fast DDS then
# stops handing it samples through shared memory and relies on resending from that history), only the last 10
# cancels reached it and the robot ran segments of ended plans to their end. ~85 KB per robot.
CLIENT_QUEUES = deep_queues(100)


@dataclass
class _InFlight:
    agent: str
    est_s: float
    sent_at: float
    deadline: float | None = None    # execution deadline, set once the segment runs
    handle: object | None = None
    started: bool = False


class SegmentDispatcher:
    """One ActionClient per robot namespace; a request's segments are sent as soon as they exist."""

    def __init__(self, node: Node, post: Post, group: CallbackGroup, timeout_s: float, ack_timeout_s: float = 2.0,
                 on_feedback: Callable[[str, int, object], None] | None = None, log_timing: bool = False) -> None:
        """group: the callback group of the per-agent ActionClients (mutually exclusive: their responses,
        feedback and results are handled one at a time)."""
        self._node = node
        self.log_timing = log_timing
        self._post = post
        self._group = group
        self.timeout_s = timeout_s
        self.ack_timeout_s = ack_timeout_s
        self._on_feedback = on_feedback
        self._clients: dict[str, ActionClient] = {}
        self._confirmed: dict[str, tuple] = {}   # agent -> identity of the executor that answered our handshake
        self._inflight: dict[tuple[str, int], _InFlight] = {}
        self._lock = threading.Lock()

    def client(self, agent: str) -> ActionClient:
        """The ActionClient for /<agent>/execute_segment (created once)."""
        with self._lock:
            client = self._clients.get(agent)
            if client is None:
                client = ActionClient(self._node, ExecuteSegment, f"{agent}/execute_segment",
                                      recovery_timer=False, callback_group=self._group, **CLIENT_QUEUES)
                self._clients[agent] = client
            return client

    def known(self) -> list[str]:
        """Agents that have an ActionClient."""
        with self._lock:
            return list(self._clients)

    def ready(self, agent: str) -> bool:
        """True when this agent's executor is in the graph and is the one that answered our handshake (a restarted
        executor is a new participant and must answer again before it gets a goal). Asked for every goal: one graph
        lookup (the status publisher's endpoint ids, which exist only while that executor does), not the client's
        server_is_ready() (five lookups), which was 9% of the server's GIL time in the ROS burst's intake."""
        with self._lock:
            client = self._clients.get(agent)
            confirmed = self._confirmed.get(agent)
        return client is not None and bool(confirmed) and confirmed == self._identity(agent)

    def _identity(self, agent: str) -> tuple:
        """The endpoint ids of the agent's status publisher: they change when its executor restarts."""
        topic = self._node.resolve_topic_name(f"{agent}/execute_segment/_action/status")
        return tuple(sorted(bytes(i.endpoint_gid) for i in self._node.get_publishers_info_by_topic(topic)))

    def in_graph(self, agent: str) -> bool:
        """Whether the agent's ExecuteSegment server is in the ROS graph (no entity is created to find out; one
        service is counted, not the graph's every service listed: with 50 robots that list took the GIL for ms)."""
        name = self._node.resolve_service_name(f"{agent}/execute_segment") + "/_action/send_goal"
        return self._node.count_services(name) > 0

    def discover(self, agent: str, timeout_s: float, aborted: Callable[[], bool] = lambda: False) -> bool:
        """Wait (blocking, up to timeout_s) until the agent's executor is in the graph, matched, and has answered
        a handshake; a client is created only once it is in the graph."""
        end = time.monotonic() + timeout_s
        with self._lock:
            client = self._clients.get(agent)
        if client is None or not client.server_is_ready():   # a matched client needs no graph query
            while not self.in_graph(agent):
                if aborted() or time.monotonic() >= end:
                    return False
                time.sleep(0.05)
            client = self.client(agent)
        match_end = max(end, time.monotonic() + 1.0)  # in the graph: give the client a moment to match
        while not client.server_is_ready():
            if aborted() or time.monotonic() >= match_end:
                return False
            time.sleep(0.02)
        identity = self._identity(agent)
        # matched on our side is not matched on the executor's: see ActionClient.handshake
        if not client.handshake(max(match_end - time.monotonic(), 1.0), aborted):
            return False
        with self._lock:
            self._confirmed[agent] = identity
        return True

    def send(self, req_id: str, agent: str, seg: Segment) -> None:
        """Queue one segment for sending (any thread); its start, result or timeout is posted to the scheduler."""
        key = (req_id, seg.index)
        now = time.monotonic()
        with self._lock:
            self._inflight[key] = _InFlight(agent, seg.est_exec_s, now)
        try:
            future = self.client(agent).send_goal_async(execute_goal(req_id, seg),
                                                        feedback_callback=lambda msg: self._on_feedback_msg(key, msg))
        except Exception as exc:  # the client's node is going down
            self._fail(key, now, f"sending segment {seg.index} failed: {exc}")
            return
        if self.log_timing:
            self._node.get_logger().info(f"segment timing {req_id} {seg.index} sent {time.monotonic():.6f}")
        future.add_done_callback(lambda f: self._on_goal_response(key, f))

    def _cancel(self, handle) -> None:
        handle.cancel_goal_async()

    def _on_feedback_msg(self, key: tuple[str, int], msg) -> None:
        now = time.monotonic()
        with self._lock:
            inflight = self._inflight.get(key)
            first = inflight is not None and not inflight.started
            if first:
                inflight.started = True
                inflight.deadline = now + inflight.est_s + self.timeout_s
                inflight.sent_at = min(inflight.sent_at, now)
        if first:
            self._post(lambda s, r=key[0], i=key[1]: s.on_execution_started(r, i, now))
        if self._on_feedback is not None:
            self._on_feedback(key[0], key[1], msg.feedback)

    def cancel_request(self, req_id: str, indices: Iterable[int] | None = None) -> None:
        """Cancel the segments of this request that are out (those in `indices`, or all), the last one first: the
        robot's executor then never starts a later segment between the cancel of its running one and its own."""
        wanted = None if indices is None else set(indices)
        with self._lock:
            items = sorted(((k, v) for k, v in self._inflight.items()
                            if k[0] == req_id and (wanted is None or k[1] in wanted)), key=lambda kv: -kv[0][1])
            for k, _ in items:
                del self._inflight[k]
        for _, inflight in items:
            if inflight.handle is not None:
                self._cancel(inflight.handle)

    def _arm(self, agent: str, now: float) -> None:
        """Start the execution clock of the agent's oldest accepted segment if none of its segments runs
        (call with the lock held): the robot moves on to it now."""
        mine = [v for v in self._inflight.values() if v.agent == agent]
        if any(v.deadline is not None for v in mine):
            return
        for v in mine:
            if v.handle is not None:
                v.deadline = now + v.est_s + self.timeout_s
                return

    def check_presence(self) -> None:
        """Report the segments of executors that left the ROS graph, and ask again for results an executor sent
        before it had matched us. One service count per agent with a segment out (in_graph: with 116 agents 4-6 ms
        on an idle 2-core box, where asking each client whether its server is ready took 21-32 ms and, under the
        x4 burst, up to 100 ms every 0.5 s). The server runs it on a ROS timer, off the scheduler thread."""
        with self._lock:
            agents = {v.agent for v in self._inflight.values()}
            clients = {a: self._clients.get(a) for a in agents}
        try:
            gone = {a for a, c in clients.items() if c is None or not self.in_graph(a)}
        except InvalidHandle:   # the clients' node is being destroyed (shutdown): nothing to report any more
            return
        for client in clients.values():
            if client is not None:
                client.ask_again()
        if gone:
            self._expire(lambda index, v: (ErrorCode.EXECUTOR_UNAVAILABLE, f"executor /{v.agent}/execute_segment "
                                           f"left the ROS graph while segment {index} was with it; restart the "
                                           "robot's executor") if v.agent in gone else None)

    def executor_lost(self, agent: str, why: str) -> None:
        """The agent's executor is gone (its status lost liveliness: ros/robot_directory.py): its segments out end
        EXECUTOR_UNAVAILABLE now, and whoever answers next must shake hands again."""
        with self._lock:
            self._confirmed.pop(agent, None)
        self._expire(lambda index, v: (ErrorCode.EXECUTOR_UNAVAILABLE, f"executor /{v.agent}/execute_segment {why} "
                                       f"while segment {index} was with it; restart the robot's executor")
                     if v.agent == agent else None)

    def check_timeouts(self) -> None:
        """Report segments whose executor did not accept them or finish them in time (runs on the scheduler
        thread: a pass over the segments out, no graph query)."""
        now = time.monotonic()

        def late(index: int, v: _InFlight) -> tuple[ErrorCode, str] | None:
            if v.handle is None and now > v.sent_at + self.ack_timeout_s:
                return (ErrorCode.EXECUTOR_UNAVAILABLE, f"executor /{v.agent}/execute_segment did not accept or "
                        f"reject segment {index} within executor_ack_timeout_s ({self.ack_timeout_s:.1f} s); "
                        "check that the robot's executor is running")
            if v.deadline is not None and now > v.deadline:
                return (ErrorCode.EXECUTOR_TIMEOUT, f"executor /{v.agent}/execute_segment did not finish segment "
                        f"{index} within its estimate ({v.est_s:.1f} s) + executor_timeout_s "
                        f"({self.timeout_s:.1f} s) after it started; check the robot")
            return None

        self._expire(late)

    def _expire(self, why: Callable[[int, _InFlight], tuple[ErrorCode, str] | None]) -> None:
        """End every segment out for which why(index, segment) gives (code, message): cancel it at its executor and
        report it failed to the scheduler."""
        now = time.monotonic()
        expired = []
        with self._lock:
            for k, v in list(self._inflight.items()):
                reason = why(k[1], v)
                if reason is None:
                    continue
                if reason[0] == ErrorCode.EXECUTOR_UNAVAILABLE:   # whoever answers next must shake hands again
                    self._confirmed.pop(v.agent, None)
                del self._inflight[k]
                expired.append((k, v, reason))
        for (req_id, index), inflight, (code, msg) in expired:
            if inflight.handle is not None:
                self._cancel(inflight.handle)
            self._post(lambda s, r=req_id, i=index, m=msg, t=now, c=code: s.on_execution_finished(
                r, i, t, ok=False, error=m, code=c))

    def destroy(self) -> None:
        """Release the per-agent clients (safe while the node spins: see ActionClient.destroy)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.destroy()

    def _on_goal_response(self, key: tuple[str, int], future) -> None:
        now = time.monotonic()
        req_id, index = key
        try:
            handle = future.result()
        except Exception as exc:  # transport failure
            self._fail(key, now, f"sending segment {index} failed: {exc}")
            return
        with self._lock:
            inflight = self._inflight.get(key)
            if inflight is not None:
                inflight.handle = handle
                if handle.accepted:
                    self._arm(inflight.agent, now)
            first_of_request = not any(k[0] == req_id and k[1] < index for k in self._inflight)
        if inflight is None:  # cancelled or timed out meanwhile
            if handle.accepted:
                handle.cancel_goal_async()  # already on the executor, in the clients' group
            return
        if not handle.accepted:
            self._fail(key, now, f"executor /{inflight.agent}/execute_segment rejected segment {index} (busy or "
                                 "unable to take it)")
            return
        if first_of_request and not inflight.started:
            # provisional start (an executor that sends no feedback); the first feedback overrides it
            self._post(lambda s: s.on_execution_started(req_id, index, now))
        self.client(inflight.agent).result_async(handle).add_done_callback(lambda f: self._on_result(key, f))

    def _on_result(self, key: tuple[str, int], future) -> None:
        now = time.monotonic()
        req_id, index = key
        with self._lock:
            inflight = self._inflight.pop(key, None)
            if inflight is not None:
                self._arm(inflight.agent, now)
        if inflight is None:
            return
        try:
            result = future.result().result
        except Exception as exc:
            self._fail(key, now, f"segment {index} result lost: {exc}", pop=False)
            return
        if result.error_code == ExecuteSegment.Result.NOT_RUN and self._earlier_out(req_id, index):
            return   # the robot stopped the plan at an earlier segment, whose own result (on its way) decides
        ok = bool(result.success)
        err = result.error_message or f"executor error code {result.error_code}"
        if result.error_code == ExecuteSegment.Result.BUSY:
            err = f"executor /{inflight.agent}/execute_segment is busy: {err}"
        code = plan_error_code(result.error_code)
        took = float(result.execution_time)
        if ok and 0.0 < took < now - inflight.sent_at + 1.0:
            # the executor's own measure of the segment: it started `took` seconds before its result arrived
            start = max(inflight.sent_at, now - took)
            self._post(lambda s: s.on_execution_started(req_id, index, start))
        executed = [skill_from_msg(m) for m in result.executed_skills]
        returned, value = ok and bool(result.returned), str(result.return_value)
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=ok, error=err, code=code,
                                                     executed=executed, returned=returned, return_value=value))

    def _earlier_out(self, req_id: str, index: int) -> bool:
        with self._lock:
            return any(k[0] == req_id and k[1] < index for k in self._inflight)

    def _fail(self, key: tuple[str, int], now: float, message: str, pop: bool = True) -> None:
        if pop:
            with self._lock:
                self._inflight.pop(key, None)
        req_id, index = key
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=False, error=message,
                                                     code=ErrorCode.EXECUTOR_UNAVAILABLE))
