"""rclpy's ActionClient, safe to create while another thread spins its node."""
from __future__ import annotations

import threading

from rclpy.action import ActionClient as _RclpyActionClient


class ActionClient(_RclpyActionClient):
    """rclpy (Kilted) registers a new ActionClient with its node (add_waitable) before it creates the lock that
    get_num_entities takes, so an executor spinning in another thread can meet it half-built and raise
    AttributeError ('ActionClient' object has no attribute '_lock'). Creating a lock first closes that window;
    rclpy then replaces it with a fresh one before the client has sent anything."""

    def __init__(self, *args, **kwargs) -> None:
        self._lock = threading.Lock()
        super().__init__(*args, **kwargs)
