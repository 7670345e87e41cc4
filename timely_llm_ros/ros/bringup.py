"""Start a whole fleet (server, executors, workload) as separate processes, without ros2 launch.

A fleet description (config/fleet/*.yaml) has a top-level ``bringup:`` section saying what to start and
naming the nodes' ROS params file (``params_file``, relative to the description), which the nodes get as
is with ``--params-file``; rcl never reads the description. Only when parameters are overridden (``--set``)
or a legacy description carries parameter sections of its own are they merged into a params file: on Linux an
in-memory file (memfd) the nodes inherit and read as ``/dev/fd/N``, so nothing is on disk even after a
``kill -9`` of the bringup (``cat /proc/<bringup pid>/fd/N`` shows it); elsewhere a temporary folder, removed
when the bringup ends.

The server is a lifecycle node: it is started with ``autostart:=false`` and the bringup configures and
activates it through its lifecycle services (an outside manager, as ``ros2 launch`` does), then starts
the executors and the workload.

``kill -USR2 <bringup pid>`` prints the bringup's own threads' stacks and has every node print its own (each
node dumps on SIGUSR2, ros/process_signals.enable_thread_dump); the fleet carries on.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence, TextIO

import yaml

from .process_signals import (STOP_WITH_PID_ENV, THREAD_DUMP_SIGNAL, SignalLatch, catches_signal,  # noqa: F401
                              stopping_with_this_process, thread_stack)

SERVER_NAME = "timely_server"
EXECUTOR_NAME = "executor"
WORKLOAD_NAME = "fleet_workload"
NODE_NAMES = (SERVER_NAME, EXECUTOR_NAME, WORKLOAD_NAME)
NODE_MODULES = {
    "server": "timely_llm_ros.ros.server_node",
    "executor": "timely_llm_ros.ros.executor_node",
    "workload": "timely_llm_ros.ros.workload_node",
}
READY_PATTERN = re.compile(r"(?<!not )\bready\b", re.IGNORECASE)  # a child's "I am ready" log line
BRINGUP_SETTINGS = ("server", "workload", "server_ready_timeout_s", "executor_ready_timeout_s", "stop_grace_s")
LIFECYCLE_TRANSITIONS = ("configure", "activate")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
EXIT_INTERRUPTED = 130

@dataclass(frozen=True)
class ExecutorSpec:
    """One robot's executor: its namespace and skill set."""

    agent: str
    robot_type: str


@dataclass
class FleetConfig:
    """The parsed fleet YAML: what to start, and the nodes' parameter sections."""

    server: bool = True
    workload: bool = True
    executors: list[ExecutorSpec] = field(default_factory=list)
    server_ready_timeout_s: float = 120.0
    executor_ready_timeout_s: float = 30.0
    stop_grace_s: float = 5.0
    node_params: dict[str, Any] = field(default_factory=dict)
    params_file: Path | None = None    # the nodes' params file, handed over unchanged unless `modified`
    modified: bool = False             # node_params differ from params_file (overrides, inline sections)


@dataclass
class ChildSpec:
    """A process to start: display name, argv, and what readiness to wait for before going on."""

    name: str
    role: str                      # server | executor | workload
    argv: list[str]
    ready_timeout_s: float = 0.0   # 0 = do not wait
    action_type: str = ""          # readiness also by an action server of this type on the node (rclpy graph)
    node_name: str = ""
    namespace: str = "/"
    lifecycle: bool = False        # a managed node the supervisor configures and activates
    pass_fds: tuple[int, ...] = () # file descriptors the process inherits (an in-memory params file)


