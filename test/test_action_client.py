"""Our ActionClient can be created while another thread spins the node (rclpy's can be seen half-built)."""
from __future__ import annotations

import pytest
import rclpy
from rclpy.action import ActionClient as RclpyActionClient
from rclpy.node import Node

from timely_llm_ros.action import ExecuteSegment
from timely_llm_ros.ros.action_client import ActionClient


@pytest.mark.parametrize("cls, usable", [(RclpyActionClient, False), (ActionClient, True)])
def test_a_client_is_usable_by_a_spinning_executor_from_the_moment_the_node_holds_it(cls, usable):
    """What an executor in another thread may do as soon as add_waitable returns: count the client's entities."""
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
        client = cls(node, ExecuteSegment, "probe/execute_segment")
        assert seen == [usable]
        client.destroy()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
