"""rclpy's ActionClient with thread-safety fixes, a first-contact handshake and lost-result recovery, so goals can
be sent from any thread and no response the server sends before it has matched this client is lost."""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient as _RclpyActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.exceptions import InvalidHandle
from rclpy.executors import await_or_execute
from rclpy.qos import QoSProfile
from rclpy.task import Future
from unique_identifier_msgs.msg import UUID

PROBE_WAIT_S = 0.25     # one handshake attempt: how long to wait for the server's answer before asking again
RESULT_SETTLE_S = 0.5   # a goal that ended this long ago without a result being received: ask again
_ENDED = (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_CANCELED, GoalStatus.STATUS_ABORTED)


def deep_queues(depth: int = 1000, server: bool = False) -> dict[str, QoSProfile]:
    """ActionClient (or, with server=True, ActionServer) keyword arguments giving its goal, result and cancel
    services and its feedback a history of ``depth``. rclpy's default of 10 drops the oldest of what waits to be
    taken: a client loses responses a burst sends back at once, and a server whose process falls behind (busy, or
    paused) loses goal requests beyond the tenth, silently, so their senders wait for an answer that never comes."""
    deep = QoSProfile(depth=depth)
    names = ("goal_service", "result_service", "cancel_service", "feedback_pub" if server else "feedback_sub")
    return {f"{name}_qos_profile": deep for name in names}


@dataclass(eq=False)
class _Awaited:
    """A result being waited for: the goal, the caller's future, when we last asked and first saw it ended."""

    handle: object
    future: Future
    asked: float
    ended_seen: float | None = None