def parse_fleet(data: dict[str, Any], require_bringup: bool = True, base_dir: Path | None = None) -> FleetConfig:
    """Validate a loaded fleet YAML; raises ValueError saying what is wrong.

    ``bringup.params_file`` (relative to ``base_dir``) names the nodes' params file. Without
    ``require_bringup`` a plain parameter file (no ``bringup:`` section) is accepted as a fleet that
    starts only the server.
    """
    if not isinstance(data, dict):
        raise ValueError("fleet YAML must be a mapping with a 'bringup:' section")
    section = data.get("bringup")
    if section is None and not require_bringup:
        section = {"server": True, "workload": False}
    if not isinstance(section, dict):
        raise ValueError("fleet YAML has no 'bringup:' mapping (server, workload, executors)")
    executors: list[ExecutorSpec] = []
    for i, entry in enumerate(section.get("executors") or []):
        if not isinstance(entry, dict) or "agent" not in entry or "robot_type" not in entry:
            raise ValueError(f"bringup.executors[{i}] needs 'agent' and 'robot_type', got {entry!r}")
        agent, robot_type = str(entry["agent"]), str(entry["robot_type"])
        if not _NAME_RE.match(agent):
            raise ValueError(f"bringup.executors[{i}].agent {agent!r} is not a valid ROS namespace token")
        if not _NAME_RE.match(robot_type):
            raise ValueError(f"bringup.executors[{i}].robot_type {robot_type!r} is not a skill set name")
        if any(e.agent == agent for e in executors):
            raise ValueError(f"bringup.executors: agent {agent!r} listed twice")
        executors.append(ExecutorSpec(agent, robot_type))
    inline = {k: v for k, v in data.items() if k != "bringup"}
    config = FleetConfig(
        server=bool(section.get("server", True)),
        workload=bool(section.get("workload", True)),
        executors=executors,
        node_params=dict(inline),
        modified=bool(inline) and "bringup" in data,
    )
    if section.get("params_file"):
        path = Path(str(section["params_file"]))
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        config.params_file = path.resolve()
        try:
            params = yaml.safe_load(config.params_file.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ValueError(f"bringup.params_file: cannot read {config.params_file}: {exc}") from exc
        if not isinstance(params, dict) or "bringup" in params:
            raise ValueError(f"bringup.params_file {config.params_file} must be a ROS params file "
                             "(<node>: ros__parameters: ...) without a 'bringup:' section")
        config.node_params = {**params, **inline}
    for key in ("server_ready_timeout_s", "executor_ready_timeout_s", "stop_grace_s"):
        if key in section:
            value = float(section[key])
            if not value >= 0:
                raise ValueError(f"bringup.{key} must be >= 0, got {section[key]!r}")
            setattr(config, key, value)
    return config


def load_fleet(path: str | Path, require_bringup: bool = True) -> FleetConfig:
    """Read and validate a fleet description (or, without require_bringup, a plain params file)."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    config = parse_fleet(data, require_bringup, base_dir=path.resolve().parent)
    if isinstance(data, dict) and "bringup" not in data:  # a plain params file: hand it over as it is
        config.params_file = path.resolve()
    return config


def apply_overrides(config: FleetConfig, overrides: Sequence[str]) -> None:
    """Apply ``node.param=value`` overrides (value parsed as YAML) to the node sections or ``bringup``.

    ``node`` matches a section named exactly so or ending in ``/node`` (``executor`` matches ``/**/executor``);
    otherwise a new section ``/**/node`` is added, which reaches the node in any namespace (the executors run
    in their robots' namespaces). ``node`` must name a node the bringup starts (a typo would otherwise be
    ignored by every node); a fully qualified ``/drone_1/executor`` sets one robot's executor alone.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        node, dot, param = key.rpartition(".")
        if not sep or not dot or not node or not param:
            raise ValueError(f"--set expects node.param=value, got {item!r}")
        value = yaml.safe_load(raw) if raw else ""
        if node != "bringup":
            config.modified = True
        if node == "bringup":
            if param not in BRINGUP_SETTINGS:
                raise ValueError(f"--set bringup.{param}: settable are {', '.join(BRINGUP_SETTINGS)}")
            setattr(config, param, getattr(parse_fleet({"bringup": {param: value}}), param))
            continue
        if node.rpartition("/")[2] not in NODE_NAMES:
            raise ValueError(f"--set {key}: the bringup starts no node named {node.rpartition('/')[2]!r} "
                             f"(its nodes: {', '.join(NODE_NAMES)}; bringup.<setting> for the bringup itself)")
        section_name = next((k for k in config.node_params if k == node or str(k).endswith("/" + node)),
                            node if node.startswith("/") else f"/**/{node}")
        section = config.node_params.setdefault(section_name, {})
        section.setdefault("ros__parameters", {})[param] = value


def node_params_yaml(config: FleetConfig, any_namespace: bool = False) -> str:
    """The YAML handed to the nodes as --params-file (parameter sections only).

    ``any_namespace`` turns relative section names into ``/**/name`` so they also match nodes pushed
    into a namespace (``ros2 launch ... namespace:=fleet_a``).
    """
    params = config.node_params
    if any_namespace:
        params = {(k if str(k).startswith("/") else f"/**/{k}"): v for k, v in params.items()}
    return yaml.safe_dump(params, sort_keys=False)


def write_node_params(config: FleetConfig, directory: str | Path | None = None,
                      any_namespace: bool = False) -> Path:
    """Write the nodes' parameter file (``bringup:`` stripped, which rcl would reject) and return its path."""
    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="timely_params_"))
    path = folder / "node_params.yaml"
    path.write_text(node_params_yaml(config, any_namespace), encoding="utf-8")
    return path


