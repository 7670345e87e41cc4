"""timely_bringup: the fleet YAML becomes the right processes, and their supervision behaves.

The supervision tests run the real server, executor and workload nodes and provoke real faults in them: a workload
whose goals cannot be executed (its exit code 1), an executor killed with SIGKILL, a server that exits or fails
to configure before it is ready, an executor stopped with SIGSTOP so that SIGINT cannot end it (the nodes a test
kills or stops talk over UDP only, see UDP_ON_LOOPBACK_PROFILE); the readiness tests run the real nodes
with their ready lines below the log level, against a ready timeout the server cannot meet and beside another
node of its name. No test double: every node is the real one. The YAML tests use the real config/demo_fleet.yaml
and real rcl.
"""
from __future__ import annotations

import ast
import contextlib
import os
import py_compile
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import rclpy
import yaml
from rclpy.node import Node

from timely_llm_ros.ros import process_signals

from timely_llm_ros.ros.fleet import bringup
from timely_llm_ros.ros.fleet.children import READY_PATTERN, build_children
from timely_llm_ros.ros.fleet.description import apply_overrides, load_fleet, parse_fleet, write_node_params
from waiting import wait_until

DEMO = Path(__file__).resolve().parent.parent / "config" / "fleet" / "demo.yaml"
DEMO_PARAMS = DEMO.parent.parent / "demo_fleet.yaml"

def _value_after(argv: list[str], flag: str, prefix: str = "") -> list[str]:
    return [b for a, b in zip(argv, argv[1:]) if a == flag and b.startswith(prefix)]


def test_demo_fleet_gives_server_and_one_executor_per_robot(tmp_path):
    fleet = load_fleet(DEMO)
    children = build_children(fleet, tmp_path / "p.yaml", "debug", with_workload=False)
    assert len(children) == 6
    assert children[0].name == "timely_server" and "__node:=timely_server" in children[0].argv
    executors = children[1:]
    assert [_value_after(c.argv, "-r", "__ns:=") for c in executors] == [
        ["__ns:=/arm_1"], ["__ns:=/arm_2"], ["__ns:=/drone_1"], ["__ns:=/drone_2"], ["__ns:=/drone_3"]]
    assert [_value_after(c.argv, "-p") for c in executors] == [["robot_type:=arm"]] * 2 + [["robot_type:=drone"]] * 3
    for child in children:
        assert child.argv.count("--ros-args") == 1
        assert _value_after(child.argv, "--params-file") == [str(tmp_path / "p.yaml")]
        assert _value_after(child.argv, "--log-level") == ["debug"]
    with_workload = build_children(fleet, tmp_path / "p.yaml")
    assert len(with_workload) == 7 and "__node:=fleet_workload" in with_workload[-1].argv


def test_default_entry_points_run_the_node_modules(tmp_path):
    children = build_children(load_fleet(DEMO), tmp_path / "p.yaml")
    modules = [c.argv[c.argv.index("-m") + 1] for c in children]
    assert modules == ["timely_llm_ros.ros.server.node"] + ["timely_llm_ros.ros.executor.node"] * 5 + [
        "timely_llm_ros.ros.fleet.workload_node"]
    assert all(c.argv[0] == sys.executable for c in children)


def test_node_params_file_is_accepted_by_rcl_and_reaches_namespaced_executor(tmp_path):
    fleet = load_fleet(DEMO)
    apply_overrides(fleet, ["executor.time_scale=0.25", "timely_server.max_batch=8"])
    params = write_node_params(fleet, tmp_path)
    assert "bringup" not in yaml.safe_load(params.read_text())
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(params), "-r", "__ns:=/drone_3", "-r", "__node:=executor"],
               context=context)
    try:
        node = Node("anything", context=context, automatically_declare_parameters_from_overrides=True)
        assert node.get_fully_qualified_name() == "/drone_3/executor"
        assert node.get_parameter("time_scale").value == 0.25
        assert not node.has_parameter("max_batch")
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_overrides_target_existing_sections_and_reject_bad_input():
    fleet = load_fleet(DEMO)
    apply_overrides(fleet, ["timely_server.policy=timely", "executor.time_scale=2", "bringup.workload=false",
                            "/drone_1/executor.time_scale=3"])
    assert fleet.node_params["/**/timely_server"]["ros__parameters"]["policy"] == "timely"
    assert fleet.node_params["/**/executor"]["ros__parameters"]["time_scale"] == 2
    assert fleet.node_params["/drone_1/executor"]["ros__parameters"]["time_scale"] == 3
    assert fleet.workload is False and len(build_children(fleet, "p.yaml")) == 6
    for bad in ["policy=timely", "timely_server.policy", "bringup.executors=[]", "bringup.stop_grace_s=-1"]:
        with pytest.raises(ValueError):
            apply_overrides(fleet, [bad])
    # a node the bringup does not start (a typo) would silently set nothing: refused, naming the real ones
    for typo in ["timely_sever.policy=edf", "/drone_1/executr.time_scale=2"]:
        with pytest.raises(ValueError, match="starts no node named .*timely_server, executor, fleet_workload"):
            apply_overrides(fleet, [typo])


