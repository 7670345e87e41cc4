"""Launch the planner server, one executor per robot and the workload, as a fleet description says.

The fleet description (config/fleet/*.yaml, the same file timely_bringup reads) decides which nodes start;
the nodes get its ROS params file (bringup.params_file, or the params_file argument) unchanged.
The server is a lifecycle node: with autostart:=true (default) this launch configures and activates it; with
autostart:=false a lifecycle manager does. Either way the workload starts once the server is active, and sends its
first goal once the server's latched state says it has met the executors of the workload's robots.

    ros2 launch timely_llm_ros timely_fleet.launch.py fleet_file:=/path/fleet.yaml log_level:=debug model:=smollm2
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.parameter_descriptions import Parameter

from timely_llm_ros.ros.fleet.description import load_fleet
from timely_llm_ros.ros.fleet.launch_lifecycle import managed_server

PACKAGE = "timely_llm_ros"


def _join_namespace(*parts: str) -> str:
    """'/' + the non-empty parts joined with '/'."""
    return "/" + "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _is_true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _fleet_nodes(context):
    """Build the Node actions once the launch arguments are known."""
    namespace = LaunchConfiguration("namespace").perform(context)
    fleet = load_fleet(LaunchConfiguration("fleet_file").perform(context))
    params_file = LaunchConfiguration("params_file").perform(context) or (
        str(fleet.params_file) if fleet.params_file else "")
    if not params_file:
        raise RuntimeError("the fleet description must name its nodes' params file (bringup.params_file); "
                           "or pass params_file:=...")
    log_level = LaunchConfiguration("log_level").perform(context)
    autostart = _is_true(LaunchConfiguration("autostart").perform(context))
    model = LaunchConfiguration("model").perform(context).strip()
    sim_time = Parameter("use_sim_time", _is_true(LaunchConfiguration("use_sim_time").perform(context)))
    common = {"output": "screen", "ros_arguments": ["--log-level", log_level]}
    # single parameters as Parameter (a -p rule after the params file), not a dict: launch_ros writes a dict to a
    # /tmp/launch_params_* file that it never deletes
    actions = []
    server = None
    if fleet.server:
        server = LifecycleNode(
            package=PACKAGE, executable="timely_server", name="timely_server",
            namespace=_join_namespace(namespace),
            parameters=[params_file, sim_time, Parameter("autostart", False),
                        *([Parameter("model", model)] if model else [])],
            **common,
        )
        actions += managed_server(server, autostart)
    for executor in fleet.executors:
        actions.append(Node(
            package=PACKAGE, executable="robot_executor", name="executor",
            namespace=_join_namespace(namespace, executor.agent),
            parameters=[params_file, sim_time, Parameter("robot_type", executor.robot_type)], **common,
        ))
    if fleet.workload:
        workload = Node(
            package=PACKAGE, executable="fleet_workload", name="fleet_workload",
            namespace=_join_namespace(namespace), parameters=[params_file, sim_time], **common,
        )
        # The workload exits when its run is done: end the whole launch then, like timely_bringup.
        run = [workload, RegisterEventHandler(OnProcessExit(
            target_action=workload,
            on_exit=[EmitEvent(event=Shutdown(reason="fleet_workload finished"))],
        ))]
        if server is None:        # the server runs elsewhere: nothing here to wait for
            actions += run
        else:                     # like timely_bringup: goals only once the server serves (else NOT_ACTIVE)
            actions.append(RegisterEventHandler(OnStateTransition(
                target_lifecycle_node=server, goal_state="active", handle_once=True, entities=run)))
    return actions


def generate_launch_description() -> LaunchDescription:
    default_fleet = os.path.join(get_package_share_directory(PACKAGE), "config", "fleet", "demo.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace pushed in front of every node (robots get <namespace>/<agent>)"),
        DeclareLaunchArgument("fleet_file", default_value=default_fleet,
                              description="fleet description: a 'bringup:' section (which processes, params_file)"),
        DeclareLaunchArgument("params_file", default_value="",
                              description="the nodes' ROS params file; empty = the one the fleet description names"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="log level of every node (debug, info, warn, error, fatal)"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate the lifecycle server at start-up"),
        DeclareLaunchArgument("model", default_value="",
                              description="model entry of config/models.yaml the server loads (embedded, smollm2, "
                                          "...); empty = the params file's timely_server model"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="every node's ROS clock follows /clock (message stamps, logs); the "
                                          "scheduler keeps its monotonic clock"),
        OpaqueFunction(function=_fleet_nodes),
    ])
