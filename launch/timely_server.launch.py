"""Launch the planner server alone (its executors and clients run elsewhere), as a managed node.

    ros2 launch timely_llm_ros timely_server.launch.py params_file:=/path/params.yaml autostart:=true model:=smollm2

With autostart:=true (default) this launch configures the server and activates it once configured, through
its lifecycle services; with autostart:=false it stays unconfigured for an outside lifecycle manager
(`ros2 lifecycle set /timely_server configure`, then `activate`). See docs/server.md.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.parameter_descriptions import Parameter

from timely_llm_ros.ros.fleet.launch_lifecycle import managed_server

PACKAGE = "timely_llm_ros"


def _is_true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _server_node(context):
    namespace = LaunchConfiguration("namespace").perform(context).strip("/")
    autostart = _is_true(LaunchConfiguration("autostart").perform(context))
    sim_time = _is_true(LaunchConfiguration("use_sim_time").perform(context))
    model = LaunchConfiguration("model").perform(context).strip()
    # Parameter (a -p rule after the params file), not a dict: launch_ros leaves a dict in a /tmp/launch_params_* file
    node = LifecycleNode(
        package=PACKAGE, executable="timely_server", name="timely_server", namespace="/" + namespace,
        parameters=[LaunchConfiguration("params_file").perform(context), Parameter("use_sim_time", sim_time),
                    Parameter("autostart", False),
                    *([Parameter("model", model)] if model else [])],
        ros_arguments=["--log-level", LaunchConfiguration("log_level").perform(context)],
        output="screen",
    )
    return managed_server(node, autostart)


def generate_launch_description() -> LaunchDescription:
    default_params = os.path.join(get_package_share_directory(PACKAGE), "config", "demo_fleet.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the server node"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="ROS params file with a /**/timely_server: ros__parameters: section"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="log level (debug, info, warn, error, fatal)"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate the lifecycle server at start-up; false: "
                                          "leave it unconfigured for a lifecycle manager"),
        DeclareLaunchArgument("model", default_value="",
                              description="model entry of config/models.yaml the server loads (embedded, smollm2, "
                                          "...); empty = the params file's timely_server model"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="the node's ROS clock follows /clock (message stamps, logs); the "
                                          "scheduler keeps its monotonic clock"),
        OpaqueFunction(function=_server_node),
    ])