@contextlib.contextmanager
def merged_params_file(config: FleetConfig) -> Iterator[tuple[Path, tuple[int, ...]]]:
    """The merged params file for the nodes and the descriptors they must inherit to read it.

    Linux: an in-memory file (memfd) named ``/dev/fd/N``; the kernel frees it with its last holder, so a
    bringup killed outright leaves nothing behind. Elsewhere: a file in a temporary folder removed on exit."""
    if hasattr(os, "memfd_create") and Path("/dev/fd").is_dir():
        fd = os.memfd_create("timely_node_params")
        try:
            os.write(fd, node_params_yaml(config).encode("utf-8"))
            yield Path(f"/dev/fd/{fd}"), (fd,)
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="timely_bringup_") as tmp:
        yield write_node_params(config, tmp), ()


def build_children(
    config: FleetConfig,
    params_file: str | Path,
    log_level: str = "info",
    with_workload: bool = True,
    entry_points: dict[str, list[str]] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> list[ChildSpec]:
    """The processes to start, in start order (server, executors, workload).

    ``entry_points`` maps a role to the argv that runs its node (default ``<python> -m <module>``);
    ``pass_fds``: descriptors every child inherits (those ``params_file`` needs, see merged_params_file).
    """
    entry = {role: [sys.executable, "-m", module] for role, module in NODE_MODULES.items()}
    entry.update(entry_points or {})
    tail = ["--params-file", str(params_file), "--log-level", log_level]
    children: list[ChildSpec] = []
    if config.server:
        children.append(ChildSpec(
            SERVER_NAME, "server",
            [*entry["server"], "--ros-args", "-r", f"__node:={SERVER_NAME}", *tail, "-p", "autostart:=false"],
            ready_timeout_s=config.server_ready_timeout_s, action_type="timely_llm_ros/action/Plan",
            node_name=SERVER_NAME, lifecycle=True,
        ))
    for ex in config.executors:
        children.append(ChildSpec(
            f"{ex.agent}/{EXECUTOR_NAME}", "executor",
            [*entry["executor"], "--ros-args", "-r", f"__ns:=/{ex.agent}", "-r", f"__node:={EXECUTOR_NAME}",
             *tail, "-p", f"robot_type:={ex.robot_type}"],
            ready_timeout_s=config.executor_ready_timeout_s,
            action_type="timely_llm_ros/action/ExecuteSegment", node_name=EXECUTOR_NAME, namespace=f"/{ex.agent}",
        ))
    if config.workload and with_workload:
        children.append(ChildSpec(
            WORKLOAD_NAME, "workload",
            [*entry["workload"], "--ros-args", "-r", f"__node:={WORKLOAD_NAME}", *tail],
        ))
    for child in children:
        child.pass_fds = tuple(pass_fds)
    return children


class _Child:
    """A running child process whose merged output is echoed with a ``[name]`` prefix."""

    def __init__(self, spec: ChildSpec, env: dict[str, str], out: TextIO, out_lock: threading.Lock,
                 driven: bool = False) -> None:
        self.spec = spec
        self.ready = threading.Event()
        self.line_ready = threading.Event()   # the child printed a ready line
        self.driven = driven                  # a lifecycle driver decides readiness, not the ready line
        self.failure: str | None = None   # why a lifecycle transition failed
        self.activated = False            # configured and activated by the supervisor
        self.proc = subprocess.Popen(
            spec.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, text=True, errors="replace", bufsize=1, start_new_session=True, pass_fds=spec.pass_fds,
        )
        self._reader = threading.Thread(target=self._pump, args=(out, out_lock), daemon=True)
        self._reader.start()

    def _pump(self, out: TextIO, out_lock: threading.Lock) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if READY_PATTERN.search(line):
                self.line_ready.set()
                if not self.driven:
                    self.ready.set()
            with out_lock:
                out.write(f"[{self.spec.name}] {line.rstrip(chr(10))}\n")
                out.flush()

    def signal(self, sig: int) -> None:
        """Send a signal to the child's process group (ignored when already gone)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def join_output(self, timeout: float = 2.0) -> None:
        """Wait for the child's last output lines to be echoed."""
        self._reader.join(timeout)


class _GraphProbe:
    """Finds action servers on the ROS graph (readiness without a ready line); inert without rclpy."""

    def __init__(self) -> None:
        self._node = None
        try:
            import rclpy
            from rclpy.signals import SignalHandlerOptions

            self._rclpy = rclpy
            self._context = rclpy.Context()
            rclpy.init(args=[], context=self._context, signal_handler_options=SignalHandlerOptions.NO)
            self._node = rclpy.create_node("timely_bringup_probe", context=self._context)
        except Exception:  # no rclpy / no RMW: rely on ready lines only
            self._node = None

    def serves(self, node_name: str, namespace: str, action_type: str) -> bool:
        """True if that node is discoverable and serves an action of this type."""
        if self._node is None or not action_type or not node_name:
            return False
        from rclpy.action import get_action_server_names_and_types_by_node

        try:
            servers = get_action_server_names_and_types_by_node(self._node, node_name, namespace)
        except Exception:  # the node is not discovered yet
            return False
        return any(action_type in types for _name, types in servers)

    def close(self) -> None:
        if self._node is not None:
            self._node.destroy_node()
            self._rclpy.shutdown(context=self._context)
            self._node = None


def _lifecycle_driver(child: _Child, halt: threading.Event) -> None:
    """Configure and activate a managed child through its lifecycle services (own rclpy context).

    Sets child.ready once active, or child.failure with the reason. A child without lifecycle services
    whose action server is discoverable (an unmanaged build) counts as ready."""
    try:
        import rclpy
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState
        from rclpy.action import get_action_server_names_and_types_by_node
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
    except ImportError:
        return  # ready lines only
    spec = child.spec
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("timely_bringup_lifecycle", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    fqn = "/" + "/".join(p for p in (spec.namespace.strip("/"), spec.node_name) if p)
    client = node.create_client(ChangeState, f"{fqn}/change_state")
    deadline = time.monotonic() + spec.ready_timeout_s

    def gone() -> bool:
        return halt.is_set() or child.proc.poll() is not None or time.monotonic() > deadline

    try:
        unmanaged_since = None
        line_since = None
        while not client.service_is_ready():
            if gone():
                return
            if child.line_ready.is_set():  # ready on its own and no lifecycle services: an unmanaged node
                line_since = line_since or time.monotonic()
                if time.monotonic() - line_since > 2.0:
                    child.ready.set()
                    return
            try:
                servers = get_action_server_names_and_types_by_node(node, spec.node_name, spec.namespace)
            except Exception:
                servers = []
            if spec.action_type and any(spec.action_type in types for _n, types in servers):
                unmanaged_since = unmanaged_since or time.monotonic()
                if time.monotonic() - unmanaged_since > 2.0:
                    child.ready.set()
                    return
            time.sleep(0.1)
        for label, transition in (("configure", Transition.TRANSITION_CONFIGURE),
                                  ("activate", Transition.TRANSITION_ACTIVATE)):
            future = client.call_async(ChangeState.Request(transition=Transition(id=transition)))
            while not future.done():
                if gone():
                    return
                executor.spin_once(timeout_sec=0.1)
            if not future.result().success:
                child.failure = f"lifecycle transition '{label}' of {fqn} failed (see its log)"
                return
        child.activated = True
        child.ready.set()
    finally:
        node.destroy_client(client)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


class Supervisor:
    """Starts the children in order, waits for readiness, and stops them all when the run ends."""

    def __init__(self, children: list[ChildSpec], stop_grace_s: float = 5.0, out: TextIO | None = None,
                 env: dict[str, str] | None = None, use_graph: bool = True) -> None:
        self.specs = children
        self.stop_grace_s = stop_grace_s
        self.out = out if out is not None else sys.stdout
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "0")
        self.use_graph = use_graph
        self.running: list[_Child] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._halt_drivers = threading.Event()
        self._drivers: list[threading.Thread] = []

    def say(self, message: str) -> None:
        """One bringup status line."""
        with self._lock:
            self.out.write(f"[bringup] {message}\n")
            self.out.flush()

    def request_stop(self) -> None:
        """Ask run() to stop everything (SIGINT/SIGTERM do, from the signal watcher thread)."""
        self._stop.set()

    def dump_threads(self) -> None:
        """Print the bringup's own threads' stacks, then send SIGUSR2 to every running node that handles it
        (its stacks come out prefixed with its name); a node still starting is left alone."""
        for thread in threading.enumerate():
            self.say(f"thread {thread.name}:" + "".join(f"\n[bringup]   {ln}" for ln in thread_stack(thread)))
        for child in list(self.running):
            pid = child.proc.pid
            if child.proc.poll() is not None:
                continue
            if catches_signal(pid, THREAD_DUMP_SIGNAL):
                self.say(f"thread dump of {child.spec.name} (pid {pid}) follows")
                try:
                    os.kill(pid, THREAD_DUMP_SIGNAL)
                except ProcessLookupError:   # it ended meanwhile
                    pass
            else:
                self.say(f"{child.spec.name} (pid {pid}) not asked for a thread dump: still starting")

    def run(self) -> int:
        """Run the fleet; returns the workload's exit code, the failing child's code, or 130 when stopped."""
        probe = _GraphProbe() if self.use_graph and any(s.action_type for s in self.specs) else None
        try:
            env = stopping_with_this_process(self.env)
            for spec in self.specs:
                child = _Child(spec, env, self.out, self._lock, driven=spec.lifecycle and self.use_graph)
                self.running.append(child)
                self.say(f"started {spec.name} (pid {child.proc.pid})")
                if child.driven:
                    driver = threading.Thread(target=_lifecycle_driver, args=(child, self._halt_drivers),
                                              name=f"lifecycle-{spec.node_name}")
                    driver.start()
                    self._drivers.append(driver)
                if spec.ready_timeout_s > 0:
                    code = self._wait_ready(child, probe)
                    if code is not None:
                        return code
            if probe is not None:
                probe.close()
                probe = None
            return self._watch()
        finally:
            if probe is not None:
                probe.close()
            self._stop_all()

    def _wait_ready(self, child: _Child, probe: _GraphProbe | None) -> int | None:
        spec = child.spec
        deadline = time.monotonic() + spec.ready_timeout_s
        next_probe = 0.0
        while not child.ready.is_set():
            failed = self._first_exit()
            if failed is not None:
                return failed
            if child.failure:
                self.say(f"{child.failure}: stopping")
                return 1
            if self._stop.is_set():
                self.say("interrupted")
                return EXIT_INTERRUPTED
            now = time.monotonic()
            if now >= deadline:
                self.say(f"{spec.name} not ready after {spec.ready_timeout_s:g} s "
                         f"(no 'ready' line and no {spec.action_type or 'action'} server): stopping")
                return 1
            if probe is not None and now >= next_probe and not spec.lifecycle:
                next_probe = now + 0.5
                if probe.serves(spec.node_name, spec.namespace, spec.action_type):
                    child.ready.set()
            child.ready.wait(0.05)
        self.say(f"{spec.name} is ready" + (" (configured and activated)" if child.activated else ""))
        return None

    def _first_exit(self) -> int | None:
        """If a child other than a finished workload has exited, report it and return a non-zero code."""
        for child in self.running:
            code = child.proc.poll()
            if code is None:
                continue
            if child.spec.role == "workload":
                child.join_output()
                self.say(f"{child.spec.name} finished with exit code {code}")
                return code
            child.join_output()
            self.say(f"{child.spec.name} exited early with code {code}: stopping the fleet")
            return code if code != 0 else 1
        return None

    def _watch(self) -> int:
        has_workload = any(c.spec.role == "workload" for c in self.running)
        self.say("fleet up" + ("; waiting for the workload to finish" if has_workload else "; Ctrl-C to stop"))
        while not self._stop.wait(0.1):
            code = self._first_exit()
            if code is not None:
                return code
        self.say("interrupted")
        return EXIT_INTERRUPTED

    def _stop_all(self) -> None:
        self._halt_drivers.set()
        for driver in self._drivers:
            driver.join(5.0)
        self._drivers.clear()
        alive = [c for c in self.running if c.proc.poll() is None]
        for child in alive:
            child.signal(signal.SIGINT)
        for sig, grace in ((signal.SIGTERM, self.stop_grace_s), (signal.SIGKILL, 2.0)):
            deadline = time.monotonic() + grace
            while alive and time.monotonic() < deadline:
                alive = [c for c in alive if c.proc.poll() is None]
                time.sleep(0.05)
            for child in alive:
                self.say(f"{child.spec.name} still running: sending {sig.name}")
                child.signal(sig)
        for child in self.running:
            try:
                child.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            child.join_output()
        self.running.clear()


def make_parser() -> argparse.ArgumentParser:
    """The timely_bringup command line."""
    parser = argparse.ArgumentParser(
        prog="timely_bringup",
        description="Start the timely_llm_ros fleet (server, one executor per robot, workload) from one YAML.",
    )
    parser.add_argument("--fleet", "--params-file", dest="params_file", default=None,
                        help="fleet description: a 'bringup:' section naming the processes and the nodes' "
                             "params_file (default: config/fleet/demo.yaml of the package)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error", "fatal"],
                        help="ROS log level of every node (default: info)")
    parser.add_argument("--no-workload", action="store_true",
                        help="do not start the workload; run until Ctrl-C")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NODE.PARAM=VALUE",
                        help="override a parameter, e.g. --set timely_server.policy=timely or "
                             "--set executor.time_scale=0.5 (every executor; /drone_1/executor.time_scale=0.5 for "
                             "one); NODE is timely_server, executor, fleet_workload or bringup (value parsed as "
                             "YAML; repeatable)")
    return parser


