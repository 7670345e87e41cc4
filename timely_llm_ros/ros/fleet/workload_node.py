"""fleet_workload: drives a fleet of agents that send Plan goals and reports every outcome.

Closed loop (default, workload_file ""): each agent sends its tasks one after another, the next when the previous
plan has been executed. contention_agent names an agent whose first goal is held back until every other agent's
first plan is generating (in the engine, by its Plan feedback), so it arrives while they generate (the demo's moment
of contention). events_csv records what the run looked like from here (ros/fleet/workload_timeline.py) for the demo's
timeline.
Replay (workload_file = a workload YAML or an .mcap bag of Plan goals): ros/fleet/workload_replay.py.
Before its first goal the node waits (executors_wait_s) until the server's latched state (server_state_topic)
no longer lists any robot it drives among the executors it has yet to meet: a first goal sent earlier waits for
that first contact on its own clock, and an urgent one may be dropped for it. ros2 launch and timely_bringup
get the same order this way.
Closed loop, a task with a goal condition (``goal:``): its robot's simulated scene is set to the one its context
describes before the goal is sent, and the plan's result is judged in it (judge_goals; ros/fleet/scene_staging.py).
Both modes print a table of every request at the end and exit 0 if every goal sent got a result
(whatever its error code) and, unless stopped, at least one plan was executed, 1 otherwise (a run that executed no
plan says how its goals ended). On SIGINT/SIGTERM no new goal is sent; goals in flight get
`shutdown_grace_s` to end (a server stopped at the same time answers them SERVER_SHUTDOWN), then the
rest are cancelled, and the table is printed as usual.
"""
from __future__ import annotations

import contextlib
import csv
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import rclpy
import yaml
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile

from timely_llm_ros.action import Plan
from timely_llm_ros.msg import SchedulerState

from timely_llm_ros.core.robot_types import load_robot_types
from timely_llm_ros.evaluation.workload.bag import load_any
from timely_llm_ros.evaluation.workload.generator import Workload
from timely_llm_ros.paths import config_dir
from timely_llm_ros.ros.action_client import ActionClient, deep_queues
from timely_llm_ros.ros.fleet.outcome_table import NOT_SENT, OutcomeRow, code_name, format_table, no_plan_summary
from timely_llm_ros.ros.fleet.scene_staging import NO_GOAL, NOT_JUDGED, SceneStager
from timely_llm_ros.ros.spin import NodeStartError, spin_node
from timely_llm_ros.ros.fleet.workload_replay import ReplayRun
from timely_llm_ros.ros.fleet.workload_timeline import TimelineRecorder


STATE_SILENCE_S = 5.0   # no server state this long: the server publishes none under server_state_topic


def executors_unmet(agents: set[str], pending: list[str] | None) -> list[str] | None:
    """The robots of ``agents`` whose executors the server has yet to meet; None before any server state."""
    return None if pending is None else sorted(agents & {p.strip("/") for p in pending})


@dataclass
class AgentSpec:
    name: str
    robot_type: str
    tasks: list[dict] = field(default_factory=list)


def parse_agents(entries: list[str], tasks: dict, per_agent: int) -> list[AgentSpec]:
    """'drone_1:drone' entries -> agents, each given `per_agent` tasks of its robot type, dealt in the file's order:
    the j-th agent of a type takes tasks j*per_agent onwards, so no task repeats until the type's list runs out."""
    agents = []
    dealt: dict[str, int] = {}          # robot type -> tasks dealt so far
    for entry in entries:
        name, _, robot_type = entry.partition(":")
        if not robot_type:
            raise ValueError(f"agent entry {entry!r} must look like 'drone_1:drone'")
        pool = tasks.get(robot_type) or []
        if not pool:
            raise ValueError(f"no tasks for robot type {robot_type!r} in the tasks file (it has: "
                             f"{', '.join(map(str, tasks)) or 'none'})")
        start = dealt.get(robot_type, 0)
        chosen = [pool[(start + k) % len(pool)] for k in range(per_agent)]
        dealt[robot_type] = start + per_agent
        agents.append(AgentSpec(name, robot_type, chosen))
    return agents


