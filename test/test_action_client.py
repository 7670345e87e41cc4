"""Our ActionClient is safe while another thread spins the node: creation (rclpy's can be seen half-built) and
sending a goal (rclpy's can lose the goal's response); it shakes hands before the first goal, asks again for a
lost result and delivers feedback that a result overtook."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
import rclpy
from rclpy.action import ActionClient as RclpyActionClient
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment
from timely_llm_ros.ros.action_client import ActionClient
from ros_harness import feedback_then_success
from ros_harness import wait as wait_for_future


def test_a_client_is_usable_by_a_spinning_executor_from_the_moment_the_node_holds_it():
    """What an executor in another thread may do as soon as add_waitable returns: count the client's entities
    (rclpy's client registers itself before its entities exist)."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("action_client_probe", context=context)
    seen: list[bool] = []
    add_waitable = node.add_waitable

    def probe(waitable):
        add_waitable(waitable)
        try:
            waitable.get_num_entities()
            seen.append(True)
        except AttributeError:
            seen.append(False)

    node.add_waitable = probe
    try:
        client = ActionClient(node, ExecuteSegment, "probe/execute_segment")
        assert seen == [True]
        client.destroy()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_client_destroyed_while_an_executor_builds_its_wait_set_does_not_crash_the_executor():
    """What rclpy's executor does with a waitable it listed just before another thread destroyed it: entering
    its handle fails (InvalidHandle, ignored), yet it still adds the waitable to the wait set and asks whether
    it is ready. rclpy's client then raises (the server's shutdown crashed its spin thread so once); ours,
    destroyed, adds nothing, is never ready and has nothing to take."""
    from rclpy.exceptions import InvalidHandle
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("action_client_destroyed", context=context)
    try:
        client = ActionClient(node, ExecuteSegment, "gone/execute_segment")
        client.destroy()
        with pytest.raises(InvalidHandle):
            client.__enter__()
        wait_set = _rclpy.WaitSet(0, 0, 0, 0, 0, 0, context.handle)
        client.add_to_wait_set(wait_set)
        assert client.is_ready(wait_set) is False
        assert client.take_data() == {}
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


@contextmanager
def _server_and_client(name: str, server_cls, client_cls, execution_time: float = 0.0, feedbacks: int = 0,
                       **client_qos):
    """A node in its own context holding an ExecuteSegment server (every goal publishes ``feedbacks`` feedback
    messages, then succeeds at once) and a client of it, spun by a 2-thread executor; everything is torn down in
    order afterwards."""
    from rclpy.executors import MultiThreadedExecutor

    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node(f"action_client_{name}", context=context)
    server = server_cls(node, ExecuteSegment, f"{name}/execute_segment",
                        execute_callback=feedback_then_success(feedbacks, execution_time))
    client = client_cls(node, ExecuteSegment, f"{name}/execute_segment", **client_qos)
    executor = MultiThreadedExecutor(num_threads=2, context=context)
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        assert client.wait_for_server(timeout_sec=10.0)
        yield client
    finally:
        executor.shutdown(timeout_sec=5.0)
        spin.join(5.0)
        client.destroy()
        server.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)


class _SlowDict(dict):
    """Stands for a busy moment of the sending thread: storing a feedback callback takes 0.5 s."""

    def __setitem__(self, key, value) -> None:
        time.sleep(0.5)
        super().__setitem__(key, value)


def test_a_goal_sent_while_the_executor_spins_gets_its_response():
    """rclpy registers a sent goal's future again after its lock is released; a response the spinning executor
    takes in that window completes the first future and the caller's never completes. Ours registers once."""
    from rclpy.action import ActionServer

    with _server_and_client("send", ActionServer, ActionClient) as client:
        client._feedback_callbacks = _SlowDict()
        future = client.send_goal_async(ExecuteSegment.Goal(request_id="r", index=0), feedback_callback=lambda m: None)
        handle = wait_for_future(future, 10.0)
        assert handle is not None and handle.accepted


