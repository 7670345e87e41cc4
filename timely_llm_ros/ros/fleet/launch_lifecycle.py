"""The lifecycle wiring both launch files share (needs launch and launch_ros: a ROS 2 install, not the PyPI venv)."""
from __future__ import annotations

from launch.actions import EmitEvent, RegisterEventHandler
from launch.events import matches_action
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition


def managed_server(node: LifecycleNode, autostart: bool) -> list:
    """The server node, plus (autostart) configure now and activate once it is inactive after its first
    configure (a later configure by a lifecycle manager is not activated behind its back)."""
    if not autostart:
        return [node]

    def change(transition_id: int) -> EmitEvent:
        return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id))

    return [
        node,
        RegisterEventHandler(OnStateTransition(target_lifecycle_node=node, start_state="configuring",
                                               goal_state="inactive", handle_once=True,
                                               entities=[change(Transition.TRANSITION_ACTIVATE)])),
        change(Transition.TRANSITION_CONFIGURE),
    ]