def _default_params_file() -> Path:
    from timely_llm_ros.paths import config_dir

    return config_dir() / "fleet" / "demo.yaml"


def main(argv: Sequence[str] | None = None,
         entry_points: dict[str, list[str]] | None = None) -> int:
    """Console entry point ``timely_bringup``; returns the process exit code."""
    args = make_parser().parse_args(argv)
    path = Path(args.params_file) if args.params_file else _default_params_file()
    try:
        config = load_fleet(path)
        apply_overrides(config, args.overrides)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"[bringup] error: {path}: {exc}", file=sys.stderr)
        return 2
    # the fleet's own params file as it is; a merged one (--set) only in memory where the OS allows
    merged = config.params_file is None or config.modified
    with merged_params_file(config) if merged else contextlib.nullcontext((config.params_file, ())) as given:
        node_params, fds = given
        children = build_children(config, node_params, args.log_level, not args.no_workload, entry_points, fds)
        if not children:
            print("[bringup] nothing to start (server, executors and workload all off)", file=sys.stderr)
            return 2
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # for the readiness probe too
        supervisor = Supervisor(children, stop_grace_s=config.stop_grace_s)
        latch = SignalLatch({signal.SIGINT: lambda _: supervisor.request_stop(),
                             signal.SIGTERM: lambda _: supervisor.request_stop(),
                             THREAD_DUMP_SIGNAL: lambda _: supervisor.dump_threads()}, name="bringup-signals")
        latch.install()    # SIGINT/SIGTERM stop the children cleanly; SIGUSR2 dumps every process's threads
        try:
            supervisor.say(f"fleet from {path}: {', '.join(c.name for c in children)}")
            if merged:
                where = f"in memory, cat /proc/{os.getpid()}/fd/{fds[0]}" if fds else str(node_params)
                supervisor.say(f"node parameters merged with --set ({where})")
            code = supervisor.run()
            return 0 if code == EXIT_INTERRUPTED else code  # Ctrl-C / SIGTERM is a normal way to end a fleet
        finally:
            latch.restore()


if __name__ == "__main__":
    sys.exit(main())
