"""Finding the robots' executors: the expected agents' in the background from configure on, and a goal's own agent
when it is not known yet. The blocking graph waits (SegmentDispatcher.discover, RobotDirectory.wait_status) run on
a small pool of their own, never on the executor's thread."""
from __future__ import annotations

import threading
from concurrent.futures import Future as PoolFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from timely_llm_ros.ros.server.robot_directory import RobotDirectory
from timely_llm_ros.ros.server.segment_dispatcher import SegmentDispatcher

DISCOVERY_THREADS = 4


class ExecutorDiscovery:
    """Discovers and shakes hands with executors for the server (made at configure, closed at cleanup)."""

    def __init__(self, node: Node, dispatcher: SegmentDispatcher, directory: RobotDirectory, expected: list[str],
                 timeout_s: float, closing: Callable[[], bool], on_found: Callable[[], None]) -> None:
        self._node, self._dispatcher, self._directory = node, dispatcher, directory
        self.timeout_s = timeout_s
        self._closing = closing
        self._on_found = on_found          # an expected executor became ready (the state topic tells clients)
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(DISCOVERY_THREADS, thread_name_prefix="discovery")
        self._lock = threading.Lock()
        self._undiscovered = list(expected)
        self._handshakes: dict[str, PoolFuture] = {}   # expected agent -> its background discovery, while it runs
        self._timer = None
        for agent in self._undiscovered:    # start discovering their executors now, not on the first goal
            dispatcher.client(agent)
        if self._undiscovered:
            self._timer = node.create_timer(0.2, self._report, callback_group=MutuallyExclusiveCallbackGroup())
            node.get_logger().info(f"discovering {len(self._undiscovered)} expected executors in the background (a "
                                   "goal to one not yet discovered waits for it)")

    def pending(self) -> list[str]:
        """Expected agents whose executor has not answered a handshake yet."""
        with self._lock:
            return list(self._undiscovered)

    def known(self, agent: str) -> bool:
        """The agent's executor answered our handshake, is alive and its status is here: its goal needs no wait."""
        directory = self._directory
        return (self._dispatcher.ready(agent) and directory.alive(agent) is not False
                and directory.status(agent) is not None)

    def find(self, agent: str, ended: Callable[[], bool], then: Callable[[bool], None]) -> bool:
        """On the pool: wait until the agent's executor is discoverable and has answered a handshake, then for its
        status while it publishes one (RobotDirectory.wait_status), then ``then(found)`` on that pool thread. No
        ActionClient is made for an agent whose executor never shows up in the ROS graph. False when the pool is
        gone (cleanup)."""
        def look() -> None:
            found = self._dispatcher.discover(agent, self.timeout_s, ended)
            if found:
                self._directory.wait_status(agent, self.timeout_s, ended)
            then(found)
        pool = self._pool
        if pool is None:
            return False
        try:
            pool.submit(look)
        except RuntimeError:    # shut down meanwhile
            return False
        return True

    def close(self) -> None:
        """Stop the background discovery and join its threads (their waits end with the server closing)."""
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
            self._timer = None
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _report(self) -> None:
        """Shake hands with each expected robot's executor once it is matched (in the background, on the pool), and
        log it once it is ready for goals: its first goal then goes straight to the scheduler."""
        dispatcher, pool = self._dispatcher, self._pool
        # A lock and a set difference, not list.remove: a second run of this callback must not remove an agent twice.
        with self._lock:
            pending = list(self._undiscovered)
            if not pending:
                return
            found = [agent for agent in pending if dispatcher.ready(agent)]
            for agent in pending:
                running = self._handshakes.get(agent)
                if agent in found or (running is not None and not running.done()) or pool is None:
                    continue
                if dispatcher.client(agent).server_is_ready():
                    try:
                        self._handshakes[agent] = pool.submit(dispatcher.discover, agent, self.timeout_s,
                                                              self._closing)
                    except RuntimeError:   # the pool was shut down meanwhile (cleanup)
                        return
            self._undiscovered = [agent for agent in pending if agent not in set(found)]
            for agent in found:
                self._handshakes.pop(agent, None)
            done = not self._undiscovered
        if found:
            self._on_found()
        for agent in found:
            self._node.get_logger().info(f"executor discovered: {agent}/execute_segment")
        if done:
            if self._timer is not None:
                self._timer.cancel()
            self._node.get_logger().info("all expected executors discovered")
