"""The server's directory of robots: each executor's ExecutorStatus (robot type, skills, plan rule, what it runs)
and whether it is alive, read from ``<agent>/executor_status`` (ros/executor_status.py).

An agent is tracked from configure (expected_agents) or its first goal. Its executor is **alive** while the
status publisher's liveliness holds: a killed executor loses it about a lease (1 s) after it dies. A live process
can miss its lease too when it is starved (make stress's soak saw a host of 50 robots on 2 cores silent for ~1.5 s),
so the loss counts only when the liveliness has not come back ``grace_s`` later: then ``on_lost(agent)`` is called
once, and the server ends the segments it holds (EXECUTOR_UNAVAILABLE) instead of waiting for their timeouts. The
same writer coming back is alive again; a restarted executor (a new writer) means the old one is gone (``on_lost``
at once), and its own first status replaces the old one's. An executor that publishes no status (a team's plain
ExecuteSegment server) is never checked: ``status`` stays None and ``alive`` None. The subscriptions live on the
node of the server's per-robot clients (ros/server/client_host.py), off the server node's executor.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node

from timely_llm_ros.msg import ExecutorStatus

from timely_llm_ros.core.capabilities import DEFAULT_PLAN_RULE, RobotStatus
from timely_llm_ros.ros.executor_status import STATUS_TOPIC, status_from_msg, status_qos


def twins_message(agent: str, count: int) -> str:
    """Why a goal or segment for an agent with ``count`` > 1 live executors is refused."""
    return (f"{count} executors serve /{agent}/execute_segment, so each would run every segment; "
            "give each robot's executor its own namespace and stop the others")


@dataclass
class _Entry:
    subscription: object
    status: RobotStatus | None = None
    alive: bool | None = None          # None: no live status publisher seen yet
    since: float = 0.0                 # when ``alive`` last changed (monotonic s)
    writers: int = 0                   # live status publishers under this name (two executors share it: 2)


class RobotDirectory:
    """What each tracked agent's executor is and whether it is alive (thread-safe)."""

    def __init__(self, node: Node, on_lost: Callable[[str], None] = lambda agent: None, grace_s: float = 2.0) -> None:
        self._node = node
        self._on_lost = on_lost
        self.grace_s = grace_s
        self._entries: dict[str, _Entry] = {}
        self._changed = threading.Condition()

    def track(self, agent: str) -> None:
        """Follow this agent's executor status from now on (idempotent)."""
        with self._changed:
            if agent in self._entries:
                return
            events = SubscriptionEventCallbacks(liveliness=lambda info, a=agent: self._on_liveliness(a, info))
            sub = self._node.create_subscription(ExecutorStatus, f"{agent}/{STATUS_TOPIC}",
                                                 lambda msg, a=agent: self._on_status(a, msg), status_qos(),
                                                 event_callbacks=events)
            self._entries[agent] = _Entry(sub)

    def live_executors(self, agent: str) -> int:
        """How many live executors publish this agent's status (its subscription's liveliness: a killed one stops
        counting about a lease after it died, though the ROS graph lists it for ~20 s more); 0 when untracked."""
        with self._changed:
            entry = self._entries.get(agent)
            return entry.writers if entry is not None else 0

    def wait_live_executors(self, agent: str, count: int, timeout_s: float) -> int:
        """Wait up to timeout_s until ``count`` live executors publish the agent's status; how many do then."""
        end = time.monotonic() + timeout_s
        with self._changed:
            while True:
                entry = self._entries.get(agent)
                writers = entry.writers if entry is not None else 0
                left = end - time.monotonic()
                if writers >= count or left <= 0:
                    return writers
                self._changed.wait(min(left, 0.05))

    def status(self, agent: str) -> RobotStatus | None:
        """The agent's latest status, or None (not tracked, none received, or its executor publishes none)."""
        with self._changed:
            entry = self._entries.get(agent)
            return entry.status if entry is not None else None

    def alive(self, agent: str) -> bool | None:
        """True while its status publisher is alive, False once it was lost, None when none was ever seen."""
        with self._changed:
            entry = self._entries.get(agent)
            return entry.alive if entry is not None else None

    def plan_rule(self, agent: str) -> str:
        """The agent's executor's plan rule (queue | urgent_preempts); "queue" when it has not said."""
        status = self.status(agent)
        return status.plan_rule if status is not None and status.plan_rule else DEFAULT_PLAN_RULE

    def publishes_status(self, agent: str) -> bool:
        """Whether a status publisher for the agent is in the ROS graph now (one graph count)."""
        return self._node.count_publishers(self._node.resolve_topic_name(f"{agent}/{STATUS_TOPIC}")) > 0

    def wait_status(self, agent: str, timeout_s: float, aborted: Callable[[], bool] = lambda: False
                    ) -> RobotStatus | None:
        """The agent's live status, waiting up to timeout_s for it while a status publisher is in the graph (a
        latched status arrives once the subscription is matched); None at once when the agent's executor publishes
        none, or when none came in time."""
        self.track(agent)
        end = time.monotonic() + timeout_s
        with self._changed:
            while True:
                entry = self._entries[agent]
                if entry.status is not None and entry.alive is not False:
                    return entry.status
                left = end - time.monotonic()
                if left <= 0 or aborted() or (entry.alive is None and not self.publishes_status(agent)):
                    return None
                self._changed.wait(min(left, 0.05))

    def robots(self) -> dict[str, tuple[RobotStatus | None, bool | None]]:
        """Every tracked agent: (latest status, alive)."""
        with self._changed:
            return {agent: (e.status, e.alive) for agent, e in self._entries.items()}

    def destroy(self) -> None:
        """Destroy the subscriptions (their node is the caller's to destroy); pending loss checks do nothing."""
        with self._changed:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            self._node.destroy_subscription(entry.subscription)

    def _on_status(self, agent: str, msg: ExecutorStatus) -> None:
        """A status: what the executor is and does. Whether it is alive is the liveliness events' to say (a sample
        sent before a stall can arrive after its lease ran out), except at the first sighting."""
        with self._changed:
            entry = self._entries.get(agent)
            if entry is None:
                return
            entry.status = status_from_msg(msg)
            if entry.alive is None:
                entry.alive, entry.since = True, time.monotonic()
            self._changed.notify_all()

    def _on_liveliness(self, agent: str, info) -> None:
        restarted = False
        with self._changed:
            entry = self._entries.get(agent)
            if entry is None:
                return
            now = time.monotonic()
            twins = info.alive_count > 1 >= entry.writers
            entry.writers = info.alive_count
            if info.alive_count > 0 and entry.alive is not True:
                if entry.alive is False and info.not_alive_count_change < 0:   # the same writer is back
                    self._node.get_logger().info(f"executor /{agent}/execute_segment is back after "
                                                 f"{now - entry.since:.1f} s without liveliness")
                else:          # a new writer: a restarted executor (the old one is gone), or the first sighting
                    restarted = entry.alive is False
                entry.alive, entry.since = True, now
            elif info.alive_count == 0 and info.alive_count_change < 0 and entry.alive is not False:
                entry.alive, entry.since = False, now
                check = threading.Timer(self.grace_s, self._confirm_lost, (agent, now))
                check.daemon = True
                check.start()
            self._changed.notify_all()
        if twins:
            self._node.get_logger().error(f"{twins_message(agent, info.alive_count)}; its goals and segments are "
                                          "refused until only one is left")
        if restarted:
            self._on_lost(agent)

    def _confirm_lost(self, agent: str, since: float) -> None:
        """grace_s after a liveliness loss: if it has not come back since, the executor is gone."""
        with self._changed:
            entry = self._entries.get(agent)
            lost = entry is not None and entry.alive is False and entry.since == since
        if lost:
            self._on_lost(agent)
