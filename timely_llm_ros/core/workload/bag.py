"""Write and read workloads as rosbag2 (mcap) bags of Plan goals, with the `rosbags` package (no ROS install).

Topics (message log time = task arrival, ns since start_ns):
    /workload/plan_goal   timely_llm_ros/action/Plan_Goal  the goal a client would send (registered from the goal
                          section of action/Plan.action; rosbags' typestore reads .msg text, so the section before
                          the first '---' is registered under that name)
    /workload/task        std_msgs/msg/String  JSON of the task's replay fields (task_id, trace_id, plan,
                          prompt_tokens, event), one per goal, same timestamp
    /workload/spec        std_msgs/msg/String  YAML of the workload spec and counts, once at start_ns
A replay node publishes /workload/plan_goal as Plan goals at their log times; simulators read the whole Workload.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore, get_types_from_msg
from rosbags.typesys.store import Typestore

from ...paths import share_dir
from .generator import Workload, WorkloadSpec, WorkloadTask

GOAL_TYPE = "timely_llm_ros/action/Plan_Goal"
STRING_TYPE = "std_msgs/msg/String"
GOAL_TOPIC, TASK_TOPIC, SPEC_TOPIC = "/workload/plan_goal", "/workload/task", "/workload/spec"


def goal_definition(action_file: Path | None = None) -> str:
    """The goal section (before the first '---') of action/Plan.action."""
    path = Path(action_file) if action_file is not None else share_dir() / "action" / "Plan.action"
    text = path.read_text(encoding="utf-8")
    return text.split("\n---", 1)[0]


def make_typestore(action_file: Path | None = None) -> Typestore:
    """ROS 2 Kilted types plus timely_llm_ros/action/Plan_Goal."""
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(get_types_from_msg(goal_definition(action_file), GOAL_TYPE))
    return store


def write_bag(workload: Workload, path: str | Path, start_ns: int = 0, action_file: Path | None = None) -> Path:
    """Record workload into a new mcap bag directory at path (must not exist)."""
    path = Path(path)
    store = make_typestore(action_file)
    goal_cls = store.types[GOAL_TYPE]
    string_cls = store.types[STRING_TYPE]
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        goals = writer.add_connection(GOAL_TOPIC, GOAL_TYPE, typestore=store)
        tasks = writer.add_connection(TASK_TOPIC, STRING_TYPE, typestore=store)
        spec = writer.add_connection(SPEC_TOPIC, STRING_TYPE, typestore=store)
        header = {"spec": workload.spec.to_dict(), "events": workload.events, "skipped": workload.skipped}
        writer.write(spec, start_ns, store.serialize_cdr(string_cls(data=yaml.safe_dump(header)), STRING_TYPE))
        for t in workload.tasks:
            stamp = start_ns + int(round(t.arrival * 1e9))
            goal = goal_cls(agent_id=t.agent_id, robot_type=t.robot_type, task=t.task, context=t.context,
                            urgency_class=t.urgency, ert=0.0, alpha=0.0, beta=0.0, max_new_tokens=0, dry_run=False)
            writer.write(goals, stamp, store.serialize_cdr(goal, GOAL_TYPE))
            meta = {"task_id": t.task_id, "trace_id": t.trace_id, "plan": t.plan, "prompt_tokens": t.prompt_tokens,
                    "event": t.event}
            writer.write(tasks, stamp, store.serialize_cdr(string_cls(data=json.dumps(meta)), STRING_TYPE))
    return path


def read_bag(path: str | Path, action_file: Path | None = None) -> Workload:
    """Read a bag written by write_bag back into a Workload (arrivals relative to the spec message)."""
    store = make_typestore(action_file)
    header: dict | None = None
    start_ns = 0
    goals: list[tuple[int, object]] = []
    metas: list[tuple[int, dict]] = []
    with Reader(path) as reader:
        for conn, stamp, raw in reader.messages():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == SPEC_TOPIC:
                header, start_ns = yaml.safe_load(msg.data), stamp
            elif conn.topic == GOAL_TOPIC:
                goals.append((stamp, msg))
            elif conn.topic == TASK_TOPIC:
                metas.append((stamp, json.loads(msg.data)))
    if header is None:
        raise ValueError(f"{path}: no {SPEC_TOPIC} message; not a workload bag")
    if len(goals) != len(metas):
        raise ValueError(f"{path}: {len(goals)} goals but {len(metas)} task records")
    tasks = []
    for (stamp, g), (_, m) in zip(sorted(goals, key=lambda x: x[0]), sorted(metas, key=lambda x: x[0])):
        tasks.append(WorkloadTask(task_id=m["task_id"], arrival=(stamp - start_ns) / 1e9, event=int(m["event"]),
                                  agent_id=g.agent_id, trace_id=int(m["trace_id"]), robot_type=g.robot_type,
                                  urgency=g.urgency_class, task=g.task, context=g.context, plan=m["plan"],
                                  prompt_tokens=int(m["prompt_tokens"])))
    return Workload(WorkloadSpec.from_dict(header["spec"]), tasks, int(header.get("skipped", 0)),
                    int(header.get("events", 0)))


__all__ = ["GOAL_TYPE", "goal_definition", "make_typestore", "read_bag", "write_bag"]
