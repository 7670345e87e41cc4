"""Write and read workloads as rosbag2 (mcap) bags of Plan goals, with the `rosbags` package (no ROS install).

Topics (message log time = task arrival, ns since start_ns):
    /workload/plan_goal   timely_llm_ros/action/Plan_Goal  the goal a client would send (registered from the goal
                          section of action/Plan.action; rosbags' typestore reads .msg text, so the section before
                          the first '---' is registered under that name)
    /workload/task        std_msgs/msg/String  JSON of the task's replay fields (task_id, trace_id, plan,
                          prompt_tokens, event), one per goal, same timestamp
    /workload/spec        std_msgs/msg/String  YAML of the workload spec and counts, once at start_ns
A replay node publishes /workload/plan_goal as Plan goals at their log times; simulators read the whole Workload.

A run bag (write_run_bag) holds the same three topics for the goals as actually sent (log time = send time), so
read_bag reads it as a workload, plus the outcomes (log time = when the result arrived):
    /workload/plan_result timely_llm_ros/action/Plan_Result  the result, CDR as the action client received it
                          (registered from the result section, with msg/PlanSegment and msg/Skill)
    /workload/outcome     std_msgs/msg/String  JSON: task_id, request_id, agent_id, sent_at, result_at, status
Record a preset:  python -m timely_llm_ros.evaluation.workload.bag record --preset WID1 --duration 20 --out wid1.mcap
Compare two runs: python -m timely_llm_ros.evaluation.workload.bag compare run_timely.mcap run_vllm.mcap
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore, get_types_from_msg
from rosbags.typesys.store import Typestore

from timely_llm_ros.paths import share_dir
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadSpec, WorkloadTask, load_spec, generate

# LRTrace drone traces rephrased the way the embedded planner's corpus phrases them (tools/embedded_planner/corpus.py):
# same intent and urgency; the model was not trained on the LRTrace wording, so many of its plans for it do not parse.
CORPUS_PHRASING: dict[int, tuple[str, str]] = {
    1: ("find the cat", "room: bedroom; objects: bed, chair, window"),
    2: ("check for keys or wallet", "room: bedroom; objects: bed, wallet, lamp"),
    3: ("check the book on the cabinet", "room: office; objects: cabinet, chair, lamp"),
    4: ("find a toy under the bed", "room: bedroom; objects: bed, chair, rug"),
    5: ("find a tool for cutting paper", "room: office; objects: scissors, cup, desk"),
    6: ("a person is too close, avoid injuring them", "person in front, 60 cm away"),
    7: ("prevent a collision with the door", "door on the left, 40 cm away"),
    8: ("evade the dog", "dog behind, 90 cm away"),
}


def corpus_phrased(workload: Workload) -> Workload:
    """The workload with each task's text and scene in the corpus's phrasing (traces without one are kept)."""
    tasks = [replace(t, task=CORPUS_PHRASING[t.trace_id][0], context=CORPUS_PHRASING[t.trace_id][1])
             if t.trace_id in CORPUS_PHRASING else t for t in workload.tasks]
    return replace(workload, tasks=tasks)

GOAL_TYPE = "timely_llm_ros/action/Plan_Goal"
RESULT_TYPE = "timely_llm_ros/action/Plan_Result"
STRING_TYPE = "std_msgs/msg/String"
GOAL_TOPIC, TASK_TOPIC, SPEC_TOPIC = "/workload/plan_goal", "/workload/task", "/workload/spec"
RESULT_TOPIC, OUTCOME_TOPIC = "/workload/plan_result", "/workload/outcome"
_PACKAGE_MSGS = ("Skill", "PlanSegment")   # in dependency order


def _action_file(action_file: Path | None) -> Path:
    return Path(action_file) if action_file is not None else share_dir() / "action" / "Plan.action"


def goal_definition(action_file: Path | None = None) -> str:
    """The goal section (before the first '---') of action/Plan.action."""
    text = _action_file(action_file).read_text(encoding="utf-8")
    return text.split("\n---", 1)[0]


def result_definition(action_file: Path | None = None) -> str:
    """The result section of action/Plan.action, with this package's message types fully qualified."""
    text = _action_file(action_file).read_text(encoding="utf-8")
    section = text.split("\n---", 2)[1].split("\n", 1)[1]
    names = "|".join(_PACKAGE_MSGS)
    return re.sub(rf"^({names})(\[\d*\])?(\s)", r"timely_llm_ros/msg/\1\2\3", section, flags=re.M)


