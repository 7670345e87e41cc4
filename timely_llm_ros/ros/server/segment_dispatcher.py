"""Sends segments to each robot's ExecuteSegment action server and posts what the robots answer into the
scheduler thread. Message conversion only: which segment is where, and every deadline, is the scheduler's
ExecutionTracker's (core/execution).

A segment's goal is sent by the thread that generated it, right after its feedback went to the Plan client, and
cancels (``withdraw``) from the scheduler thread as the scheduler says (our ActionClient registers a goal, and rclpy
a cancel, under the client's lock, so both are safe while the executor spins). An ActionClient is made only for an
agent whose executor is in the ROS graph (or listed in expected_agents): unknown agent ids leave nothing behind.

Posted to the scheduler: the robot's acceptance (or its refusal: EXECUTOR_UNAVAILABLE), its first feedback (the
segment's real start), and its result with the robot's own execution time, what it ran, whether the plan returned,
and why it did not run a segment (NOT_RUN, PREEMPTED). An executor that leaves the ROS graph while it holds a
segment is reported by the presence check (on_executor_lost).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.execution import SegmentStatus
from timely_llm_ros.core.request import Segment
from timely_llm_ros.ros.action_client import ActionClient, deep_queues
from timely_llm_ros.ros.conversions import execute_goal, plan_error_code, skill_from_msg
from timely_llm_ros.ros.server.robot_directory import twins_message

Post = Callable[[Callable], None]
R = ExecuteSegment.Result
# Every queue of the clients to the executors keeps 100 (rclpy's default is 10): a request the executor has not
# received yet stays in the client's history until the executor acknowledges it. With 10, a burst of goal writes
# evicted requests the executor never got; and once an executor had not answered for over a second (Fast DDS then
# stops handing it samples through shared memory and relies on resending from that history), only the last 10
# cancels reached it and the robot ran segments of ended plans to their end. ~85 KB per robot.
CLIENT_QUEUES = deep_queues(100)
# the robot's reason for ending a segment without running it (or stopping it), as the scheduler knows it
_ENDED = {R.NOT_RUN: SegmentStatus.NOT_RUN, R.PREEMPTED: SegmentStatus.PREEMPTED}


@dataclass
class _Goal:
    """A segment's goal out at a robot."""

    agent: str
    handle: object | None = None
    withdrawn: bool = False       # cancel it as soon as its goal response arrives
    started: bool = False         # its first feedback was posted


