"""A server node made in a process that embeds it (a team's own Python process, or composition) leaves the ROS
graph when it is destroyed, not when the cycle collector gets to it: otherwise a server made again there, or a
fleet started on the same domain, sees two nodes named /timely_server."""
from __future__ import annotations

import gc

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from ros_harness import Spun, poll_until  # noqa: E402


@pytest.mark.parametrize("configured", [False, True])
def test_a_destroyed_server_node_leaves_the_ros_graph_at_once(configured: bool) -> None:
    from timely_llm_ros.ros.server.node import PlanServerNode

    probe = Spun(lambda ctx: rclpy.create_node("graph_probe", context=ctx), SingleThreadedExecutor).start()
    gc.disable()        # what frees it must be the destroy, not a collection that happens to run meanwhile
    try:
        server = Spun(lambda ctx: PlanServerNode(context=ctx, parameter_overrides=[
            Parameter("autostart", value=False), Parameter("hardware_fit", value=False),
            Parameter("num_threads", value=1)]), SingleThreadedExecutor)
        if configured:
            server.node.trigger_configure()
            server.node.trigger_activate()
        server.start()
        assert poll_until(lambda: "timely_server" in probe.node.get_node_names(), 20, 0.1), \
            "the probe never saw the server (discovery)"
        if configured:      # the way spin_node ends it
            server.node.trigger_shutdown()
            server.node.shutdown()
        server.close()      # unconfigured: only rclpy's destroy_node, the way an embedding process would
        gone = poll_until(lambda: "timely_server" not in probe.node.get_node_names(), 10, 0.1)
        assert gone, f"the destroyed server is still in the ROS graph: {probe.node.get_node_names()}"
    finally:
        gc.enable()
        probe.close()