def test_an_override_without_a_section_in_the_fleet_reaches_namespaced_executors(tmp_path):
    """A fleet whose params file has no executor section: --set executor.x must still reach /drone_3/executor
    (a bare section "executor" would only match a node outside any namespace)."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"/**/timely_server": {"ros__parameters": {"max_batch": 2}}}))
    fleet = parse_fleet({"bringup": {"params_file": "params.yaml", "executors": [
        {"agent": "drone_3", "robot_type": "drone"}]}}, base_dir=tmp_path)
    apply_overrides(fleet, ["executor.time_scale=0.25"])
    params = write_node_params(fleet, tmp_path)
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(params), "-r", "__ns:=/drone_3", "-r", "__node:=executor"],
               context=context)
    try:
        node = Node("anything", context=context, automatically_declare_parameters_from_overrides=True)
        assert node.get_parameter("time_scale").value == 0.25
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.parametrize("executors, complaint", [
    ([{"agent": "drone_1"}], "robot_type"),
    ([{"agent": "drone 1", "robot_type": "drone"}], "namespace"),
    ([{"agent": "d", "robot_type": "drone"}, {"agent": "d", "robot_type": "arm"}], "twice"),
])
def test_invalid_fleets_are_rejected_with_a_reason(executors, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_fleet({"bringup": {"executors": executors}})
    with pytest.raises(ValueError, match="bringup"):
        parse_fleet({"timely_server": {"ros__parameters": {}}})
    # node parameters belong in the params file the description names, which rcl reads as it is
    with pytest.raises(ValueError, match=r"holds only 'bringup:'.*\(timely_server\).*params_file"):
        parse_fleet({"bringup": {}, "timely_server": {"ros__parameters": {}}})


class _Lines:
    """An output stream for the supervisor (or sys.stdout for bringup.main): keeps what was written and when;
    `seen` is set once a chunk containing `mark` was written, and wait_for() waits for a pattern."""

    encoding = "utf-8"

    def __init__(self, mark: str = "") -> None:
        self.text, self.mark, self.seen = "", mark, threading.Event()
        self.chunks: list[tuple[float, str]] = []     # (time.monotonic(), chunk) of every write
        self._changed = threading.Condition()

    def write(self, chunk: str) -> int:
        with self._changed:
            self.text += chunk
            self.chunks.append((time.monotonic(), chunk))
            self._changed.notify_all()
        if self.mark and self.mark in chunk:
            self.seen.set()
        return len(chunk)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def wait_for(self, pattern: str, timeout: float) -> re.Match | None:
        """The first match of `pattern` in what was written, waiting up to `timeout` seconds; None if none came."""
        with self._changed:
            self._changed.wait_for(lambda: re.search(pattern, self.text), timeout)
            return re.search(pattern, self.text)

    def written_at(self, fragment: str) -> float:
        """When the first chunk containing `fragment` was written (time.monotonic())."""
        return next(t for t, chunk in self.chunks if fragment in chunk)


def _started(text: str) -> dict[str, int]:
    """The processes the bringup says it started, by name, with their pids, in start order."""
    return {name: int(pid) for name, pid in re.findall(r"\[bringup\] started (\S+) \(pid (\d+)\)", text)}


def _real_fleet(tmp_path: Path, node_params: dict, executors: list[str], workload: bool,
                stop_grace_s: float = 15.0, ready_timeout_s: float = 120.0) -> Path:
    """A fleet description for the real nodes: a server on one torch thread (plus `node_params`), one executor
    per name in `executors` (robot type: the name without its number)."""
    params = {"/**/timely_server": {"ros__parameters": {"num_threads": 1, "max_batch": 2}}}
    for section, values in node_params.items():
        params.setdefault(section, {"ros__parameters": {}})["ros__parameters"].update(values)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"bringup": {
        "params_file": "params.yaml", "server": True, "workload": workload, "stop_grace_s": stop_grace_s,
        "server_ready_timeout_s": ready_timeout_s,
        "executors": [{"agent": name, "robot_type": name.rsplit("_", 1)[0]} for name in executors]}}))
    return path


# Nodes that a test kills (SIGKILL) or stops (SIGSTOP) talk over UDP only. Fast DDS's shared-memory transport
# guards each participant's port with a named semaphore in /dev/shm: a process killed, or stopped for good, while it
# holds one leaves it locked, and every later node on that ROS domain that takes the port hangs in rcl_node_init
# (seen here: an executor stopped with SIGSTOP and then killed left /dev/shm/sem.fastdds_port26665_mutex locked,
# and every later server on domain 77 hung before its first log line). A test must not break later runs.
# ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST makes rmw_fastrtps add the shared-memory transport whatever Fast DDS is
# told, so these nodes get what LOCALHOST sets up, minus shared memory, from a Fast DDS profile instead: UDP only,
# no multicast, discovery through the initial peer 127.0.0.1 (SYSTEM_DEFAULT: rmw_fastrtps leaves it as it is).
UDP_ON_LOOPBACK_PROFILE = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
      <transport_descriptor>
        <transport_id>udp_only</transport_id>
        <type>UDPv4</type>
        <maxInitialPeersRange>32</maxInitialPeersRange>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="udp_on_loopback" is_default_profile="true">
      <rtps>
        <userTransports><transport_id>udp_only</transport_id></userTransports>
        <useBuiltinTransports>false</useBuiltinTransports>
        <builtin>
          <metatrafficUnicastLocatorList><locator/></metatrafficUnicastLocatorList>
          <initialPeersList><locator><udpv4><address>127.0.0.1</address></udpv4></locator></initialPeersList>
        </builtin>
      </rtps>
    </participant>
  </profiles>
</dds>
"""


