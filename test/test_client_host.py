"""ClientHost (ros/server/client_host.py): the server's per-robot ActionClients on a node of their own, spun on their own
thread by rclpy's EventsExecutor or a SingleThreadedExecutor. Our ActionClient's guarantees (handshake before the
first goal, every feedback before the result) must hold there too, the node must keep its own name whatever the
server's command line remaps, and close() must leave no thread behind."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
import rclpy
from rclpy.action import ActionServer
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile

from timely_llm_ros.action import ExecuteSegment
from timely_llm_ros.ros.action_client import ActionClient
from timely_llm_ros.ros.server.client_host import ClientHost
from ros_harness import feedback_then_success, start_server, wait


@contextmanager
def _robot(name: str, feedbacks: int):
    """An ExecuteSegment server in a context (DDS participant) of its own: every goal publishes ``feedbacks``
    feedback messages and succeeds at once."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node(f"robot_{name}", context=context)
    server = ActionServer(node, ExecuteSegment, f"{name}/execute_segment",
                          execute_callback=feedback_then_success(feedbacks, 0.25))
    executor = MultiThreadedExecutor(num_threads=2, context=context)
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        yield
    finally:
        executor.shutdown(timeout_sec=5.0)
        spin.join(5.0)
        server.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)


@contextmanager
def _server(args: list[str] | None = None):
    context = rclpy.Context()
    rclpy.init(context=context, args=args)
    node = Node("plan_server", namespace="/edge", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


@pytest.mark.parametrize("kind", ["events", "single"])
def test_a_hosted_client_gets_its_answers_and_every_feedback_before_the_result(kind):
    with _robot(f"r_{kind}", feedbacks=30), _server() as server:
        host = ClientHost(server, kind)
        client = ActionClient(host.node, ExecuteSegment, f"/r_{kind}/execute_segment", recovery_timer=False,
                              feedback_sub_qos_profile=QoSProfile(depth=100))
        try:
            assert client.wait_until_answering(timeout_sec=10.0)
            seen: list[int] = []

            def slow_caller(message) -> None:   # falls behind the 30 messages sent at once
                seen.append(message.feedback.skills_done)
                time.sleep(0.01)

            handle = wait(client.send_goal_async(ExecuteSegment.Goal(request_id="q", index=0),
                                                 feedback_callback=slow_caller), 5.0)
            assert handle is not None and handle.accepted
            answer = wait(client.result_async(handle), 5.0)
            assert answer is not None and answer.result.execution_time == 0.25
            assert seen == list(range(30))
        finally:
            host.close(client.destroy)
        assert not [t for t in threading.enumerate() if t.name == "segment-clients"]


def test_the_host_node_keeps_its_name_when_the_server_is_renamed_on_the_command_line():
    """A launch file renames the server with ``-r __node:=...``: that remap applies to every node in the process
    unless a node ignores the global arguments; two nodes would then share one name."""
    with _server(["--ros-args", "-r", "__node:=timely_server"]) as server:
        assert server.get_name() == "timely_server"
        host = ClientHost(server, "events")
        try:
            assert host.node.get_fully_qualified_name() == "/edge/timely_server_segment_clients"
        finally:
            host.close(lambda: None)


def test_an_unknown_kind_is_refused():
    with _server() as server:
        with pytest.raises(ValueError, match="'events' or 'single', got 'multi'"):
            ClientHost(server, "multi")


def test_a_server_given_an_unknown_layout_says_which_exist_and_exits_1():
    """Checked before the model loads: the message names the values, autostart's failed configure exits 1."""
    server = start_server("segment_clients:=multi", ready="configure failed")
    try:
        assert server.proc.wait(30) == 1
        assert "segment_clients must be one of events, single, server, got 'multi'" in server.output()
        assert "engine loaded" not in server.output() and "Traceback" not in server.output()
    finally:
        server.stop()


def test_a_server_with_the_clients_on_its_own_node_serves_a_plan_and_hosts_no_sibling_node():
    """segment_clients:=server (the earlier layout) end to end: the robot's client is on the server node."""
    from action_msgs.msg import GoalStatus
    from rclpy.action import get_action_client_names_and_types_by_node

    from ros_harness import plan_client, start_executor

    nodes = [start_server("segment_clients:=server", "expected_agents:=[drone_1]")]
    try:
        nodes.append(start_executor("drone_1", "drone", 0.05))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            status, result = client.send(agent_id="drone_1", robot_type="drone", task="look for the cat",
                                         context="cat, chair, table, lamp", urgency_class="normal").result()
            names = client.node.get_node_names()
            clients = {n for n, _ in get_action_client_names_and_types_by_node(client.node, "timely_server", "/")}
    finally:
        for n in reversed(nodes):
            n.stop()
    assert status == GoalStatus.STATUS_SUCCEEDED, (result.error_code, result.error_message)
    assert "/drone_1/execute_segment" in clients
    assert "timely_server_segment_clients" not in names
    assert nodes[0].proc.returncode == 0, nodes[0].output()[-2000:]
