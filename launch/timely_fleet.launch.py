"""Launch the planner server, one executor per robot and the workload, as described by a fleet YAML.

The YAML's ``bringup:`` section (server/workload on or off, executors with agent and robot_type) decides
which nodes start; its parameter sections configure them. Same file and same nodes as ``timely_bringup``.

    ros2 launch timely_llm_ros timely_fleet.launch.py params_file:=/path/fleet.yaml log_level:=debug
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from timely_llm_ros.ros.bringup import load_fleet, write_node_params

PACKAGE = "timely_llm_ros"


def _join_namespace(*parts: str) -> str:
    """'/' + the non-empty parts joined with '/'."""
    return "/" + "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _fleet_nodes(context):
    """Build the Node actions once the launch arguments are known."""
    namespace = LaunchConfiguration("namespace").perform(context)
    fleet = load_fleet(LaunchConfiguration("params_file").perform(context))
    log_level = LaunchConfiguration("log_level").perform(context)
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context).lower() in ("true", "1", "yes")
    params_file = str(write_node_params(fleet, any_namespace=bool(namespace.strip("/"))))
    common = {"output": "screen", "ros_arguments": ["--log-level", log_level]}
    actions = []
    if fleet.server:
        actions.append(Node(
            package=PACKAGE, executable="timely_server", name="timely_server",
            namespace=_join_namespace(namespace),
            parameters=[params_file, {"use_sim_time": use_sim_time}], **common,
        ))
    for executor in fleet.executors:
        actions.append(Node(
            package=PACKAGE, executable="robot_executor", name="executor",
            namespace=_join_namespace(namespace, executor.agent),
            parameters=[params_file, {"robot_type": executor.robot_type, "use_sim_time": use_sim_time}],
            **common,
        ))
    if fleet.workload:
        workload = Node(
            package=PACKAGE, executable="fleet_workload", name="fleet_workload",
            namespace=_join_namespace(namespace),
            parameters=[params_file, {"use_sim_time": use_sim_time}], **common,
        )
        # The workload exits when its run is done: end the whole launch then, like timely_bringup.
        actions += [workload, RegisterEventHandler(OnProcessExit(
            target_action=workload,
            on_exit=[EmitEvent(event=Shutdown(reason="fleet_workload finished"))],
        ))]
    return actions


def generate_launch_description() -> LaunchDescription:
    default_params = os.path.join(get_package_share_directory(PACKAGE), "config", "demo_fleet.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace pushed in front of every node (robots get <namespace>/<agent>)"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="fleet YAML: a 'bringup:' section plus the nodes' ros__parameters"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="log level of every node (debug, info, warn, error, fatal)"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="use /clock instead of the wall clock"),
        OpaqueFunction(function=_fleet_nodes),
    ])
