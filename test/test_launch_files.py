"""launch/timely_fleet.launch.py and launch/timely_server.launch.py run under the real launch / launch_ros.

launch_ros is not on PyPI: in the venv this module is skipped (the same fleet is covered by test_bringup.py through
timely_bringup). On a ROS 2 install after `colcon build`, `colcon test` runs it (docs/ros_build.md)."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

pytest.importorskip("launch_ros", reason="launch_ros is not installable from PyPI: run this under a ROS 2 install "
                                         "(colcon build && colcon test, docs/ros_build.md)")
from ament_index_python.packages import PackageNotFoundError, get_package_share_directory  # noqa: E402

try:
    SHARE = get_package_share_directory("timely_llm_ros")
except PackageNotFoundError:
    pytest.skip("timely_llm_ros is not installed in an ament prefix: colcon build and source install/setup.bash "
                "first (docs/ros_build.md)", allow_module_level=True)

from ros_harness import REPO, ros_env  # noqa: E402

RUN = textwrap.dedent("""
    import sys
    from launch import LaunchService
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    ls = LaunchService()
    ls.include_launch_description(IncludeLaunchDescription(
        PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=[tuple(a.split(":=", 1)) for a in sys.argv[2:]]))
    sys.exit(ls.run())
""")

# The fleet description (which processes; config/fleet/demo.yaml's format) names its nodes' params file, a plain
# ROS 2 params file (config/demo_fleet.yaml's format) that rcl reads; the launch file passes only the latter on.
SMALL_FLEET = """
bringup:
  params_file: params.yaml
  server: true
  workload: true
  executors:
    - {agent: drone_1, robot_type: drone}
"""

SMALL_PARAMS = """
/**/timely_server:
  ros__parameters: {num_threads: 1, max_batch: 2, expected_agents: [drone_1]}
/**/executor:
  ros__parameters: {time_scale: 0.05}
/**/fleet_workload:
  ros__parameters: {agents: ["drone_1:drone"], requests_per_agent: 2}
"""


def _params_files_left() -> set[str]:
    """launch_ros's files for dict parameters, which it never deletes (the launch files pass none)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "launch_params_*")))


def _launch(name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUN, f"{SHARE}/launch/{name}", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ros_env(), cwd=REPO, start_new_session=True)


def test_fleet_launch_runs_the_workload_to_the_end(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(SMALL_FLEET)
    (tmp_path / "params.yaml").write_text(SMALL_PARAMS)
    before = _params_files_left()
    proc = _launch("timely_fleet.launch.py", f"fleet_file:={fleet}", "autostart:=true")
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out[-4000:]
    assert "timely_server ready" in out and "executor ready" in out
    # the workload starts once the server is active: both goals are served (not NOT_ACTIVE), and the launch ends; the
    # default tasks carry goals, so each robot ran its plan in the scene its task describes (a plan that asks it the
    # impossible there fails on the robot) and the table says which achieved their task
    assert "/2 plans executed" in out and "NOT_ACTIVE" not in out, out[-4000:]
    assert "/2 plans achieved their task in their robot's scene" in out, out[-4000:]
    assert _params_files_left() <= before, "the launch left temporary params files"
    assert "Traceback" not in out and "process has died" not in out, out[-4000:]


def test_server_launch_comes_up_and_stops_on_sigint():
    before = _params_files_left()
    proc = _launch("timely_server.launch.py")
    lines: list[str] = []
    try:
        end = time.monotonic() + 180
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "timely_server ready" in line or time.monotonic() > end:
                break
        assert any("timely_server ready" in line for line in lines), "".join(lines[-40:])
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "".join(lines[-20:]) + out[-4000:]
    assert "Traceback" not in out and "process has died" not in out, out[-4000:]  # Ctrl-C is a clean exit
    assert _params_files_left() <= before, "the launch left temporary params files"
