"""main() for a node: init, spin on a multi-threaded executor, clean shutdown (shared by every node)."""
from __future__ import annotations

import sys
from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor


def spin_node(make_node: Callable[[], object], num_threads: Callable[[object], int] | int,
              args: list[str] | None = None) -> int:
    """Create the node, spin until Ctrl-C or shutdown, then node.shutdown() (entities rclpy does not
    destroy with the node) and destroy_node()."""
    rclpy.init(args=args if args is not None else sys.argv)
    node = None
    try:
        node = make_node()
        threads = num_threads(node) if callable(num_threads) else num_threads
        executor = MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.shutdown()
            node.destroy_node()
        if rclpy.ok():
            rclpy.try_shutdown()
    return 0
