"""ExecutorStatus on ``<namespace>/executor_status``: what a robot's executor is and is doing, for the server.

Latched (transient local, depth 1, reliable) so a server that subscribes late gets the last one, and with a
liveliness lease (automatic, ``LEASE_S``): the middleware asserts it for a live process, so when an executor is
killed its subscribers see its liveliness lost about a lease later, long before its DDS participant leaves the
graph (20 s with Fast DDS's defaults). Subscribers that want to notice that use ``status_qos()``; one asking for a
shorter lease than the publisher offers is not matched (the default QoS, an infinite lease, matches).
"""
from __future__ import annotations

import threading
from typing import Callable

from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy

from timely_llm_ros.msg import ExecutorStatus

from timely_llm_ros.core.capabilities import RobotStatus

STATUS_TOPIC = "executor_status"
LEASE_S = 1.0


def status_qos() -> QoSProfile:
    return QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE,
                      liveliness=LivelinessPolicy.AUTOMATIC, liveliness_lease_duration=Duration(seconds=LEASE_S))


def status_to_msg(status: RobotStatus) -> ExecutorStatus:
    return ExecutorStatus(robot_type=status.robot_type, skills=sorted(status.skills), interprets=status.interprets,
                          plan_rule=status.plan_rule,
                          state=status.state, request_id=status.request_id, segment_index=status.segment_index,
                          segments_waiting=status.segments_waiting)


def status_from_msg(msg: ExecutorStatus) -> RobotStatus:
    return RobotStatus(robot_type=msg.robot_type, skills=frozenset(msg.skills), interprets=bool(msg.interprets),
                       plan_rule=msg.plan_rule,
                       state=msg.state, request_id=msg.request_id, segment_index=int(msg.segment_index),
                       segments_waiting=int(msg.segments_waiting))


class StatusPublisher:
    """Publishes one executor's status on every change (``update``) and, when ``period_s`` > 0, every period (a
    timer). Nothing is published before ``announce()`` (or the first timer tick), so a subclass that registers its
    skills after the base's constructor is never advertised half-built. ``snapshot`` must not block on the
    executor's locks (``update`` may be called with them held).

    No timer by default (the executor's status_period_s 0): the topic is latched and its liveliness is the
    middleware's, while each timer wake-up of an idle robot costs its host process a pass of rclpy's executor over
    every node it hosts (with 50 idle robots in one host a 1 s period keeps a good part of a core busy)."""

    def __init__(self, node: Node, period_s: float, snapshot: Callable[[], RobotStatus]) -> None:
        self._node = node
        self._snapshot = snapshot
        self._pub = node.create_publisher(ExecutorStatus, STATUS_TOPIC, status_qos())
        self._lock = threading.Lock()
        self._last: RobotStatus | None = None
        self._announced = False
        self._timer = node.create_timer(period_s, self._tick) if period_s > 0 else None

    def announce(self) -> None:
        """The executor is complete: publish its status now, and on every change from here on."""
        self._announced = True
        self._publish(always=True)

    def update(self) -> None:
        """Publish if the status differs from the last one published (after announce)."""
        if self._announced:
            self._publish(always=False)

    def _tick(self) -> None:
        self._announced = True
        self._publish(always=True)

    def _publish(self, always: bool) -> None:
        with self._lock:
            status = self._snapshot()
            if not always and status == self._last:
                return
            self._last = status
            msg = status_to_msg(status)
            msg.stamp = self._node.get_clock().now().to_msg()
            try:
                self._pub.publish(msg)
            except Exception:  # the node is being destroyed (shutdown): the status no longer matters
                pass

    def destroy(self) -> None:
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
