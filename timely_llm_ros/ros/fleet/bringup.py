"""timely_bringup: start a whole fleet (server, one executor per robot, workload) as separate processes from one
fleet description, without a ROS install (on a ROS install, launch/timely_fleet.launch.py reads the same file).

The server is a lifecycle node: it is started with ``autostart:=false`` and the bringup configures and activates it
through its lifecycle services (an outside manager, as ``ros2 launch`` does), then starts the executors and the
workload. The bringup ends with the workload's exit code. Ctrl-C or SIGTERM ends a fleet normally: every node gets
SIGINT, then SIGTERM and SIGKILL after ``bringup.stop_grace_s``, and the bringup exits 0; the nodes stop on their own
if the bringup is killed outright (ros/process_signals.stop_with_parent).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence, TextIO

import yaml

from timely_llm_ros.ros.fleet.children import ChildSpec, RunningChild, build_children
from timely_llm_ros.ros.fleet.description import apply_overrides, load_fleet, merged_params_file
from timely_llm_ros.ros.fleet.readiness import GraphProbe, drive_lifecycle
from timely_llm_ros.ros.process_signals import SignalLatch, stopping_with_this_process

EXIT_INTERRUPTED = 130


class Supervisor:
    """Starts the children in order, waits for readiness, and stops them all when the run ends."""

    def __init__(self, children: list[ChildSpec], stop_grace_s: float = 5.0, out: TextIO | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.specs = children
        self.stop_grace_s = stop_grace_s
        self.out = out if out is not None else sys.stdout
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "0")
        self.running: list[RunningChild] = []
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

    def run(self) -> int:
        """Run the fleet; returns the workload's exit code, the failing child's code, or 130 when stopped."""
        probe = GraphProbe() if any(s.action_type for s in self.specs) else None
        try:
            env = stopping_with_this_process(self.env)
            for spec in self.specs:
                child = RunningChild(spec, env, self.out, self._lock, driven=spec.lifecycle)
                self.running.append(child)
                self.say(f"started {spec.name} (pid {child.proc.pid})")
                if child.driven:
                    driver = threading.Thread(target=drive_lifecycle, args=(child, self._halt_drivers),
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

    def _wait_ready(self, child: RunningChild, probe: GraphProbe | None) -> int | None:
        spec = child.spec
        deadline = time.monotonic() + spec.ready_timeout_s
        next_probe = 0.0
        while not child.ready.is_set():
            failed = self._first_exit()
            if failed is not None:
                return failed
            now = time.monotonic()
            if child.failure or now >= next_probe:   # a failed lifecycle call may have reached the other one
                twin = self._twin(child, probe)
                if twin or child.failure:
                    self.say(f"{twin or child.failure}: stopping")
                    return 1
            if self._stop.is_set():
                self.say("interrupted")
                return EXIT_INTERRUPTED
            if now >= deadline:
                self.say(f"{spec.name} not ready after {spec.ready_timeout_s:g} s "
                         f"(no 'ready' line and no {spec.action_type or 'action'} server): stopping")
                return 1
            if probe is not None and now >= next_probe:
                next_probe = now + 0.5
                if not spec.lifecycle and probe.serves(spec.node_name, spec.namespace, spec.action_type):
                    child.ready.set()
            child.ready.wait(0.05)
        self.say(f"{spec.name} is ready" + (" (configured and activated)" if child.activated else ""))
        return None

    def _twin(self, child: RunningChild, probe: GraphProbe | None) -> str:
        """Why the child cannot be told apart on the graph: another node of its name already runs on this ROS
        domain (another fleet or server), so lifecycle calls and goals could reach either; "" when none is seen."""
        spec = child.spec
        if probe is None or probe.instances(spec.node_name, spec.namespace) < 2:
            return ""
        fqn = "/" + "/".join(p for p in (spec.namespace.strip("/"), spec.node_name) if p)
        domain = self.env.get("ROS_DOMAIN_ID") or "0 (ROS_DOMAIN_ID unset)"
        return (f"two nodes named {fqn} are on ROS domain {domain}: another fleet or server runs there; stop it, "
                "or run this fleet on a domain of its own (ROS_DOMAIN_ID=<1-232>)")

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


def main(argv: Sequence[str] | None = None) -> int:
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
        children = build_children(config, node_params, args.log_level, not args.no_workload, pass_fds=fds)
        if not children:
            print("[bringup] nothing to start (server, executors and workload all off)", file=sys.stderr)
            return 2
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # for the readiness probe too
        supervisor = Supervisor(children, stop_grace_s=config.stop_grace_s)
        latch = SignalLatch({signal.SIGINT: lambda _: supervisor.request_stop(),
                             signal.SIGTERM: lambda _: supervisor.request_stop()}, name="bringup-signals")
        latch.install()    # SIGINT/SIGTERM stop the children cleanly
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
