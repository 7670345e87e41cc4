"""Launch the planner server alone (its executors and clients run elsewhere).

    ros2 launch timely_llm_ros timely_server.launch.py params_file:=/path/fleet.yaml
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from timely_llm_ros.ros.bringup import load_fleet, write_node_params

PACKAGE = "timely_llm_ros"


def _server_node(context):
    """The server Node, with the parameter sections of the fleet YAML (its bringup: section stripped)."""
    namespace = LaunchConfiguration("namespace").perform(context).strip("/")
    fleet = load_fleet(LaunchConfiguration("params_file").perform(context), require_bringup=False)
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context).lower() in ("true", "1", "yes")
    params_file = str(write_node_params(fleet, any_namespace=bool(namespace)))
    return [Node(
        package=PACKAGE, executable="timely_server", name="timely_server", namespace="/" + namespace,
        parameters=[params_file, {"use_sim_time": use_sim_time}],
        ros_arguments=["--log-level", LaunchConfiguration("log_level").perform(context)],
        output="screen",
    )]


def generate_launch_description() -> LaunchDescription:
    default_params = os.path.join(get_package_share_directory(PACKAGE), "config", "demo_fleet.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the server node"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="YAML with a timely_server: ros__parameters: section "
                                          "(a fleet YAML works too)"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="log level (debug, info, warn, error, fatal)"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="use /clock instead of the wall clock"),
        OpaqueFunction(function=_server_node),
    ])
