"""A fleet description: which processes a fleet runs and the parameters its nodes get.

A fleet description (config/fleet/*.yaml) has a top-level ``bringup:`` section saying what to start (the server,
one executor per robot, the workload, and the bringup's own timeouts) and naming the nodes' ROS params file
(``params_file``, relative to the description), which the nodes get as it is with ``--params-file``; rcl never
reads the description. timely_bringup and launch/timely_fleet.launch.py read the same file.

Only when parameters are overridden (``--set``) are they merged into a params file: on Linux an in-memory file
(memfd) the nodes inherit and read as ``/dev/fd/N``, so nothing is on disk even after a ``kill -9`` of the bringup; elsewhere a temporary folder, removed on exit.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

SERVER_NAME = "timely_server"
EXECUTOR_NAME = "executor"
WORKLOAD_NAME = "fleet_workload"
NODE_NAMES = (SERVER_NAME, EXECUTOR_NAME, WORKLOAD_NAME)
BRINGUP_SETTINGS = ("server", "workload", "server_ready_timeout_s", "executor_ready_timeout_s", "stop_grace_s")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    modified: bool = False             # node_params differ from params_file (--set overrides)


def parse_fleet(data: dict[str, Any], base_dir: Path | None = None) -> FleetConfig:
    """Validate a loaded fleet description; raises ValueError saying what is wrong.

    ``bringup.params_file`` (relative to ``base_dir``) names the nodes' params file.
    """
    if not isinstance(data, dict):
        raise ValueError("fleet YAML must be a mapping with a 'bringup:' section")
    section = data.get("bringup")
    if not isinstance(section, dict):
        raise ValueError("fleet YAML has no 'bringup:' mapping (server, workload, executors)")
    others = [str(k) for k in data if k != "bringup"]
    if others:
        raise ValueError(f"a fleet description holds only 'bringup:'; the node parameters ({', '.join(others)}) "
                         "go in the params file it names (bringup.params_file)")
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
    config = FleetConfig(server=bool(section.get("server", True)), workload=bool(section.get("workload", True)),
                         executors=executors)
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
        config.node_params = params
    for key in ("server_ready_timeout_s", "executor_ready_timeout_s", "stop_grace_s"):
        if key in section:
            value = float(section[key])
            if not value >= 0:
                raise ValueError(f"bringup.{key} must be >= 0, got {section[key]!r}")
            setattr(config, key, value)
    return config


def load_fleet(path: str | Path) -> FleetConfig:
    """Read and validate a fleet description."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return parse_fleet(data, base_dir=path.resolve().parent)


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


def node_params_yaml(config: FleetConfig) -> str:
    """The YAML handed to the nodes as --params-file (parameter sections only; rcl would reject ``bringup:``)."""
    return yaml.safe_dump(config.node_params, sort_keys=False)


def write_node_params(config: FleetConfig, directory: str | Path) -> Path:
    """Write the nodes' parameter file into ``directory`` and return its path."""
    path = Path(directory) / "node_params.yaml"
    path.write_text(node_params_yaml(config), encoding="utf-8")
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