def _udp_only(tmp_path: Path) -> dict[str, str]:
    """The environment for nodes that a test kills or stops (see UDP_ON_LOOPBACK_PROFILE)."""
    profile = tmp_path / "udp_on_loopback.xml"
    profile.write_text(UDP_ON_LOOPBACK_PROFILE)
    return {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT", "FASTDDS_DEFAULT_PROFILES_FILE": str(profile)}


def _environment(pid: int) -> dict[str, str]:
    """A running process's environment ({} once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _maps_shared_memory(pid: int) -> bool:
    """The process has Fast DDS shared-memory segments mapped (the UDP-only profile did not take)."""
    return "/dev/shm/fastdds" in Path(f"/proc/{pid}/maps").read_text()


def _kill_leftovers(pids) -> None:
    """After a failed test: nothing the bringup started stays behind (a stopped one is ended too)."""
    for pid in pids:
        if not _gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _environment_for_this_test(request, **values: str | None) -> None:
    """Set (None: unset) these variables of os.environ until the test ends: the real nodes the bringup starts, and
    this process's graph probes, inherit them."""
    saved = {name: os.environ.get(name) for name in values}

    def put(items) -> None:
        for name, value in items:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    request.addfinalizer(lambda: put(saved.items()))
    put(values.items())


def test_workload_exit_code_propagates_and_others_are_stopped_with_sigint(tmp_path, request):
    """The real fleet_workload drives a robot the fleet has no executor for: the server ends its goal
    EXECUTOR_UNAVAILABLE (after executor_discovery_timeout_s), no plan was executed, and the workload exits 1. The
    bringup ends with that code, and SIGINT alone ends the server and the executor (no SIGTERM needed). Every node
    was started with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST although the caller's environment had none."""
    fleet = _real_fleet(tmp_path, {
        "/**/timely_server": {"executor_discovery_timeout_s": 0.5},
        "/**/fleet_workload": {"agents": ["arm_1:arm"], "requests_per_agent": 1, "stagger_s": 0.0,
                               "judge_goals": False, "executors_wait_s": 0.0},
    }, executors=["drone_1"], workload=True)
    _environment_for_this_test(request, ROS_AUTOMATIC_DISCOVERY_RANGE=None)
    out = _Lines()
    discovery: dict[str, str | None] = {}

    def read_each_nodes_environment() -> None:
        for name in ("timely_server", "drone_1/executor", "fleet_workload"):
            started = out.wait_for(rf"\[bringup\] started {re.escape(name)} \(pid (\d+)\)", 180)
            if started is None:
                return
            discovery[name] = _environment(int(started.group(1))).get("ROS_AUTOMATIC_DISCOVERY_RANGE")

    threading.Thread(target=read_each_nodes_environment, daemon=True).start()
    try:
        with contextlib.redirect_stdout(out):     # bringup.main writes its lines and the nodes' output there
            code = bringup.main(["--fleet", str(fleet)])
        text = out.text
        started = _started(text)
        assert code == 1, text[-3000:]
        assert list(started) == ["timely_server", "drone_1/executor", "fleet_workload"], text[-3000:]
        # the code is the workload's own: its goal ended EXECUTOR_UNAVAILABLE and it says no plan was executed
        assert "[bringup] fleet_workload finished with exit code 1" in text, text[-3000:]
        assert re.search(r"\[fleet_workload\] .*no plan was executed: 1 goal: 1 EXECUTOR_UNAVAILABLE", text), \
            text[-3000:]
        assert "exited early" not in text, text[-3000:]
        # the others were stopped: SIGINT was enough, and every process is gone once main() returned
        assert "still running: sending" not in text and "Traceback" not in text, text[-3000:]
        assert [name for name, pid in started.items() if not _gone(pid)] == []
        assert discovery == dict.fromkeys(started, "LOCALHOST")
    finally:
        _kill_leftovers(_started(out.text).values())


def test_early_executor_death_is_reported_and_stops_the_fleet(tmp_path):
    """A real executor killed outright (SIGKILL, as the OOM killer does) while the fleet runs: the bringup reports
    it with its code (-9), returns that code, and stops the server and the other executor, which exit 0 on SIGINT."""
    fleet = load_fleet(_real_fleet(tmp_path, {}, ["drone_1", "arm_1"], workload=False))
    out = _Lines("fleet up")
    env = {**os.environ, **_udp_only(tmp_path)}     # the nodes; this process's probes keep shared memory
    supervisor = bringup.Supervisor(build_children(fleet, write_node_params(fleet, tmp_path), with_workload=False),
                                    stop_grace_s=15.0, out=out, env=env)
    children: dict[str, subprocess.Popen] = {}
    killed = threading.Event()

    def kill_an_executor_once_up() -> None:
        if not out.seen.wait(180):
            supervisor.request_stop()
            return
        children.update({c.spec.name: c.proc for c in supervisor.running})
        if _maps_shared_memory(children["arm_1/executor"].pid):     # see UDP_ON_LOOPBACK_PROFILE: do not kill it
            supervisor.request_stop()
            return
        os.kill(children["arm_1/executor"].pid, signal.SIGKILL)
        killed.set()

    killer = threading.Thread(target=kill_an_executor_once_up, daemon=True)
    killer.start()
    try:
        code = supervisor.run()
        killer.join(5)
        assert out.seen.is_set(), out.text[-3000:]
        assert killed.is_set(), "not killed: the executor uses Fast DDS shared memory (see UDP_ON_LOOPBACK_PROFILE)"
        assert code == -9, out.text[-3000:]
        assert "[bringup] arm_1/executor exited early with code -9: stopping the fleet" in out.text, out.text[-3000:]
        assert {name: proc.returncode for name, proc in children.items()} == {
            "timely_server": 0, "drone_1/executor": 0, "arm_1/executor": -9}, out.text[-3000:]
        assert "still running: sending" not in out.text and "Traceback" not in out.text, out.text[-3000:]
    finally:
        _kill_leftovers(_started(out.text).values())


@pytest.mark.parametrize("fault", ["bad_parameter", "stopped_from_outside"])
def test_server_that_dies_before_ready_stops_bringup_before_executors(tmp_path, fault):
    """The real server ends before it is ready: a params file mistake it refuses at start-up (an integer where a
    double is expected: exit 1), or a SIGTERM from outside while it waits to be configured (a clean exit 0, still a
    failure of the bringup; when the bringup's configure call reaches the server first, the server exits 0 only
    once that configure is done, some seconds later, and is never activated). The bringup reports the exit,
    returns 1 and starts no executor and no workload."""
    node_params = {"/**/timely_server": {"executor_discovery_timeout_s": 5}} if fault == "bad_parameter" else {}
    fleet = _real_fleet(tmp_path, node_params, ["drone_1"], workload=True)
    out = _Lines()
    sent: list[int] = []

    def stop_the_server_while_it_waits() -> None:
        waiting = out.wait_for(r"\[timely_server\] .*autostart is false: waiting", 60)
        if waiting is not None and not _gone(_started(out.text)["timely_server"]):
            os.kill(_started(out.text)["timely_server"], signal.SIGTERM)
            sent.append(signal.SIGTERM)

    if fault == "stopped_from_outside":
        threading.Thread(target=stop_the_server_while_it_waits, daemon=True).start()
    try:
        with contextlib.redirect_stdout(out):     # bringup.main writes its lines and the nodes' output there
            code = bringup.main(["--fleet", str(fleet)])
        text = out.text
        expected_exit = 1 if fault == "bad_parameter" else 0
        assert fault == "bad_parameter" or sent, text[-3000:]
        assert code == 1, text[-3000:]
        # stopped from outside, the server either exits before the bringup's configure call reaches it, or refuses
        # that configure once it sees the stop ("configure stopped"), and the bringup stops on the failed transition
        assert (f"[bringup] timely_server exited early with code {expected_exit}: stopping the fleet" in text or (
            fault == "stopped_from_outside" and "configure stopped: the process is shutting down" in text
            and "[bringup] lifecycle transition 'configure' of /timely_server failed" in text)), text
        if fault == "bad_parameter":
            assert "[timely_server] error: parameter executor_discovery_timeout_s is a DOUBLE" in text, text
        assert list(_started(text)) == ["timely_server"], text     # nothing was started after it
        assert "[bringup] timely_server is ready" not in text and "fleet up" not in text, text
    finally:
        _kill_leftovers(_started(out.text).values())


def test_server_whose_configure_fails_stops_bringup_before_executors(tmp_path, capsys):
    """The real server cannot configure (its step_trace_csv lies under a regular file): it stays up, unconfigured,
    and the bringup's configure call fails. The bringup says so, returns 1, starts nothing else, and SIGINT ends
    the server."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    fleet = _real_fleet(tmp_path, {"/**/timely_server": {"step_trace_csv": str(blocker / "steps.csv")}},
                        ["drone_1"], workload=True)
    code = bringup.main(["--fleet", str(fleet)])
    out = capsys.readouterr().out
    started = _started(out)
    try:
        assert code == 1, out[-3000:]
        assert "[bringup] lifecycle transition 'configure' of /timely_server failed (see its log): stopping" in out, out
        assert f"configure failed: step_trace_csv '{blocker / 'steps.csv'}'" in out, out   # the server's reason
        assert list(started) == ["timely_server"], out
        # the server was still up (it did not exit early): the bringup stopped it, and SIGINT was enough
        assert "exited early" not in out and "still running: sending" not in out, out
        assert _gone(started["timely_server"])
    finally:
        _kill_leftovers(started.values())


def test_child_ignoring_sigint_is_terminated_after_the_grace_period(tmp_path, request):
    """A real executor that cannot act on SIGINT: stopped with SIGSTOP once ready (as a process that hangs or was
    suspended), it is still there when the real workload's end (exit 0, nothing to send) stops the fleet. The
    bringup sends it SIGTERM once stop_grace_s has passed, which cannot end it either, then SIGKILL 2 s later,
    which does; main() returns the workload's 0 and gives the process its signal handlers back."""
    grace = 2.0
    fleet = _real_fleet(tmp_path, {"/**/fleet_workload": {"agents": ["drone_1:drone"], "requests_per_agent": 0,
                                                          "executors_wait_s": 0.0}},
                        ["drone_1"], workload=True, stop_grace_s=grace)
    _environment_for_this_test(request, **_udp_only(tmp_path))     # the nodes and this process's probes
    out = _Lines()
    stopped: list[int] = []

    def stop_the_executor_once_ready() -> None:
        if out.wait_for(r"\[drone_1/executor\] .*executor ready", 120) is not None:
            pid = _started(out.text)["drone_1/executor"]
            if not _maps_shared_memory(pid):    # see UDP_ON_LOOPBACK_PROFILE: stopped, then killed, it could
                # leave a lock behind that hangs later runs
                os.killpg(pid, signal.SIGSTOP)
                stopped.append(pid)

    threading.Thread(target=stop_the_executor_once_ready, daemon=True).start()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stdout(out):     # bringup.main writes its lines and the nodes' output there
            code = bringup.main(["--fleet", str(fleet)])
        text = out.text
        assert stopped, ("executor not stopped (not ready, or it uses Fast DDS shared memory: see "
                         "UDP_ON_LOOPBACK_PROFILE)\n" + text[-3000:])
        assert code == 0, text[-3000:]
        assert "[bringup] fleet_workload finished with exit code 0" in text, text[-3000:]
        # (the server may be sent SIGTERM too if SIGINT has not ended it within the short grace: not checked here)
        escalation = re.findall(r"\[bringup\] drone_1/executor still running: sending (\w+)", text)
        assert escalation == ["SIGTERM", "SIGKILL"], text[-3000:]
        stop_at = out.written_at("[bringup] fleet_workload finished")      # SIGINT went out right after this line
        term_at = out.written_at("drone_1/executor still running: sending SIGTERM")
        kill_at = out.written_at("drone_1/executor still running: sending SIGKILL")
        assert grace - 0.1 <= term_at - stop_at < grace + 2.0, (term_at - stop_at, text[-3000:])
        assert 2.0 - 0.1 <= kill_at - term_at < 4.0, (kill_at - term_at, text[-3000:])
        assert _gone(stopped[0]), text[-3000:]
        # main() called in a process that goes on (this one) gives it its signal handlers back
        assert {s: signal.getsignal(s) for s in handlers} == handlers
    finally:
        for pid in stopped:
            if not _gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGCONT)
        _kill_leftovers(_started(out.text).values())