class SegmentDispatcher:
    """One ActionClient per robot namespace; segments are sent and withdrawn as the scheduler says."""

    def __init__(self, node: Node, post: Post, group: CallbackGroup, log_timing: bool = False,
                 alive: Callable[[str], bool | None] = lambda agent: None,
                 live_executors: Callable[[str], int] = lambda agent: 0) -> None:
        """group: the callback group of the per-agent ActionClients (mutually exclusive: their responses,
        feedback and results are handled one at a time); alive: whether an agent's executor is alive, and
        live_executors: how many live ones publish its status (the robot directory's, from that liveliness)."""
        self._node = node
        self.log_timing = log_timing
        self._post = post
        self._group = group
        self._clients: dict[str, ActionClient] = {}
        self._confirmed: dict[str, tuple] = {}   # agent -> identity of the executor that answered our handshake
        self._alive = alive
        self._live_executors = live_executors
        # agent -> why its executor is gone, from its loss until it is alive again: a segment for it meanwhile is
        # refused at once, not left to time out (executor_ack_timeout_s) one plan after another
        self._lost: dict[str, str] = {}
        self._goals: dict[tuple[str, int], _Goal] = {}
        self._lock = threading.Lock()

    def client(self, agent: str) -> ActionClient:
        """The ActionClient for /<agent>/execute_segment (created once)."""
        with self._lock:
            client = self._clients.get(agent)
            if client is None:
                client = ActionClient(self._node, ExecuteSegment, f"{agent}/execute_segment",
                                      recovery_timer=False, callback_group=self._group, **CLIENT_QUEUES)
                self._clients[agent] = client
            return client

    def known(self) -> list[str]:
        """Agents that have an ActionClient."""
        with self._lock:
            return list(self._clients)

    def ready(self, agent: str) -> bool:
        """True when this agent's executor is in the graph and is the one that answered our handshake (a restarted
        executor is a new participant and must answer again before it gets a goal). Asked for every goal: one graph
        lookup (the status publisher's endpoint ids, which exist only while that executor does), not the client's
        server_is_ready() (five lookups), which was 9% of the server's GIL time in the ROS burst's intake."""
        with self._lock:
            client = self._clients.get(agent)
            confirmed = self._confirmed.get(agent)
        return client is not None and bool(confirmed) and confirmed == self._identity(agent)

    def servers(self, agent: str) -> int:
        """How many action servers the ROS graph lists as /<agent>/execute_segment (a killed one for ~20 s more)."""
        return len(self._identity(agent))

    def _identity(self, agent: str) -> tuple:
        """The endpoint ids of the agent's status publisher: they change when its executor restarts."""
        topic = self._node.resolve_topic_name(f"{agent}/execute_segment/_action/status")
        return tuple(sorted(bytes(i.endpoint_gid) for i in self._node.get_publishers_info_by_topic(topic)))

    def in_graph(self, agent: str) -> bool:
        """Whether the agent's ExecuteSegment server is in the ROS graph (no entity is created to find out; one
        service is counted, not the graph's every service listed: with 50 robots that list took the GIL for ms)."""
        name = self._node.resolve_service_name(f"{agent}/execute_segment") + "/_action/send_goal"
        return self._node.count_services(name) > 0

    def discover(self, agent: str, timeout_s: float, aborted: Callable[[], bool] = lambda: False) -> bool:
        """Wait (blocking, up to timeout_s) until the agent's executor is in the graph, matched, and has answered
        a handshake; a client is created only once it is in the graph."""
        end = time.monotonic() + timeout_s
        with self._lock:
            client = self._clients.get(agent)
        if client is None or not client.server_is_ready():   # a matched client needs no graph query
            while not self.in_graph(agent):
                if aborted() or time.monotonic() >= end:
                    return False
                time.sleep(0.05)
            client = self.client(agent)
        match_end = max(end, time.monotonic() + 1.0)  # in the graph: give the client a moment to match
        while not client.server_is_ready():
            if aborted() or time.monotonic() >= match_end:
                return False
            time.sleep(0.02)
        identity = self._identity(agent)
        # matched on our side is not matched on the executor's: see ActionClient.handshake
        if not client.handshake(max(match_end - time.monotonic(), 1.0), aborted):
            return False
        with self._lock:
            self._confirmed[agent] = identity
        return True

    def forget_handshake(self, agent: str) -> None:
        """The agent's executor did not answer in time: it must answer a handshake again before its next goal."""
        with self._lock:
            self._confirmed.pop(agent, None)

    def send(self, req_id: str, agent: str, seg: Segment, preempts: bool = False) -> None:
        """Send one segment (any thread); what its robot answers is posted to the scheduler."""
        key = (req_id, seg.index)
        with self._lock:
            self._goals[key] = _Goal(agent)
            lost = self._lost.get(agent)
        if lost is not None:
            if self._alive(agent) is not True:
                self._refused(key, f"segment {seg.index} was not sent: {lost}")
                return
            with self._lock:    # back: the same process, or a restarted one whose status has come
                self._lost.pop(agent, None)
        # a second executor under the name (started mid-plan, or seen only after the goal's own check) would run
        # this segment too: refused before it is sent
        twins = self._live_executors(agent)
        if twins > 1:
            self._refused(key, f"segment {seg.index} was not sent: {twins_message(agent, twins)}")
            return
        try:
            future = self.client(agent).send_goal_async(execute_goal(req_id, seg, preempts),
                                                        feedback_callback=lambda msg: self._on_feedback_msg(key))
        except Exception as exc:  # the client's node is going down
            self._refused(key, f"sending segment {seg.index} failed: {exc}")
            return
        if self.log_timing:
            self._node.get_logger().info(f"segment timing {req_id} {seg.index} sent {time.monotonic():.6f}")
        future.add_done_callback(lambda f: self._on_goal_response(key, agent, f))

    def withdraw(self, req_id: str, indices: Iterable[int]) -> None:
        """Cancel these segments at their robot, the last one first (the robot's executor then never starts a later
        segment between the cancel of its running one and its own); one still without a goal response is cancelled
        when it comes."""
        handles = []    # taken under the lock: a goal response that comes after it cancels its goal itself
        with self._lock:
            for i in sorted(indices, reverse=True):
                goal = self._goals.pop((req_id, i), None)
                if goal is None:
                    continue
                if goal.handle is None:
                    goal.withdrawn = True
                    self._goals[(req_id, i)] = goal
                else:
                    handles.append(goal.handle)
        for handle in handles:
            handle.cancel_goal_async()

    def check_presence(self) -> None:
        """Report executors that left the ROS graph while they hold a segment, and ask again for results an executor
        sent before it had matched us. One service count per agent with a segment out (in_graph: with 116 agents
        4-6 ms on an idle 2-core box, where asking each client whether its server is ready took 21-32 ms and, under
        the x4 burst, up to 100 ms every 0.5 s). The server runs it on a ROS timer, off the scheduler thread."""
        with self._lock:
            agents = {g.agent for g in self._goals.values()}
            clients = {a: self._clients.get(a) for a in agents}
        try:
            gone = {a for a, c in clients.items() if c is None or not self.in_graph(a)}
        except InvalidHandle:   # the clients' node is being destroyed (shutdown): nothing to report any more
            return
        for client in clients.values():
            if client is not None:
                client.ask_again()
        now = time.monotonic()
        for agent in gone:
            self.forget_handshake(agent)
            msg = (f"executor /{agent}/execute_segment left the ROS graph while it held a segment; restart the "
                   "robot's executor")
            self._post(lambda s, a=agent, m=msg: s.on_executor_lost(a, now, m))

    def executor_lost(self, agent: str, why: str) -> None:
        """The agent's executor is gone (its status lost liveliness: ros/server/robot_directory.py): its segments out end
        EXECUTOR_UNAVAILABLE (the scheduler's tracker), and whoever answers next must shake hands again."""
        self.forget_handshake(agent)
        now = time.monotonic()
        msg = f"executor /{agent}/execute_segment {why}; restart the robot's executor"
        with self._lock:
            self._lost[agent] = msg
        self._post(lambda s: s.on_executor_lost(agent, now, msg))

    def destroy(self) -> None:
        """Release the per-agent clients (safe while the node spins: see ActionClient.destroy)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.destroy()

    def _on_goal_response(self, key: tuple[str, int], agent: str, future) -> None:
        now = time.monotonic()
        req_id, index = key
        try:
            handle = future.result()
        except Exception as exc:  # transport failure
            self._refused(key, f"sending segment {index} failed: {exc}")
            return
        with self._lock:
            goal = self._goals.get(key)
            if goal is not None:
                goal.handle = handle
                if goal.withdrawn:
                    del self._goals[key]
        if goal is None or goal.withdrawn:   # withdrawn meanwhile: its result is never asked for
            if handle.accepted:
                handle.cancel_goal_async()
            with self._lock:
                client = self._clients.get(agent)
            if client is not None:
                client.stop_feedback(handle.goal_id)
            return
        if not handle.accepted:
            self._refused(key, f"executor /{goal.agent}/execute_segment rejected segment {index} (busy or unable "
                               "to take it)")
            return
        self._post(lambda s: s.on_execution_accepted(req_id, index, now))
        self.client(goal.agent).result_async(handle).add_done_callback(lambda f: self._on_result(key, f))

    def _on_feedback_msg(self, key: tuple[str, int]) -> None:
        now = time.monotonic()
        with self._lock:
            goal = self._goals.get(key)
            first = goal is not None and not goal.started
            if first:
                goal.started = True
        if first:
            self._post(lambda s, r=key[0], i=key[1]: s.on_execution_started(r, i, now))

    def _on_result(self, key: tuple[str, int], future) -> None:
        now = time.monotonic()
        req_id, index = key
        with self._lock:
            goal = self._goals.pop(key, None)
        if goal is None:
            return      # withdrawn: the scheduler has moved on
        try:
            result = future.result().result
        except Exception as exc:
            lost = f"segment {index} result lost: {exc}"
            self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=False, error=lost,
                                                         code=ErrorCode.EXECUTOR_UNAVAILABLE))
            return
        ok = bool(result.success)
        err = result.error_message or f"executor error code {result.error_code}"
        if result.error_code == R.BUSY:
            err = f"executor /{goal.agent}/execute_segment is busy: {err}"
        code = plan_error_code(result.error_code)
        executed = [skill_from_msg(m) for m in result.executed_skills]
        returned, value, took = ok and bool(result.returned), str(result.return_value), float(result.execution_time)
        ended = None if ok else _ENDED.get(result.error_code)
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=ok, error=err, code=code,
                                                     executed=executed, returned=returned, return_value=value,
                                                     ended=ended, exec_time_s=took))

    def _refused(self, key: tuple[str, int], message: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._goals.pop(key, None)
        req_id, index = key
        self._post(lambda s: s.on_execution_finished(req_id, index, now, ok=False, error=message,
                                                     code=ErrorCode.EXECUTOR_UNAVAILABLE))
