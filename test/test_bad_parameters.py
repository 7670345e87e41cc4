"""A parameter of the wrong type or out of its range stops a node at start-up with exit 1 and one line that says
what to write instead, not a traceback (real node processes; spin.parameter_error_message)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ros_harness import REPO, ros_env

CASES = [
    # (module and arguments, what the one line must say)
    (["timely_llm_ros.ros.executor.host", "--agents", "d1:drone", "--ros-args", "-p", "time_scale:=1"],
     "parameter time_scale is a DOUBLE, got the INTEGER '1': write 1.0, a ROS double needs the decimal point "
     "(-p time_scale:=1.0, or time_scale: 1.0 in a params file)"),
    (["timely_llm_ros.ros.server.node", "--ros-args", "-p", "autostart:=false", "-p", "state_period_s:=2"],
     "(-p state_period_s:=2.0, or state_period_s: 2.0 in a params file)"),
    (["timely_llm_ros.ros.server.node", "--ros-args", "-p", "autostart:=false", "-p", "max_batch:=0"],
     "parameter value rejected: Parameter max_batch out of range. Min: 1, Max: 256"),
    (["timely_llm_ros.ros.server.node", "--ros-args", "-p", "autostart:=false", "-p", "policy:=3"],
     "parameter policy is a STRING, got the INTEGER '3': give policy a string value"),
    (["timely_llm_ros.ros.server.node", "--ros-args", "-p", "autostart:=false", "-p", "llamacpp_flash_attention:=off"],
     "parameter llamacpp_flash_attention is a STRING, got the BOOL 'False': quote the word: YAML and -p read on, off, "
     "yes, no, true and false as booleans"),
]


@pytest.mark.parametrize("argv,says", CASES, ids=["executor-int-for-double", "server-int-for-double",
                                                  "server-out-of-range", "server-int-for-string",
                                                  "server-yaml-bool-for-string"])
def test_a_bad_parameter_ends_the_node_with_a_line_that_says_what_to_write(argv, says):
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, env=ros_env(), capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert says in out, out[-3000:]
    assert "ros2 param describe" in out


ROS_ARGS_CASES = [
    # a command line rcl itself rejects, before any node exists: (module and arguments, what the line must say)
    (["timely_llm_ros.ros.server.node", "--ros-args", "-p", "policy=edf"],
     "'-p policy=edf'", "set a parameter as -p name:=value"),
    (["timely_llm_ros.ros.executor.host", "--agents", "d1:drone", "--ros-args", "--params-file", "/nonexistent.yaml"],
     "'--params-file /nonexistent.yaml'", "--params-file must name a readable ROS params file"),
    (["timely_llm_ros.ros.fleet.workload_node", "--ros-args", "--log-level", "loud"],
     "'--log-level loud'", "--log-level takes debug, info, warn, error or fatal"),
]


@pytest.mark.parametrize("argv,names,says", ROS_ARGS_CASES, ids=["server-p-without-colon", "executor-missing-file",
                                                                 "workload-bad-log-level"])
def test_a_command_line_rcl_rejects_ends_the_node_with_what_to_write(argv, names, says):
    """rclpy.init raises before the node exists; that was a traceback ending in rcl's C source lines."""
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, env=ros_env(), capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and ".c:" not in out, out[-3000:]
    assert "invalid ROS arguments" in out and names in out and says in out, out[-3000:]


@pytest.mark.parametrize("param,says", [
    ("agents:=[drone_1]", "parameter agents: agent entry 'drone_1' must look like 'drone_1:drone'"),
    ("tasks_file:=/nonexistent/tasks.yaml", "parameter tasks_file: [Errno 2] No such file or directory"),
    ("contention_agent:=drone_9", "parameter contention_agent: 'drone_9' is not one of the agents (drone_1)"),
], ids=["agent-without-type", "missing-tasks-file", "unknown-contention-agent"])
def test_a_workload_file_or_entry_it_cannot_use_ends_the_node_with_one_line(param, says):
    """The workload node reads files and entries in its constructor; a bad one was a ValueError traceback."""
    proc = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.fleet.workload_node", "--ros-args", "-p", param],
                          cwd=REPO, env=ros_env(), capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and f"error: cannot start: {says}" in out, out[-3000:]
