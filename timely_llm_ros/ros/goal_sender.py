"""Send action goals from any thread without racing rclpy's goal-response handling.

rclpy's ActionClient.send_goal_async re-registers its pending future after releasing its lock; a goal
response processed on an executor thread in that window is lost and the caller's future never completes.
GoalSender performs every send on the executor, in the client's own mutually exclusive callback group,
so a send and the processing of responses never overlap.
"""
from __future__ import annotations

import queue
from typing import Callable

from rclpy.action import ActionClient
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.task import Future


class GoalSender:
    """Queue goals from any thread; the executor sends them (use `group` for the ActionClients)."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self.group = MutuallyExclusiveCallbackGroup()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = node.create_guard_condition(self._drain, callback_group=self.group)

    def send(self, client: ActionClient, goal, feedback_callback: Callable | None = None) -> Future:
        """Like client.send_goal_async, callable from any thread; the future completes with the goal handle."""
        outer = Future()
        self._outbox.put((client, goal, feedback_callback, outer))
        self._wake.trigger()
        return outer

    def call(self, fn: Callable[[], None]) -> None:
        """Run fn on the executor in the clients' group (e.g. a cancel request)."""
        self._outbox.put((fn,))
        self._wake.trigger()

    def _drain(self) -> None:
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return
            if len(item) == 1:
                item[0]()
                continue
            client, goal, feedback_callback, outer = item
            inner = client.send_goal_async(goal, feedback_callback=feedback_callback)
            inner.add_done_callback(lambda f, o=outer: _forward(f, o))

    def destroy(self) -> None:
        self._node.destroy_guard_condition(self._wake)


def _forward(inner: Future, outer: Future) -> None:
    exc = inner.exception()
    if exc is not None:
        outer.set_exception(exc)
    else:
        outer.set_result(inner.result())