def make_typestore(action_file: Path | None = None) -> Typestore:
    """ROS 2 Kilted types plus timely_llm_ros/action/Plan_Goal, Plan_Result and the messages the result uses."""
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(get_types_from_msg(goal_definition(action_file), GOAL_TYPE))
    msg_dir = _action_file(action_file).parent.parent / "msg"
    for name in _PACKAGE_MSGS:
        store.register(get_types_from_msg((msg_dir / f"{name}.msg").read_text(encoding="utf-8"),
                                          f"timely_llm_ros/msg/{name}"))
    store.register(get_types_from_msg(result_definition(action_file), RESULT_TYPE))
    return store


class _WorkloadWriter:
    """The spec, goal and task topics of an open bag."""

    def __init__(self, writer: Writer, store: Typestore) -> None:
        self.writer, self.store = writer, store
        self.goal_cls, self.string_cls = store.types[GOAL_TYPE], store.types[STRING_TYPE]
        self.goals = writer.add_connection(GOAL_TOPIC, GOAL_TYPE, typestore=store)
        self.tasks = writer.add_connection(TASK_TOPIC, STRING_TYPE, typestore=store)
        self.spec = writer.add_connection(SPEC_TOPIC, STRING_TYPE, typestore=store)

    def string(self, text: str) -> bytes:
        return self.store.serialize_cdr(self.string_cls(data=text), STRING_TYPE)

    def header(self, workload: Workload, stamp: int) -> None:
        header = {"spec": workload.spec.to_dict(), "events": workload.events, "skipped": workload.skipped}
        self.writer.write(self.spec, stamp, self.string(yaml.safe_dump(header)))

    def task(self, t: WorkloadTask, stamp: int) -> None:
        goal = self.goal_cls(agent_id=t.agent_id, robot_type=t.robot_type, task=t.task, context=t.context,
                             urgency_class=t.urgency, ert=0.0, alpha=0.0, beta=0.0, max_new_tokens=0, dry_run=False,
                             time_budget=0.0, tpot_slo_ms=0.0, ttft_slo_ms=0.0, unconstrained=False, objects=[])
        self.writer.write(self.goals, stamp, self.store.serialize_cdr(goal, GOAL_TYPE))
        meta = {"task_id": t.task_id, "trace_id": t.trace_id, "plan": t.plan, "prompt_tokens": t.prompt_tokens,
                "event": t.event}
        self.writer.write(self.tasks, stamp, self.string(json.dumps(meta)))


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def write_bag(workload: Workload, path: str | Path, start_ns: int | None = None,
              action_file: Path | None = None) -> Path:
    """Record workload into a new mcap bag directory at path (must not exist); stamps are wall-clock
    nanoseconds from start_ns (default: now), so the bag lines up with other recordings."""
    path = Path(path)
    start_ns = time.time_ns() if start_ns is None else start_ns
    store = make_typestore(action_file)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        out = _WorkloadWriter(writer, store)
        out.header(workload, start_ns)
        for t in workload.tasks:
            out.task(t, start_ns + _ns(t.arrival))
    return path


def read_bag(path: str | Path, action_file: Path | None = None) -> Workload:
    """Read a bag written by write_bag (or a run bag) back into a Workload (arrivals relative to the spec message)."""
    store = make_typestore(action_file)
    header: dict | None = None
    start_ns = 0
    goals: list[tuple[int, object]] = []
    metas: list[tuple[int, dict]] = []
    with Reader(path) as reader:
        for conn, stamp, raw in reader.messages():
            if conn.topic not in (SPEC_TOPIC, GOAL_TOPIC, TASK_TOPIC):
                continue
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == SPEC_TOPIC:
                header, start_ns = yaml.safe_load(msg.data), stamp
            elif conn.topic == GOAL_TOPIC:
                goals.append((stamp, msg))
            else:
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


