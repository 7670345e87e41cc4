"""rclpy's ActionClient with two thread-safety fixes, so goals can be sent from any thread."""
from __future__ import annotations

import threading
from typing import Callable

from rclpy.action import ActionClient as _RclpyActionClient
from rclpy.task import Future


class ActionClient(_RclpyActionClient):
    """Fixes two windows in rclpy (Kilted) in which another thread spinning the node breaks the client:

    - construction: rclpy registers the client with its node (add_waitable) before it creates the lock that
      get_num_entities takes, so the executor can meet it half-built ('ActionClient' object has no attribute
      '_lock'). A lock made first closes that window; rclpy replaces it before anything is sent.
    - send_goal_async: rclpy registers the goal's pending future a second time after releasing its lock, so a
      goal response taken by the executor in between completes a future nobody holds (the goal is accepted but
      its sender never learns it). Here the request is sent and its future and feedback callback registered in
      one locked step; a response can only be taken (under the same lock) after that.
    """

    def __init__(self, *args, **kwargs) -> None:
        self._lock = threading.Lock()
        super().__init__(*args, **kwargs)

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