class ActionClient(_RclpyActionClient):
    """Fixes four ways in which rclpy (Kilted) can leave a caller waiting forever, and one way its destroy() can
    crash a spinning executor (see the Waitable API below):

    - construction: rclpy registers the client with its node (add_waitable) before it creates the lock that
      get_num_entities takes, so the executor can meet it half-built ('ActionClient' object has no attribute
      '_lock'). A lock made first closes that window; rclpy replaces it before anything is sent.
    - send_goal_async: rclpy registers the goal's pending future a second time after releasing its lock, so a
      goal response taken by the executor in between completes a future nobody holds. Here the request is sent
      and its future and feedback callback registered in one locked step.
    - first contact: ``server_is_ready()`` (and so ``wait_for_server``) means this client has matched the server,
      not that the server has matched this client's response readers; a goal response sent before then is
      dropped by the middleware and the goal runs with nobody waiting for it. ``wait_until_answering`` adds a
      handshake (see ``handshake``); call it, not ``wait_for_server``, before the first goal.
    - results: DDS discovery runs per participant, so a server may answer a result request before it has
      matched this client's result reader, and the middleware drops the answer. ``result_async(handle)`` asks
      again once the goal's status (a latched topic) says it ended and no result came within RESULT_SETTLE_S;
      the server keeps results of ended goals, so the repeated request is answered at once.
    - feedback overtaken by the result: rclpy takes one feedback message per wake-up and, once a goal's result
      arrives, forgets its feedback callback, so feedback still queued behind the result (a client that fell
      behind) was dropped and never reached the caller. ROS 2 does not order a result (a service response)
      after feedback (a topic). Here a wake-up that takes a result first takes every feedback message already
      queued and hands it to the callbacks before the result completes its future.
    """

    def __init__(self, node, action_type, action_name, recovery_timer: bool = True, **kwargs) -> None:
        """recovery_timer: check for lost results on a timer of its own (False: the owner calls ask_again()
        about every RESULT_SETTLE_S, e.g. one loop for many clients)."""
        self._lock = threading.Lock()
        self._destroyed = False
        super().__init__(node, action_type, action_name, **kwargs)
        self._awaited: dict[bytes, _Awaited] = {}
        self._awaited_lock = threading.Lock()
        self.results_asked_again = 0
        self._recovery = node.create_timer(RESULT_SETTLE_S, self.ask_again,
                                           callback_group=kwargs.get("callback_group")) if recovery_timer else None

    def send_goal_async(self, goal, feedback_callback: Callable | None = None, goal_uuid=None) -> Future:
        """Send a goal from any thread; the future completes with the ClientGoalHandle."""
        if not isinstance(goal, self._action_type.Goal):
            raise TypeError(f"expected a {self._action_type.__name__} goal, got {type(goal).__name__}")
        request = self._action_type.Impl.SendGoalService.Request()
        request.goal_id = self._generate_random_uuid() if goal_uuid is None else goal_uuid
        request.goal = goal
        future: Future = Future()
        with self._lock:
            if feedback_callback is not None:
                self._feedback_callbacks[bytes(request.goal_id.uuid)] = feedback_callback
            sequence_number = self._client_handle.send_goal_request(request)
            if sequence_number in self._pending_goal_requests:
                raise RuntimeError(f"goal request sequence number {sequence_number} is already pending")
            self._pending_goal_requests[sequence_number] = future
            self._goal_sequence_number_to_goal_id[sequence_number] = request.goal_id
            future.add_done_callback(self._remove_pending_goal_request)
            self.add_future(future)
        return future

    def handshake(self, timeout_sec: float, aborted: Callable[[], bool] = lambda: False) -> bool:
        """Ask the server to cancel a goal id nobody has (no effect; answered ERROR_UNKNOWN_GOAL_ID) until it
        answers: its cancel-response writer has then matched our reader, and our goal-response reader was
        announced before that one, so goal responses reach us too. Blocking; the node must be spinning."""
        end = time.monotonic() + timeout_sec
        while not aborted() and time.monotonic() < end:
            probe = ClientGoalHandle(self, UUID(uuid=list(uuid.uuid4().bytes)),
                                     self._action_type.Impl.SendGoalService.Response(accepted=True))
            answer = probe.cancel_goal_async()
            wait_end = min(end, time.monotonic() + PROBE_WAIT_S)
            while time.monotonic() < wait_end and not aborted():
                if answer.done():
                    return True
                time.sleep(0.005)
        return False

    def wait_until_answering(self, timeout_sec: float) -> bool:
        """wait_for_server, then the handshake: True once goal responses from the server reach this client.
        Blocking; the node must be spinning (the handshake's answer is taken by its executor)."""
        end = time.monotonic() + timeout_sec
        if not self.wait_for_server(timeout_sec=timeout_sec):
            return False
        return self.handshake(max(1.0, end - time.monotonic()))

    def result_async(self, handle) -> Future:
        """Like handle.get_result_async(), and asked again if the answer was lost (see the class docstring)."""
        awaited = _Awaited(handle, Future(), time.monotonic())
        with self._awaited_lock:
            self._awaited[bytes(handle.goal_id.uuid)] = awaited
        self._ask(awaited)
        return awaited.future

    def _ask(self, awaited: _Awaited) -> None:
        awaited.handle.get_result_async().add_done_callback(lambda f: self._answered(awaited, f))

    def _answered(self, awaited: _Awaited, answer: Future) -> None:
        with self._awaited_lock:   # the first answer wins; a repeated request may be answered too
            if self._awaited.get(bytes(awaited.handle.goal_id.uuid)) is not awaited:
                return
            del self._awaited[bytes(awaited.handle.goal_id.uuid)]
        exc = answer.exception()
        if exc is not None:
            awaited.future.set_exception(exc)
        else:
            awaited.future.set_result(answer.result())

    def ask_again(self) -> None:
        """Ask again for the results of goals that ended RESULT_SETTLE_S ago without one arriving (any thread)."""
        now = time.monotonic()
        with self._awaited_lock:
            awaited = list(self._awaited.values())
        for a in awaited:
            if a.handle.status not in _ENDED:
                continue
            if a.ended_seen is None:
                a.ended_seen = now
            elif now - max(a.ended_seen, a.asked) >= RESULT_SETTLE_S:
                a.asked = now
                self.results_asked_again += 1
                self._ask(a)

    # ----- Waitable API: safe against a destroy() while an executor builds its wait set -----
    # rclpy's executor snapshots the node's waitables, enters each one's handle, and when that fails because the
    # handle was destroyed in between, still calls add_to_wait_set and is_ready on it (RCLError "action client
    # pointer is invalid", seen when the server released its executors' clients during shutdown). A destroyed
    # client here adds nothing to a wait set, is never ready and has nothing to take.
    def add_to_wait_set(self, wait_set) -> None:
        with self._lock:
            if not self._destroyed:
                self._client_handle.add_to_waitset(wait_set)

    def is_ready(self, wait_set) -> bool:
        with self._lock:
            if self._destroyed:
                return False
            return super().is_ready(wait_set)

    def take_data(self):
        try:
            with self._client_handle:   # in use: a destroy() meanwhile waits until the take is done
                data = super().take_data()
                if "result" in data:    # feedback queued behind a result: take it now (see the class docstring)
                    data["feedback_backlog"] = self._take_queued_feedback(data.pop("feedback", None))
                return data
        except InvalidHandle:           # destroyed before the take
            return {}

    def _take_queued_feedback(self, first) -> list:
        """``first`` (if any) and every feedback message waiting in the subscription, oldest first."""
        backlog = [] if first is None else [first]
        message_type = self._action_type.Impl.FeedbackMessage
        while True:
            with self._lock:
                message = self._client_handle.take_feedback(message_type)
            if message is None:
                return backlog
            backlog.append(message)

    async def execute(self, taken_data) -> None:
        """Feedback taken with a result reaches its callbacks first, then rclpy handles the rest; a rejected goal's
        feedback callback is let go (rclpy lets one go only when its result arrives, and a rejected goal has none)."""
        for message in taken_data.pop("feedback_backlog", ()):
            callback = self._feedback_callbacks.get(bytes(message.goal_id.uuid))
            if callback is not None:
                await await_or_execute(callback, message)
        rejected = None
        if "goal" in taken_data:
            sequence_number, response = taken_data["goal"]
            if not response.accepted:
                rejected = self._goal_sequence_number_to_goal_id.get(sequence_number)
        await super().execute(taken_data)
        if rejected is not None:
            self.stop_feedback(rejected)

    def stop_feedback(self, goal_id) -> None:
        """Let go of this goal's feedback callback: for a goal whose result will not be asked for (withdrawn before
        its response came), which rclpy would otherwise keep, with all the callback holds, for the client's life."""
        with self._lock:
            self._feedback_callbacks.pop(bytes(goal_id.uuid), None)

    def server_is_ready(self) -> bool:
        """Whether the action server is in the graph; False once this client is destroyed (any thread: the plan
        server's presence check runs on a timer while shutdown releases the clients)."""
        with self._lock:
            if self._destroyed:
                return False
        try:
            return super().server_is_ready()
        except InvalidHandle:                   # destroyed in between
            return False

    def destroy(self) -> None:
        """Destroy the client (any thread, also while an executor spins the node)."""
        with self._awaited_lock:
            self._awaited.clear()
        if self._recovery is not None:
            self._node.destroy_timer(self._recovery)
        with self._lock:
            if self._destroyed:
                return
            self._destroyed = True
        super().destroy()