@dataclass
class RunRecord:
    """One request of a replay run: the task, when it was sent and what came back (times: s since the run began)."""

    task: WorkloadTask
    sent_at: float
    result_at: float | None = None
    result_cdr: bytes | None = None      # Plan_Result serialized as CDR (rclpy.serialization.serialize_message)
    outcome: dict = field(default_factory=dict)   # request_id, status, error_code, ... (JSON-able)


def write_run_bag(path: str | Path, workload: Workload, records: list[RunRecord], start_ns: int | None = None,
                  action_file: Path | None = None) -> Path:
    """Record a run: the goals as sent (a workload bag of them) and one outcome record per goal, with its result.
    start_ns: wall-clock time of the run's start (record offsets are relative to it); default: now."""
    path = Path(path)
    start_ns = time.time_ns() if start_ns is None else start_ns
    store = make_typestore(action_file)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        out = _WorkloadWriter(writer, store)
        results = writer.add_connection(RESULT_TOPIC, RESULT_TYPE, typestore=store)
        outcomes = writer.add_connection(OUTCOME_TOPIC, STRING_TYPE, typestore=store)
        out.header(workload, start_ns)
        timeline: list[tuple[int, int, RunRecord]] = []
        end = max([r.sent_at for r in records] + [r.result_at for r in records if r.result_at is not None], default=0)
        for rec in records:  # a request that got no result gets an outcome record at the end of the run
            timeline.append((start_ns + _ns(rec.sent_at), 0, rec))
            timeline.append((start_ns + _ns(rec.result_at if rec.result_at is not None else end), 1, rec))
        for stamp, kind, rec in sorted(timeline, key=lambda x: (x[0], x[1])):
            if kind == 0:
                out.task(rec.task, stamp)
                continue
            if rec.result_cdr is not None:
                writer.write(results, stamp, rec.result_cdr)
            info = {"task_id": rec.task.task_id, "agent_id": rec.task.agent_id, "sent_at": rec.sent_at,
                    "result_at": rec.result_at, "has_result": rec.result_cdr is not None, **rec.outcome}
            writer.write(outcomes, stamp, out.string(json.dumps(info)))
    return path


def read_results(path: str | Path, action_file: Path | None = None) -> list[dict]:
    """Outcome records of a run bag in result order; each has its Plan_Result under "result" (None if none came)."""
    store = make_typestore(action_file)
    results: dict[int, list] = {}
    infos: list[tuple[int, dict]] = []
    with Reader(path) as reader:
        for conn, stamp, raw in reader.messages():
            if conn.topic == RESULT_TOPIC:
                results.setdefault(stamp, []).append(store.deserialize_cdr(raw, conn.msgtype))
            elif conn.topic == OUTCOME_TOPIC:
                infos.append((stamp, json.loads(store.deserialize_cdr(raw, conn.msgtype).data)))
    out = []
    for stamp, info in sorted(infos, key=lambda x: x[0]):
        same = results.get(stamp, [])
        match = next((r for r in same if r.request_id == info.get("request_id")), same[0] if same else None)
        if info["has_result"] and match is not None:
            same.remove(match)
            info["result"] = match
        else:
            info["result"] = None
        out.append(info)
    return out


