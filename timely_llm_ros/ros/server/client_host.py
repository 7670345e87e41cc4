"""Where the server's per-robot ActionClients live: by default a node of its own, spun on its own thread.

With one ActionClient per robot on the server node, rclpy's Python executor rebuilds a wait set over every one of
them (five entities each) on every wake-up, holding the GIL while it does: with 50 robots that thread held the
server's GIL 41-46% of the time during an urgent burst, time the engine's step loop waited for. Here the clients
live on a separate node spun by rclpy's EventsExecutor (C++, event callbacks instead of a rebuilt wait set; kind
"events", the default) or by a SingleThreadedExecutor of its own (kind "single"); the server's own executor then
waits only on the server's few entities. Kind "server" keeps the clients on the server node (the earlier layout).
"""
from __future__ import annotations

from typing import Callable

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from timely_llm_ros.ros.spin import Spinner

KINDS = ("events", "single", "server")


class ClientHost:
    """Where the server's per-robot clients live. Kind "server": on the server node itself, spun by the server's
    own executor (nothing to start). Kinds "events" and "single": on a plain node in the server's namespace and
    context (no global ROS arguments: a ``__node`` remap meant for the server must not rename it), spun by a thread
    of its own."""

    def __init__(self, server: Node, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"a ClientHost leaves the clients on the server node ('server') or spins a node of its "
                             f"own with 'events' or 'single', got {kind!r}")
        self._closed = False
        self._spinner: Spinner | None = None
        if kind == "server":
            self.node = server
            return
        context = server.context
        self.node = Node(f"{server.get_name()}_segment_clients", namespace=server.get_namespace(),
                         context=context, use_global_arguments=False, start_parameter_services=False)
        if kind == "events":
            from rclpy.experimental.events_executor import EventsExecutor
            self._executor = EventsExecutor(context=context)
        else:
            self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self._spinner = Spinner(self._executor, context, name="segment-clients")
        self._spinner.start()

    def close(self, destroy_clients: Callable[[], None], timeout_s: float = 5.0) -> None:
        """Stop and join the spin thread, shut the executor down, then ``destroy_clients()`` (nothing waits on
        them any more; destroy_node does not destroy waitables) and destroy the node. Kind "server": only
        ``destroy_clients()`` (the server node is the server's to destroy)."""
        if self._closed:
            return
        self._closed = True
        if self._spinner is None:
            destroy_clients()
            return
        self._spinner.stop(timeout_s)
        self._executor.shutdown(timeout_sec=timeout_s)
        destroy_clients()
        self.node.destroy_node()
