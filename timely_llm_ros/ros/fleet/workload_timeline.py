"""What fleet_workload saw of each request and robot during a run, for the demo's timeline (events_csv).

One row per observation, stamped with this process's monotonic clock (the clock the server's step trace uses, so the
two line up): ``sent`` (a goal left; value: its urgency class), ``contention`` (that goal was the one held back for
the moment of contention), ``state`` (Plan feedback: the request's new state), ``segment`` (Plan feedback: a new
segment, value: its index), ``robot`` (the robot's executor status: ``busy:<segment>`` with the request it runs, or
``idle``), ``result`` (the Plan result, value: its status). ``request`` is the workload's name for a goal,
``<agent>#<n>``; ``request_id`` the server's, where the observation carries it. tools/demo_timeline.py
reads the file.
"""
from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Callable

from rclpy.node import Node

from timely_llm_ros.msg import ExecutorStatus

from timely_llm_ros.ros.executor_status import STATUS_TOPIC, status_qos

EVENT_COLUMNS = ("t", "agent", "request", "request_id", "kind", "value")


class TimelineRecorder:
    """Collects the rows (thread-safe: feedback, results and robot status arrive on different threads) and writes
    them as CSV once the run is over."""

    def __init__(self, node: Node, agents: list[str]) -> None:
        self._lock = threading.Lock()
        self._rows: list[tuple] = []
        self._unheard = set(agents)          # robots whose executor status has not reached this node yet
        self._subscriptions = [
            node.create_subscription(ExecutorStatus, f"{agent}/{STATUS_TOPIC}",
                                     lambda msg, agent=agent: self._on_status(agent, msg), status_qos())
            for agent in agents]

    def record(self, agent: str, request: str, kind: str, value: object = "", request_id: str = "") -> None:
        with self._lock:
            self._rows.append((time.monotonic(), agent, request, request_id, kind, str(value)))

    def wait_for_robots(self, timeout_s: float, stopping: Callable[[], bool]) -> list[str]:
        """Wait until every robot's (latched) executor status has reached this node, so none of its segments goes
        unseen for discovery; returns the robots still unheard after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while self._unheard and time.monotonic() < end and not stopping():
            time.sleep(0.05)
        return sorted(self._unheard)

    def _on_status(self, agent: str, msg: ExecutorStatus) -> None:
        self._unheard.discard(agent)
        busy = msg.state == "busy" and msg.request_id
        self.record(agent, "", "robot", f"busy:{msg.segment_index}" if busy else msg.state,
                    msg.request_id if busy else "")

    def write(self, path: str | Path) -> int:
        """Write the rows, in time order, to ``path`` (its folder is made); returns how many."""
        with self._lock:
            rows = sorted(self._rows)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(EVENT_COLUMNS)
            writer.writerows((repr(t), *rest) for t, *rest in rows)
        return len(rows)
