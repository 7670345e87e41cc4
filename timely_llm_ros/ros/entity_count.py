"""How many ROS entities a process's nodes hold: what grows when something makes entities per goal or per name and
never destroys them (the server reports it on /diagnostics; make stress's long soak checks it stays flat)."""
from __future__ import annotations

from typing import Iterable

from rclpy.node import Node


def ros_entities(nodes: Iterable[Node]) -> int:
    """Publishers, subscriptions, service servers, service clients, timers and guard conditions of these nodes, plus
    what their waitables put in a wait set (an action server's services and timer, an action client's service
    clients and subscriptions; the publishers inside them are not counted). A waitable destroyed meanwhile counts
    nothing. Safe while the nodes spin: each list is copied before it is read."""
    total = 0
    for node in nodes:
        total += sum(len(list(entities)) for entities in (node.publishers, node.subscriptions, node.services,
                                                          node.clients, node.timers, node.guards))
        for waitable in list(node.waitables):
            try:
                n = waitable.get_num_entities()
            except Exception:   # destroyed in between (its handle is gone)
                continue
            total += (n.num_subscriptions + n.num_guard_conditions + n.num_timers + n.num_clients + n.num_services
                      + n.num_events)
    return total
