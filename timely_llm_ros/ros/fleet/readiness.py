"""How the bringup knows a node is ready: its ready log line, its action server on the ROS graph (a node that logs
below info), or, for the lifecycle server, configure and activate through its lifecycle services.

Both helpers run their own rclpy context without signal handlers (the bringup handles SIGINT itself); without rclpy
they do nothing and readiness rests on the ready lines."""
from __future__ import annotations

import threading
import time

from timely_llm_ros.ros.fleet.children import RunningChild


class GraphProbe:
    """Finds action servers on the ROS graph; inert without rclpy."""

    def __init__(self) -> None:
        self._node = None
        try:
            import rclpy
            from rclpy.signals import SignalHandlerOptions

            self._rclpy = rclpy
            self._context = rclpy.Context()
            rclpy.init(args=[], context=self._context, signal_handler_options=SignalHandlerOptions.NO)
            self._node = rclpy.create_node("timely_bringup_probe", context=self._context)
        except Exception:  # no rclpy / no RMW: rely on ready lines only
            self._node = None

    def serves(self, node_name: str, namespace: str, action_type: str) -> bool:
        """True if that node is discoverable and serves an action of this type."""
        if self._node is None or not action_type or not node_name:
            return False
        from rclpy.action import get_action_server_names_and_types_by_node

        try:
            servers = get_action_server_names_and_types_by_node(self._node, node_name, namespace)
        except Exception:  # the node is not discovered yet
            return False
        return any(action_type in types for _name, types in servers)

    def instances(self, node_name: str, namespace: str) -> int:
        """How many nodes of this name and namespace the graph holds now (0 when unknown)."""
        if self._node is None or not node_name:
            return 0
        ns = "/" + namespace.strip("/")
        try:
            names = self._node.get_node_names_and_namespaces()
        except Exception:  # the graph cannot be read: no guard
            return 0
        return sum(1 for name, space in names if name == node_name and space == ns)

    def close(self) -> None:
        if self._node is not None:
            self._node.destroy_node()
            self._rclpy.shutdown(context=self._context)
            self._node = None


def drive_lifecycle(child: RunningChild, halt: threading.Event) -> None:
    """Configure and activate a managed child through its lifecycle services (own rclpy context).

    Sets child.ready once active, or child.failure with the reason; a child whose lifecycle services never appear
    stays not ready (the supervisor's ready timeout ends it)."""
    try:
        import rclpy
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
    except ImportError:
        return  # ready lines only
    spec = child.spec
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("timely_bringup_lifecycle", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    fqn = "/" + "/".join(p for p in (spec.namespace.strip("/"), spec.node_name) if p)
    client = node.create_client(ChangeState, f"{fqn}/change_state")
    deadline = time.monotonic() + spec.ready_timeout_s

    def gone() -> bool:
        return halt.is_set() or child.proc.poll() is not None or time.monotonic() > deadline

    try:
        while not client.service_is_ready():
            if gone():
                return
            time.sleep(0.1)
        for label, transition in (("configure", Transition.TRANSITION_CONFIGURE),
                                  ("activate", Transition.TRANSITION_ACTIVATE)):
            future = client.call_async(ChangeState.Request(transition=Transition(id=transition)))
            while not future.done():
                if gone():
                    return
                executor.spin_once(timeout_sec=0.1)
            if not future.result().success:
                child.failure = f"lifecycle transition '{label}' of {fqn} failed (see its log)"
                return
        child.activated = True
        child.ready.set()
    finally:
        node.destroy_client(client)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