def test_no_workload_runs_until_stopped(tmp_path):
    """The real nodes (no stand-in: nothing here needs a scripted fault): without a workload the fleet runs until
    a stop is requested; then SIGINT alone ends every node within the grace period (no SIGTERM, no traceback)."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"/**/timely_server": {"ros__parameters": {"num_threads": 1, "max_batch": 2}}}))
    fleet = parse_fleet({
        "bringup": {"params_file": "params.yaml", "server": True, "workload": False, "stop_grace_s": 15.0,
                    "server_ready_timeout_s": 120.0,
                    "executors": [{"agent": "drone_1", "robot_type": "drone"},
                                  {"agent": "arm_1", "robot_type": "arm"}]},
    }, base_dir=tmp_path)
    out = _Lines("fleet up")
    supervisor = bringup.Supervisor(build_children(fleet, write_node_params(fleet, tmp_path), with_workload=False),
                                    stop_grace_s=15.0, out=out)

    def stop_when_all_started() -> None:
        out.seen.wait(180)
        supervisor.request_stop()

    threading.Thread(target=stop_when_all_started, daemon=True).start()
    assert supervisor.run() == bringup.EXIT_INTERRUPTED, out.text[-3000:]
    assert out.seen.is_set() and "timely_server is ready" in out.text, out.text[-3000:]
    assert "still running: sending" not in out.text and "Traceback" not in out.text, out.text[-3000:]


LAUNCH_DIR = DEMO.parent.parent.parent / "launch"
EXECUTABLES = {"timely_server", "robot_executor", "fleet_workload"}


@pytest.mark.parametrize("name", ["timely_fleet.launch.py", "timely_server.launch.py"])
def test_launch_files_compile_and_declare_the_standard_arguments(name):
    """launch/launch_ros are not installable here: check the files statically."""
    path = LAUNCH_DIR / name
    py_compile.compile(str(path), doraise=True)
    tree = ast.parse(path.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    declared = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "DeclareLaunchArgument":
            keywords = {k.arg for k in call.keywords}
            declared[call.args[0].value] = keywords
    assert {"namespace", "params_file", "log_level", "autostart", "model", "use_sim_time"} <= set(declared)
    assert all({"default_value", "description"} <= kw for kw in declared.values()), declared
    used = {k.value.value for c in ast.walk(tree)
            if isinstance(c, ast.Call) and getattr(c.func, "id", "") in ("Node", "LifecycleNode")
            for k in c.keywords if k.arg == "executable"}
    assert "timely_server" in used and "LifecycleNode" in path.read_text()  # the server is managed
    assert used <= EXECUTABLES and used
    scripts = {p.name for p in (DEMO.parent.parent.parent / "scripts").iterdir()}
    assert used <= scripts


def test_nodes_logging_below_info_are_ready_by_lifecycle_and_by_their_action(tmp_path, capsys):
    """`--log-level warn`: neither the server nor the executor prints its ready line (both log it at INFO). The
    bringup finds the server ready once it has configured and activated it, and the executor once its
    ExecuteSegment server is on the graph; the real workload (nothing to send) then ends the fleet with 0."""
    path = _real_fleet(tmp_path, {"/**/fleet_workload": {"agents": ["drone_1:drone"], "requests_per_agent": 0,
                                                         "executors_wait_s": 0.0}},
                       ["drone_1"], workload=True)
    code = bringup.main(["--fleet", str(path), "--log-level", "warn"])
    out = capsys.readouterr().out
    started = _started(out)
    try:
        assert code == 0, out[-3000:]
        assert "[bringup] timely_server is ready (configured and activated)" in out, out[-3000:]
        assert "[bringup] drone_1/executor is ready" in out, out[-3000:]
        node_lines = [line for line in out.splitlines() if line.startswith(("[timely_server]", "[drone_1/executor]"))]
        assert not [line for line in node_lines if READY_PATTERN.search(line)], node_lines
    finally:
        _kill_leftovers(started.values())


def test_server_never_ready_times_out(tmp_path, capsys):
    """The real server, which needs seconds to load its model, against a ready timeout of 1 s."""
    path = _real_fleet(tmp_path, {}, ["drone_1"], workload=True, ready_timeout_s=1.0)
    code = bringup.main(["--fleet", str(path)])
    out = capsys.readouterr().out
    started = _started(out)
    try:
        assert code == 1, out[-3000:]
        assert "timely_server not ready after 1 s" in out, out[-3000:]
        assert list(started) == ["timely_server"], out[-3000:]     # nothing else was started
        assert _gone(started["timely_server"])
    finally:
        _kill_leftovers(started.values())


def test_a_fleet_whose_server_name_is_taken_on_the_domain_stops_and_says_so(tmp_path, capsys):
    """Another fleet's timely_server on the same ROS domain (here a node of this process) would take this fleet's
    lifecycle calls and goals too: the bringup sees two nodes of the name, stops, and names the way out."""
    context = rclpy.Context()
    rclpy.init(context=context)
    other = rclpy.create_node("timely_server", context=context)
    try:
        path = _real_fleet(tmp_path, {}, ["drone_1"], workload=True, ready_timeout_s=30.0)
        t0 = time.monotonic()
        code = bringup.main(["--fleet", str(path)])
        assert time.monotonic() - t0 < 30.0
    finally:
        other.destroy_node()
        rclpy.shutdown(context=context)
    out = capsys.readouterr().out
    started = _started(out)
    try:
        assert code == 1, out[-3000:]
        assert "two nodes named /timely_server are on ROS domain" in out and "ROS_DOMAIN_ID=" in out, out[-3000:]
        assert list(started) == ["timely_server"], out[-3000:]     # nothing else was started
    finally:
        _kill_leftovers(started.values())


@pytest.mark.parametrize("node_name, namespace, expected", [
    ("timely_server", "/", {"max_batch": 4, "policy": "timely"}),
    ("executor", "/drone_3", {"time_scale": 0.25}),
    ("fleet_workload", "/fleet_a", {"requests_per_agent": 2}),
])
def test_demo_params_file_is_a_plain_ros_params_file(node_name, namespace, expected):
    """What `<node> --ros-args --params-file config/demo_fleet.yaml` does: rcl parses it as it is."""
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(DEMO_PARAMS), "-r", f"__ns:={namespace}",
                     "-r", f"__node:={node_name}"], context=context)
    try:
        node = Node("anything", context=context, automatically_declare_parameters_from_overrides=True)
        assert {k: node.get_parameter(k).value for k in expected} == expected
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert load_fleet(DEMO).params_file == DEMO_PARAMS.resolve()


def test_real_fleet_comes_up_through_the_lifecycle_and_leaves_no_temp_folder(tmp_path):
    """The real nodes: the bringup configures and activates the server through its lifecycle services,
    the workload's plan is served, everything exits 0, and the temporary params folder is gone."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "/**/timely_server": {"ros__parameters": {"num_threads": 1, "max_batch": 2}},
        "/**/executor": {"ros__parameters": {"time_scale": 0.05}},
        "/**/fleet_workload": {"ros__parameters": {"agents": ["drone_1:drone"], "requests_per_agent": 1,
                                                   "tasks_file": str(tmp_path / "tasks.yaml")}},
    }))
    # a task whose plan any robot scene lets run (what the plan achieves is test_fleet_workload's business)
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"drone": [
        {"task": "take a picture", "context": "room: living room; objects: sofa, lamp", "urgency": "normal"}]}))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"bringup": {
        "params_file": "params.yaml", "server": True, "workload": True, "stop_grace_s": 10.0,
        "executors": [{"agent": "drone_1", "robot_type": "drone"}]}}))
    temp = tmp_path / "tmp"
    temp.mkdir()
    # the bringup runs as its own process, as a user starts it, with TMPDIR pointing at a private folder so
    # anything it leaves behind is seen
    run = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.fleet.bringup", "--fleet", str(fleet),
                          "--set", "fleet_workload.stagger_s=0.0"], env={**os.environ, "TMPDIR": str(temp)},
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    code = run.returncode
    assert code == 0, out[-3000:]
    assert "[bringup] timely_server is ready (configured and activated)" in out
    assert "fleet_workload finished with exit code 0" in out
    assert "Traceback" not in out
    left = [p.name for p in temp.iterdir() if p.name.startswith("timely")]  # (torch keeps its own cache there)
    assert left == []   # the merged params file (made for --set) was removed


