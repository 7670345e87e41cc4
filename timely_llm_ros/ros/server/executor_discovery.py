"""Finding the robots' executors: the expected agents' in the background from configure on, and a goal's own agent
when it is not known yet. The blocking graph waits (SegmentDispatcher.discover, RobotDirectory.wait_status) run on
a small pool of their own, never on the executor's thread: one lookup per agent, however many goals wait for it, so
goals for a robot that is not there hold one thread, not one each, and a goal for a robot that is there does not
queue behind them."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future as PoolFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from timely_llm_ros.ros.server.robot_directory import RobotDirectory
from timely_llm_ros.ros.server.segment_dispatcher import SegmentDispatcher

TWIN_WAIT_S = 1.0        # how long a first goal waits to tell a second executor under its agent's name from a ghost
DISCOVERY_THREADS = 8    # distinct agents looked up at once (each lookup waits up to the discovery timeout)


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
        # agent -> the goals waiting for its lookup while one runs: (gave up: its goal ended; its deadline; then)
        self._waiting: dict[str, list[tuple[Callable[[], bool], float, Callable[[bool], None]]]] = {}
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
        status while it publishes one (RobotDirectory.wait_status), then ``then(found)`` on that pool thread; found
        is False once the goal has waited the discovery timeout. A goal for an agent already being looked up joins
        that lookup, which goes on while any of its goals has time left. No ActionClient is made for an agent whose
        executor never shows up in the ROS graph. False when the pool is gone (cleanup)."""
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            waiting = self._waiting.get(agent)
            if waiting is not None:
                waiting.append((ended, deadline, then))
                return True
            self._waiting[agent] = [(ended, deadline, then)]
        if self._submit(agent):
            return True
        with self._lock:    # goals that joined meanwhile are answered here, this one by the caller
            waiters = self._waiting.pop(agent, [])
        for _, _, joined in waiters[1:]:
            joined(False)
        return False

    def _look(self, agent: str) -> None:
        """Pool thread: one agent's lookup, for every goal waiting for it; each goal's ``then`` once it is found,
        or once every goal still waiting has ended or run out of time."""
        def give_up() -> bool:
            now = time.monotonic()
            with self._lock:
                return all(ended() or now >= deadline for ended, deadline, _ in self._waiting.get(agent, ()))
        found = False
        try:
            # no timeout of its own: it ends with give_up, since goals joining later extend it
            found = self._dispatcher.discover(agent, float("inf"), give_up)
            if found:
                self._directory.wait_status(agent, self.timeout_s, give_up)
                servers = self._dispatcher.servers(agent)
                if servers > 1:     # two executors under one name, or a killed one the graph still lists: the
                    # status liveliness tells them apart once each live one is seen (goal intake refuses twins)
                    self._directory.wait_live_executors(agent, servers, TWIN_WAIT_S)
        finally:
            with self._lock:
                waiters = self._waiting.pop(agent, [])
                now = time.monotonic()
                # a goal that joined as the lookup gave up still has its time: look again for it
                again = [] if found else [w for w in waiters if not w[0]() and now < w[1]]
                if again:
                    self._waiting[agent] = again
            answered = [w for w in waiters if w not in again]
            if again and not self._submit(agent):    # the pool is gone (cleanup): every goal waiting is answered
                with self._lock:
                    answered += self._waiting.pop(agent, [])
            for _, _, then in answered:
                then(found)

    def _submit(self, agent: str) -> bool:
        """Start the agent's lookup on the pool; False when the pool is gone (cleanup)."""
        pool = self._pool
        if pool is None:
            return False
        try:
            pool.submit(self._look, agent)
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