@pytest.mark.parametrize("wait, answered", [("wait_for_server", False), ("wait_until_answering", True)])
def test_the_first_goal_waits_until_the_server_answers_this_client(wait, answered):
    """A server that has not yet matched a new client's response readers (discovery is per participant) drops
    its answers, though the client already sees it as ready. The stand-in: a server that ignores every request
    for two seconds. After wait_for_server the first goal is lost; wait_until_answering's handshake retries
    until the server answers, and the goal sent after it gets its response."""
    from rclpy.action import ActionServer

    class DeafServer(ActionServer):
        until = float("inf")   # set when the test starts: the fixture's own start-up may take a while under load

        async def _execute_goal_request(self, request_header_and_message) -> None:
            if time.monotonic() >= DeafServer.until:
                await super()._execute_goal_request(request_header_and_message)

        async def _execute_cancel_request(self, request_header_and_message) -> None:
            if time.monotonic() >= DeafServer.until:
                await super()._execute_cancel_request(request_header_and_message)

    with _server_and_client("deaf", DeafServer, ActionClient) as client:
        DeafServer.until = time.monotonic() + 2.0
        assert getattr(client, wait)(timeout_sec=8.0)
        handle = wait_for_future(client.send_goal_async(ExecuteSegment.Goal(request_id="r", index=0)), 3.0)
        assert (handle is not None and handle.accepted) == answered


@pytest.mark.parametrize("recovering", [False, True])
def test_a_result_the_server_sent_to_nobody_is_asked_for_again(recovering):
    """A server that has not matched a new client's result reader yet drops its answer (DDS discovery is per
    participant). Here the server drops its first result answer on purpose: rclpy's get_result_async then waits
    forever; result_async asks again once the goal's (latched) status says it ended, and gets the result."""
    from rclpy.action import ActionServer

    class DroppingServer(ActionServer):
        dropped = 0

        def _send_result_response(self, request_header, future) -> None:
            if DroppingServer.dropped == 0:
                DroppingServer.dropped += 1
                return
            super()._send_result_response(request_header, future)

    with _server_and_client("lossy", DroppingServer, ActionClient, execution_time=0.5) as client:
        handle = wait_for_future(client.send_goal_async(ExecuteSegment.Goal(request_id="r", index=0)), 5.0)
        assert handle is not None and handle.accepted
        future = client.result_async(handle) if recovering else handle.get_result_async()
        answer = wait_for_future(future, 4.0)
        assert DroppingServer.dropped == 1
        if recovering:
            assert answer is not None and answer.result.execution_time == 0.5
            assert client.results_asked_again >= 1
        else:
            assert answer is None


@pytest.mark.parametrize("cls, delivered", [(RclpyActionClient, False), (ActionClient, True)])
def test_feedback_queued_behind_the_result_still_reaches_the_caller_first(cls, delivered):
    """A goal publishes 30 feedback messages and ends at once, so its result is ready while most feedback is still
    queued at the client. rclpy takes one feedback per wake-up and forgets the goal's feedback callback when the
    result arrives: the queued feedback is dropped. Ours hands every queued message to the callback, in order,
    before the result completes."""
    from rclpy.action import ActionServer
    from rclpy.qos import QoSProfile

    with _server_and_client("feedback", ActionServer, cls, feedbacks=30,   # deep enough to queue them all
                            feedback_sub_qos_profile=QoSProfile(depth=100)) as client:
        if isinstance(client, ActionClient):
            assert client.wait_until_answering(timeout_sec=8.0)
        seen: list[int] = []

        def slow_caller(message) -> None:   # a caller that takes 20 ms a message falls behind the 30 at once
            seen.append(message.feedback.skills_done)
            time.sleep(0.02)

        handle = wait_for_future(client.send_goal_async(ExecuteSegment.Goal(request_id="r", index=0),
                                              feedback_callback=slow_caller), 5.0)
        assert handle is not None and handle.accepted
        assert wait_for_future(handle.get_result_async(), 5.0) is not None
        at_result = list(seen)
        time.sleep(0.5)                   # anything still on its way
        assert seen == at_result, "feedback after the result"
        if delivered:
            assert seen == list(range(30))
        else:
            assert len(seen) < 30