def _gone(pid: int) -> bool:
    """The process has exited (a zombie that its new parent has not reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            return any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except OSError:
        return True


def test_nodes_stop_when_the_bringup_is_killed(tmp_path):
    """kill -9 of the bringup (no chance to stop its children): every node it started gets SIGTERM from the
    kernel (ros/process_signals.stop_with_parent) and ends, instead of staying behind with the model and its robots."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"/**/timely_server": {"ros__parameters": {"num_threads": 1, "max_batch": 2}}}))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"bringup": {
        "params_file": "params.yaml", "server": True, "workload": False,
        "executors": [{"agent": "drone_1", "robot_type": "drone"}]}}))
    temp = tmp_path / "tmp"
    temp.mkdir()
    # --set: the nodes get a merged params file, which must not outlive the bringup either
    proc = subprocess.Popen([sys.executable, "-m", "timely_llm_ros.ros.fleet.bringup", "--fleet", str(fleet),
                             "--set", "timely_server.max_batch=3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(temp)})
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "[bringup] fleet up" in line:
            break
    pids = [int(m) for m in re.findall(r"\[bringup\] started \S+ \(pid (\d+)\)", "".join(lines))]
    try:
        assert len(pids) == 2 and not any(_gone(p) for p in pids), "".join(lines)[-3000:]
        assert re.search(r"\[timely_server\].*configured: .*max_batch=3 ", "".join(lines)), "".join(lines)[-3000:]
        proc.kill()
        proc.wait(10)
        proc.stdout.close()   # as when the bringup is gone: nobody reads the nodes' output any more
        wait_until(lambda: all(_gone(p) for p in pids), 60,
                   lambda: f"still running after the bringup died: {[p for p in pids if not _gone(p)]}", 0.2)
        # the merged params lived in memory (memfd), so even a kill -9 leaves no file behind
        assert [p.name for p in temp.iterdir() if p.name.startswith("timely")] == []
    finally:
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_only_the_main_threads_children_are_set_to_stop_with_this_process():
    """The kernel sends the parent-death signal when the *thread* that started a child ends: a node started
    from a worker thread must not be armed, or it would stop when that thread does."""
    env = process_signals.stopping_with_this_process({"A": "1"})
    assert env == {"A": "1", process_signals.STOP_WITH_PID_ENV: str(os.getpid())}
    got: list[dict] = []
    worker = threading.Thread(target=lambda: got.append(process_signals.stopping_with_this_process({"A": "1"})))
    worker.start()
    worker.join()
    assert got == [{"A": "1"}]