@contextlib.contextmanager
def _parameter(name: str) -> Iterator[None]:
    """A file or an entry the node cannot use, raised inside, becomes a NodeStartError naming the parameter."""
    try:
        yield
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise NodeStartError(f"parameter {name}: {exc}") from None


class FleetWorkloadNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("fleet_workload", **kwargs)
        d = ParameterDescriptor
        self.agent_entries = list(self.declare_parameter(
            "agents", ["drone_1:drone"], d(description="agents as 'namespace:robot_type'")).value)
        self.per_agent = self.declare_parameter("requests_per_agent", 2, d(description="tasks each agent sends")).value
        tasks_file = self.declare_parameter(
            "tasks_file", "", d(description="YAML of tasks per robot type; empty = config/fleet_tasks.yaml")).value
        self.stagger_s = self.declare_parameter(
            "stagger_s", 0.3, d(description="delay between agents' first requests")).value
        self.server_timeout_s = self.declare_parameter(
            "server_timeout_s", 60.0, d(description="wait this long for the /plan server")).value
        self.results_csv = self.declare_parameter(
            "results_csv", "", d(description="also write the outcome table to this CSV file")).value
        workload_file = self.declare_parameter(
            "workload_file", "", d(description="replay this workload (YAML or .mcap bag of Plan goals) at its "
                                               "recorded times; empty = closed-loop fleet")).value
        self.record_bag = self.declare_parameter(
            "record_bag", "", d(description="write the goals as sent and their results to this new mcap bag")).value
        self.result_timeout_s = self.declare_parameter(
            "result_timeout_s", 600.0, d(description="replay: wait this long after the last goal for results")).value
        self.shutdown_grace_s = self.declare_parameter(
            "shutdown_grace_s", 8.0, d(description="on SIGINT/SIGTERM: wait this long for the results of goals in "
                                                   "flight, then cancel them")).value
        self.executors_wait_s = self.declare_parameter(
            "executors_wait_s", 30.0, d(description="before the first goal, wait at most this long until the server "
                                                     "has met the executors of the robots this node drives; 0 = "
                                                     "do not wait")).value
        self.contention_agent = self.declare_parameter(
            "contention_agent", "", d(description="closed loop: this agent's first goal waits until every other "
                                                   "agent's first plan is generating, so it arrives while they "
                                                   "generate; empty = none")).value
        self.events_csv = self.declare_parameter(
            "events_csv", "", d(description="closed loop: write what the run looked like from here (goals sent, "
                                             "Plan feedback and results, each robot's executor status) to this "
                                             "CSV for tools.demo_timeline; empty = none")).value
        judge_goals = self.declare_parameter(
            "judge_goals", True, d(description="closed loop: before each task with a goal condition (goal: in the "
                                               "tasks file), set its robot's simulated scene (<agent>/executor "
                                               "parameter scene) to the one its context describes, and judge the "
                                               "plan's result in it (the table's achieved column)")).value
        skills_dir = self.declare_parameter(
            "skills_dir", "", d(description="a team's folder of skill sets (skills/*.yaml), as given to the server: "
                                            "staged scenes read each robot type's contexts with its skill set's own "
                                            "labels (place_labels, fixed_place_labels); empty = the package's")).value
        self.server_state_topic = self.declare_parameter(
            "server_state_topic", "timely_server/state",
            d(description="the server's latched SchedulerState topic (its executors_pending)")).value
        self._pending: list[str] | None = None     # the server's executors_pending, None before its first state
        self.create_subscription(SchedulerState, self.server_state_topic, self._on_state,
                                 QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL),
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.stop = threading.Event()      # replaced by spin_node's stop flag
        self._stop_at: float | None = None
        # a file or an entry it cannot use ends the node with one line naming the parameter (spin_node)
        self.agents: list[AgentSpec] = []
        with _parameter("workload_file"):
            self.workload: Workload | None = load_any(workload_file) if workload_file else None
        if self.workload is None:
            path = Path(tasks_file) if tasks_file else config_dir() / "fleet_tasks.yaml"
            with _parameter("tasks_file"):
                self.tasks = yaml.safe_load(path.read_text()) or {}
                if not isinstance(self.tasks, dict):
                    raise ValueError(f"{path} must map robot types to lists of tasks")
            with _parameter("agents"):
                self.agents = parse_agents(self.agent_entries, self.tasks, int(self.per_agent))
        # goals are sent from the agent threads (our ActionClient makes that safe); a replayed burst gets responses
        # and feedback of many goals at once
        self.client = ActionClient(self, Plan, "plan", callback_group=MutuallyExclusiveCallbackGroup(),
                                   **deep_queues())
        self.rows: list[OutcomeRow] = []
        self._rows_lock = threading.Lock()
        names = [a.name for a in self.agents]
        if self.workload is None and self.contention_agent and self.contention_agent not in names:
            raise NodeStartError(f"parameter contention_agent: {self.contention_agent!r} is not one of the agents "
                                 f"({', '.join(names)})")
        # the agents whose first plan is generating (or has a segment, or has ended); the contention agent waits for
        # the rest
        self._generating: set[str] = set()
        self._others_generating = threading.Event()
        self._sent_by_agent: dict[str, int] = {}
        self.timeline = TimelineRecorder(self, names) if self.events_csv and self.workload is None else None
        self.stager = None
        if judge_goals and self.workload is None:
            with _parameter("skills_dir"):
                sets = load_robot_types(skills_dir or None).skill_sets
            self.stager = SceneStager(self, names, {name: s.context_labels for name, s in sets.items()})

    def _on_state(self, msg: SchedulerState) -> None:
        self._pending = list(msg.executors_pending)

    def driven_agents(self) -> set[str]:
        """The robots this node sends goals for."""
        if self.workload is not None:
            return {t.agent_id.strip("/") for t in self.workload.tasks}
        return {a.name.strip("/") for a in self.agents}

    def wait_for_executors(self) -> None:
        """Wait (executors_wait_s at most) until the server has met the executors of the robots this node drives;
        go on with a warning that says why after the wait, or at once if the server publishes no state."""
        wait_s, log = float(self.executors_wait_s), self.get_logger()
        if wait_s <= 0:
            return
        agents, start = self.driven_agents(), time.monotonic()
        said = None
        while not self.stopping():
            waited = time.monotonic() - start
            unmet = executors_unmet(agents, self._pending)
            if unmet == []:
                if said:
                    log.info(f"the server has met every executor of this fleet (waited {waited:.1f} s)")
                return
            if unmet is None and waited > min(STATE_SILENCE_S, wait_s):
                log.warning(f"no server state on {self.server_state_topic!r} within {waited:.0f} s: sending without "
                            "waiting for the server to meet the robots' executors (set server_state_topic to the "
                            "server's <node name>/state, or executors_wait_s:=0.0)")
                return
            if waited > wait_s:
                log.warning(f"the server has not met the executors of {', '.join(unmet)} after {wait_s:g} s; "
                            "sending anyway (their first goals wait for that first contact; is each robot's "
                            "robot_executor running?)")
                return
            if unmet and unmet != said:
                log.info(f"waiting for the server to meet the executors of {', '.join(unmet)}")
                said = unmet
            time.sleep(0.05)

    def shutdown(self) -> None:
        """Free what destroy_node does not (called by spin_node after the executor stopped)."""
        self.client.destroy()

    def stopping(self) -> bool:
        """True once a stop was requested; remembers when."""
        if self.stop.is_set() and self._stop_at is None:
            self._stop_at = time.monotonic()
        return self.stop.is_set()

    def _wait(self, future, timeout: float):
        """Block until an rclpy future is done (the executor spins in another thread); None at the timeout, or as
        soon as a stop is requested (the server may be stopping too, and never answer)."""
        end = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > end or not rclpy.ok() or self.stopping():
                return None
            time.sleep(0.01)
        return future.result()

    def give_up(self) -> bool:
        """True once a stop was requested and the grace period for results in flight is over."""
        return self.stopping() and time.monotonic() > self._stop_at + float(self.shutdown_grace_s)

    def await_result(self, handle, timeout: float):
        """The wrapped result of an accepted goal; after a stop and its grace period, cancel it and wait a
        little for the CANCELLED result. None if none came."""
        future = self.client.result_async(handle)
        end = time.monotonic() + timeout
        cancelled_at = None
        while not future.done():
            now = time.monotonic()
            if now > end or (cancelled_at is not None and now > cancelled_at + 3.0):
                if cancelled_at is None:    # reported "no result": the server should not go on planning for it
                    handle.cancel_goal_async()
                return None
            if cancelled_at is None and self.give_up():
                handle.cancel_goal_async()
                cancelled_at = now
            time.sleep(0.01)
        return future.result()

    def run(self) -> int:
        log = self.get_logger()
        end = time.monotonic() + float(self.server_timeout_s)
        while not self.client.wait_until_answering(timeout_sec=0.2):   # handshake: no goal response lost
            if self.stopping():
                return self.report([])
            if time.monotonic() > end:
                log.error("no plan action server (relative to this node's namespace); start timely_server first")
                return 1
        self.wait_for_executors()
        if self.timeline is not None:
            unheard = self.timeline.wait_for_robots(max(float(self.executors_wait_s), 1.0), self.stopping)
            if unheard:
                log.warning(f"no executor status from {', '.join(unheard)} yet: the timeline may miss their first "
                            "segments")
        if self.workload is not None:
            return ReplayRun(self, self.workload).run()
        log.info(f"fleet of {len(self.agents)} agents, {sum(len(a.tasks) for a in self.agents)} requests")
        threads = []
        for i, agent in enumerate(self.agents):
            t = threading.Thread(target=self._agent_loop, args=(agent, i * float(self.stagger_s)))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        return self.report(self.rows)

    def report(self, rows: list[OutcomeRow]) -> int:
        """Print the outcome table (and CSV); 0 if every request got a result and, unless the run was stopped, at
        least one plan was executed (when any goal was sent)."""
        rows = sorted(rows, key=lambda r: r.sent_at)
        print(format_table(rows), flush=True)
        if self.results_csv:
            with open(self.results_csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(OutcomeRow.__dataclass_fields__))
                w.writeheader()
                for r in rows:
                    w.writerow(r.__dict__)
        if self.timeline is not None:
            count = self.timeline.write(self.events_csv)
            self.get_logger().info(f"wrote {count} timeline events to {self.events_csv}")
        stopped = self.stop.is_set()   # a run stopped early ends its goals SERVER_SHUTDOWN or cancelled: no failure
        if rows and not stopped and not any(r.status == "ok" for r in rows):
            self.get_logger().error(f"no plan was executed: {no_plan_summary(rows)}")
            return 1
        return 0 if all(r.status != "no result" for r in rows) else 1

    def _agent_loop(self, agent: AgentSpec, delay: float) -> None:
        if self.stop.wait(delay):
            return
        held = agent.name == self.contention_agent
        if held:
            self._plan_generating(agent.name)   # an agent does not wait for itself
            while not self._others_generating.wait(0.05):
                if self.stopping():
                    return
            self.get_logger().info(f"{agent.name}: the other robots' first plans are generating; sending its first "
                                   "goal now")
        for task in agent.tasks:
            if self.stopping():
                return
            self._send(agent, task, held)
            held = False

    def _plan_generating(self, agent: str) -> None:
        """Note that this agent's first plan is generating (or has a segment, or has ended)."""
        with self._rows_lock:
            self._generating.add(agent)
            if len(self._generating) == len(self.agents):
                self._others_generating.set()

    def _send(self, agent: AgentSpec, task: dict, held: bool = False) -> None:
        log = self.get_logger()
        goal = Plan.Goal(agent_id=agent.name, robot_type=agent.robot_type, task=task["task"],
                         context=task.get("context", ""), urgency_class=task.get("urgency", "normal"))
        with self._rows_lock:
            self._sent_by_agent[agent.name] = self._sent_by_agent.get(agent.name, 0) + 1
            label = f"{agent.name}#{self._sent_by_agent[agent.name]}"
        staged = (self.stager.stage(agent.name, agent.robot_type, task, self._wait, self.stopping)
                  if self.stager is not None else None)
        row = OutcomeRow(agent=agent.name, robot_type=agent.robot_type, task=task["task"],
                         urgency=goal.urgency_class, sent_at=time.monotonic(),
                         achieved=NO_GOAL if "goal" not in task else NOT_JUDGED)
        if self.stopping():     # stopped while its scene was being set: the goal never leaves this node
            row.status, row.message = NOT_SENT, "stopped before the goal was sent"
            with self._rows_lock:
                self.rows.append(row)
            log.info(f"{agent.name}: '{row.task}' not sent: stopped")
            return
        if self.timeline is not None:
            self.timeline.record(agent.name, label, "sent", goal.urgency_class)
            if held:
                self.timeline.record(agent.name, label, "contention", task["task"])
        sent = self.client.send_goal_async(goal, feedback_callback=lambda fb: self._on_feedback(agent, label, fb))
        handle = self._wait(sent, 30)
        if handle is None:      # reported "no result": a goal response that comes later is cancelled at once
            sent.add_done_callback(_cancel_if_accepted)
        if handle is None or not handle.accepted:
            row.status = "no result"
            row.message = ("goal not accepted by /plan" if handle is not None else
                           "stopped before /plan answered the goal" if self.stopping() else
                           "no goal response from /plan in 30 s")
        else:
            wrapped = self.await_result(handle, 600)
            if wrapped is None:
                row.status, row.message = "no result", "timed out waiting for the result"
            else:
                res = wrapped.result
                row.fill(res, code_name(res.error_code))
                if staged is not None:
                    row.achieved = staged.judge(res, "" if row.status == "ok" else f"{row.status} {row.message}")
                if self.timeline is not None:
                    self.timeline.record(agent.name, label, "result", row.status, res.request_id)
        self._plan_generating(agent.name)   # ended: nothing more to wait for from this agent
        with self._rows_lock:
            self.rows.append(row)
        log.info(f"{agent.name}: {row.status} '{row.task}' segments={row.segments} "
                 f"response={row.response_time:.2f}s waiting={row.waiting_time:.2f}s utility={row.utility:.2f} "
                 f"achieved={row.achieved}")

    def _on_feedback(self, agent: AgentSpec, label: str, msg) -> None:
        fb = msg.feedback
        if self.timeline is not None:
            self.timeline.record(agent.name, label, "segment" if fb.new_segment else "state",
                                 fb.segment.index if fb.new_segment else fb.state, fb.request_id)
        if fb.new_segment or fb.state == "generating":
            self._plan_generating(agent.name)
        if fb.new_segment:
            self.get_logger().info(f"{agent.name}: segment {fb.segment.index} -> robot: {fb.segment.text.strip()!r}")




def _cancel_if_accepted(future) -> None:
    """Done callback of a goal response nobody waits for any more: cancel the goal if the server took it."""
    handle = future.result() if not future.cancelled() and future.exception() is None else None
    if handle is not None and handle.accepted:
        handle.cancel_goal_async()


def _run(node: FleetWorkloadNode, stop) -> int:
    node.stop = stop.event
    return node.run()


def main(args: list[str] | None = None) -> int:
    return spin_node(FleetWorkloadNode, 4, args, work=_run)


if __name__ == "__main__":
    sys.exit(main())
