"""Sends generated segments to each robot's ExecuteSegment action server and reports back.

Goals and cancels go out through a GoalSender (on the ROS executor, in the clients' callback group):
the scheduler thread never calls the ActionClients itself.

Results (and timeouts) are posted into the scheduler thread as real execution feedback: a segment's
first feedback marks its execution start (a robot queues segments sent while it is busy), its result
arrival the end. A segment's timeout clock starts when the robot should have reached it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from rclpy.action import ActionClient
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment

from ..core.errors import ErrorCode
from ..core.request import Segment
from .conversions import execute_goal
from .goal_sender import GoalSender

Post = Callable[[Callable], None]


@dataclass
class _InFlight:
    agent: str
    est_s: float
    deadline: float
    handle: object | None = None
    started: bool = False


class SegmentDispatcher:
    """One ActionClient per robot namespace; a request's segments are sent as soon as they exist."""

    def __init__(self, node: Node, post: Post, timeout_s: float,
                 on_feedback: Callable[[str, int, object], None] | None = None) -> None:
        self._node = node
        self._post = post
        self._sender = GoalSender(node)
        self._group = self._sender.group
        self.timeout_s = timeout_s
        self._on_feedback = on_feedback
        self._clients: dict[str, ActionClient] = {}
        self._inflight: dict[tuple[str, int], _InFlight] = {}
        self._lock = threading.Lock()

    def client(self, agent: str) -> ActionClient:
        """The ActionClient for /<agent>/execute_segment (created once)."""
        with self._lock:
            client = self._clients.get(agent)
            if client is None:
                client = ActionClient(self._node, ExecuteSegment, f"{agent}/execute_segment",
                                      callback_group=self._group)
                self._clients[agent] = client
            return client

    def wait_for(self, agent: str, timeout_s: float) -> bool:
        """True when the agent's executor is discoverable within timeout_s."""
        return self.client(agent).wait_for_server(timeout_sec=timeout_s)

    def send(self, req_id: str, agent: str, seg: Segment) -> None:
        """Queue one segment for sending (any thread); its start, result or timeout is posted to the scheduler."""
        key = (req_id, seg.index)
        now = time.monotonic()
        with self._lock:
            ahead = sum(v.est_s for k, v in self._inflight.items() if k[0] == req_id)
            self._inflight[key] = _InFlight(agent, seg.est_exec_s, now + ahead + seg.est_exec_s + self.timeout_s)
        future = self._sender.send(self.client(agent), execute_goal(req_id, seg),
                                   feedback_callback=lambda msg: self._on_feedback_msg(key, msg))
        future.add_done_callback(lambda f: self._on_goal_response(key, f))

    def _cancel(self, handle) -> None:
        self._sender.call(handle.cancel_goal_async)

    def _on_feedback_msg(self, key: tuple[str, int], msg) -> None:
        now = time.monotonic()
        with self._lock:
            inflight = self._inflight.get(key)
            first = inflight is not None and not inflight.started
            if first:
                inflight.started = True
                inflight.deadline = now + inflight.est_s + self.timeout_s
        if first:
            self._post(lambda s, r=key[0], i=key[1]: s.on_execution_started(r, i, now))
        if self._on_feedback is not None:
            self._on_feedback(key[0], key[1], msg.feedback)

    def cancel_request(self, req_id: str) -> None:
        """Cancel whatever segment of this request an executor is running."""
        with self._lock:
            items = [(k, v) for k, v in self._inflight.items() if k[0] == req_id]
            for k, _ in items:
                del self._inflight[k]
        for _, inflight in items:
            if inflight.handle is not None:
                self._cancel(inflight.handle)

    def check_timeouts(self) -> None:
        """Report segments whose executor did not answer in time (runs on the scheduler thread)."""
        now = time.monotonic()
        with self._lock:
            expired = [(k, v) for k, v in self._inflight.items() if now > v.deadline]
            for k, _ in expired:
                del self._inflight[k]
        for (req_id, index), inflight in expired:
            if inflight.handle is not None:
                self._cancel(inflight.handle)
            msg = (f"executor /{inflight.agent}/execute_segment did not finish segment {index} within its estimate"
                   f" + executor_timeout_s ({self.timeout_s:.1f} s); check that the robot's executor is running")
            self._post(lambda s, r=req_id, i=index, m=msg, t=now: s.on_execution_finished(
                r, i, t, ok=False, error=m, code=ErrorCode.EXECUTOR_TIMEOUT))

    def destroy(self) -> None:
        self._sender.destroy()
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
            first_of_request = not any(k[0] == req_id and k[1] < index for k in self._inflight)
        if inflight is None:  # cancelled or timed out meanwhile
            if handle.accepted:
                handle.cancel_goal_async()  # already on the executor, in the clients' group
            return
        if not handle.accepted:
            self._fail(key, now, f"executor /{inflight.agent}/execute_segment rejected segment {index}")
            return
        if first_of_request and not inflight.started:
            # provisional start (an executor that sends no feedback); the first feedback overrides it
            self._post(lambda s: s.on_execution_started(req_id, index, now))
        handle.get_result_async().add_done_callback(lambda f: self._on_result(key, f))

    def _on_result(self, key: tuple[str, int], future) -> None:
        now = time.monotonic()
        req_id, index = key
        with self._lock:
            inflight = self._inflight.pop(key, None)
        if inflight is None:
            return
        try:
            result = future.result().result
        except Exception as exc:
            self._fail(key, now, f"segment {index} result lost: {exc}", pop=False)
            return
        ok = bool(result.success)
        err = result.error_message or f"executor error code {result.error_code}"
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=ok, error=err))

    def _fail(self, key: tuple[str, int], now: float, message: str, pop: bool = True) -> None:
        if pop:
            with self._lock:
                self._inflight.pop(key, None)
        req_id, index = key
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=False, error=message,
                                                     code=ErrorCode.EXECUTOR_UNAVAILABLE))