def load_any(path: str | Path) -> Workload:
    """A workload from a YAML file (evaluation.workload.io) or a bag (an .mcap file or a rosbag2 directory)."""
    from timely_llm_ros.evaluation.workload.io import load_workload

    path = Path(path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_workload(path)
    if path.suffix == ".mcap" or (path / "metadata.yaml").is_file():
        return read_bag(path)
    raise ValueError(f"{path}: not a workload file (expected .yaml/.yml, an .mcap bag or a rosbag2 directory)")


def _outcome_line(rec: dict | None) -> tuple[str, float, float]:
    res = rec["result"] if rec else None
    if res is None:
        return "no result", math.nan, math.nan
    return (rec.get("status") or str(res.error_code)), res.response_time, res.utility


def format_comparison(a: list[dict], b: list[dict], name_a: str = "a", name_b: str = "b") -> str:
    """Per goal (matched by task id): status, response time and utility of run a next to run b, then the means."""
    by_a, by_b = {r["task_id"]: r for r in a}, {r["task_id"]: r for r in b}
    lines = [f"{'task id':18s} {'agent':10s} | {'status':>17s} {'resp s':>7s} {'util':>6s} | "
             f"{'status':>17s} {'resp s':>7s} {'util':>6s}", f"{'':29s}| {name_a[-33:]:>33s} | {name_b[-33:]:>33s}"]
    sums = {"a": [], "b": []}
    for task_id in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(task_id), by_b.get(task_id)
        cells = []
        for key, rec in (("a", ra), ("b", rb)):
            status, resp, util = _outcome_line(rec)
            if not math.isnan(util):
                sums[key].append((resp, util))
            cells.append(f"{status[:17]:>17s} {resp:7.3f} {util:6.2f}")
        agent = (ra or rb)["agent_id"]
        lines.append(f"{task_id:18s} {agent:10s} | {cells[0]} | {cells[1]}")
    for key, name in (("a", name_a), ("b", name_b)):
        got = sums[key]
        served = [r for r, _ in got if r >= 0]  # the server reports -1 for a request never served
        if got:
            mean_resp = f"{sum(served) / len(served):.3f} s" if served else "-"
            lines.append(f"{name}: {len(got)} results, {len(served)} served, mean response {mean_resp}, "
                         f"mean utility {sum(u for _, u in got) / len(got):.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: record a workload preset (or a workload YAML) to a bag, summarise a bag, or compare two run bags."""
    p = argparse.ArgumentParser(prog="python -m timely_llm_ros.evaluation.workload.bag", description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="write a workload as an mcap bag of Plan goals")
    rec.add_argument("--preset", default="WID1", help="config/workloads preset name or a spec YAML path")
    rec.add_argument("--workload", default="", help="a saved workload YAML instead of a preset")
    rec.add_argument("--duration", type=float, default=None, help="override the preset's duration (s)")
    rec.add_argument("--seed", type=int, default=None)
    rec.add_argument("--phrasing", choices=("lrtrace", "corpus"), default="lrtrace",
                     help="task text: LRTrace's, or the embedded planner's corpus style (CORPUS_PHRASING)")
    rec.add_argument("--out", required=True, help="bag path to create (a rosbag2 directory holding the .mcap)")
    show = sub.add_parser("show", help="summarise a workload or run bag")
    show.add_argument("bag")
    cmp = sub.add_parser("compare", help="outcomes of two run bags of the same workload side by side")
    cmp.add_argument("a")
    cmp.add_argument("b")
    args = p.parse_args(argv)
    if args.cmd == "compare":
        print(format_comparison(read_results(args.a), read_results(args.b), args.a, args.b))
        return 0
    if args.cmd == "record":
        if args.workload:
            workload = load_any(args.workload)
        else:
            overrides = {k: v for k, v in (("duration_s", args.duration), ("seed", args.seed)) if v is not None}
            workload = generate(load_spec(args.preset, **overrides))
        if args.phrasing == "corpus":
            workload = corpus_phrased(workload)
        if Path(args.out).exists():
            print(f"{args.out} exists; choose a new path", file=sys.stderr)
            return 1
        write_bag(workload, args.out)
        print(f"wrote {len(workload.tasks)} goals of {workload.spec.name} ({workload.events} events, "
              f"{workload.skipped} skipped) over {workload.spec.duration_s:g} s to {args.out}")
        return 0
    workload = read_bag(args.bag)
    results = read_results(args.bag)
    print(f"{args.bag}: {workload.spec.name}, {len(workload.tasks)} goals, {len(results)} results")
    for t in workload.tasks:
        print(f"  {t.arrival:8.3f} s  {t.agent_id:10s} {t.urgency:7s} {t.task}")
    return 0


__all__ = ["CORPUS_PHRASING", "GOAL_TYPE", "RESULT_TYPE", "RunRecord", "corpus_phrased", "format_comparison", "goal_definition", "load_any",
           "make_typestore", "read_bag", "read_results", "result_definition", "write_bag", "write_run_bag"]

if __name__ == "__main__":
    sys.exit(main())
