"""Poisson workload generator over LRTrace traces (TimelyLLM section 6, Table 3).

Events arrive as a Poisson process (rate eps events/s) over duration_s. Each event brings n tasks, n uniform in
1..max_tpe, each of a trace drawn uniformly from trace_ids, all released at the event time. Each task goes to a
distinct free agent of its robot type, chosen at random. An agent is busy from its task's arrival for the trace's
nominal occupancy (nominal_exec_s plus busy_margin_s for planning); a task that finds no free agent is SKIPPED
(not queued: a queued task would change what every policy sees) and counted in Workload.skipped. Occupancy is
decided here, from the traces alone, so every policy replays exactly the same tasks.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from timely_llm_ros.paths import config_dir
from timely_llm_ros.core.request import PlanRequest
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility
from timely_llm_ros.evaluation.workload.lrtrace import Trace, get_trace

# Chat/prose requests (the paper's chatbot class): a person asks the robot; the reply is read aloud sentence by
# sentence (config/skills/chat.yaml). Ids continue after LRTrace's 11.
CHAT_TRACES: dict[int, Trace] = {t.trace_id: t for t in (
    Trace(12, "chat", "chatbot", "normal", "Where can I find a pair of scissors?", "a home office with a desk and shelves",
          "Scissors are usually kept in the top drawer of the desk, next to the stapler and the tape. If they are not "
          "there, look on the second shelf to the left of the window, where the craft box sits. I can also bring "
          "the craft box to you if you tell me where you are sitting right now."),
    Trace(13, "chat", "chatbot", "normal", "What should I pack for a day of hiking?", "a living room; the user is "
          "preparing a backpack", "For a day of hiking you should pack at least two litres of water and some food "
          "with salt and sugar. Bring a light rain jacket, a warm layer and a hat, because the weather in the hills "
          "changes quickly. A small first aid kit, a charged phone and a paper map are worth their weight as well."),
)}


def lookup_trace(trace_id: int) -> Trace:
    """An LRTrace trace (1-11) or a chat trace (CHAT_TRACES)."""
    return CHAT_TRACES.get(int(trace_id)) or get_trace(trace_id)


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of one workload (Table 3 row)."""

    name: str
    eps: float                    # events per second (Poisson rate)
    max_tpe: int                  # maximum tasks per event
    trace_ids: tuple[int, ...]
    agents: int                   # agents per robot type the traces use
    duration_s: float
    seed: int = 0
    prompt_tokens: int = 2884     # prompt length of every request (long in-context prompts)
    busy_margin_s: float = 2.0    # planning allowance added to a task's nominal execution time
    nominal_exec_s: Mapping[str, float] = field(default_factory=lambda: {"drone": 12.0, "arm": 30.0, "chat": 20.0})
    chain: int = 1                # closed loop: an agent runs 1..chain tasks, each sent think_s after the
    think_s: float = 0.0          # previous one REALLY finished (WorkloadTask.after)
    max_new_tokens: int = 200     # plan length cap of every request

    def __post_init__(self) -> None:
        if self.eps <= 0 or self.max_tpe < 1 or self.agents < 1 or self.duration_s <= 0 or not self.trace_ids:
            raise ValueError(f"workload {self.name!r}: need eps > 0, max_tpe >= 1, agents >= 1, duration_s > 0 "
                             "and at least one trace id")
        if self.chain < 1 or self.think_s < 0 or self.max_new_tokens < 1:
            raise ValueError(f"workload {self.name!r}: need chain >= 1, think_s >= 0, max_new_tokens >= 1")
        for tid in self.trace_ids:
            lookup_trace(tid)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WorkloadSpec":
        d = dict(d)
        d["trace_ids"] = tuple(int(t) for t in d["trace_ids"])
        if "chain" in d:
            d["chain"] = int(d["chain"])
        if "nominal_exec_s" in d:
            d["nominal_exec_s"] = {str(k): float(v) for k, v in d["nominal_exec_s"].items()}
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trace_ids"] = list(self.trace_ids)
        d["nominal_exec_s"] = dict(self.nominal_exec_s)
        return d


@dataclass(frozen=True)
class WorkloadTask:
    """One task of a workload: who asks for what, when."""

    task_id: str
    arrival: float
    event: int
    agent_id: str
    trace_id: int
    robot_type: str
    urgency: str
    task: str
    context: str
    plan: str
    prompt_tokens: int
    after: str = ""               # closed loop: submitted gap_s after this task (same agent) really finished
    gap_s: float = 0.0
    max_new_tokens: int = 200     # plan length cap (tokens)

    def to_request(self, classes: Mapping[str, TimeUtility] = DEFAULT_URGENCY_CLASSES,
                   max_new_tokens: int | None = None, arrival: float | None = None) -> PlanRequest:
        """The PlanRequest a simulator submits at `arrival` (plan forced: trace replay)."""
        return PlanRequest(req_id=self.task_id, agent_id=self.agent_id, robot_type=self.robot_type, task=self.task,
                           tuf=classes[self.urgency], arrival=self.arrival if arrival is None else arrival,
                           context=self.context, urgency=self.urgency,
                           max_new_tokens=self.max_new_tokens if max_new_tokens is None else max_new_tokens,
                           forced_plan=self.plan, task_type=str(self.trace_id))


@dataclass
class Workload:
    """A generated workload: its spec, tasks in arrival order, and how many tasks found no free agent."""

    spec: WorkloadSpec
    tasks: list[WorkloadTask]
    skipped: int = 0
    events: int = 0


def generate(spec: WorkloadSpec) -> Workload:
    """Draw a workload from spec (deterministic for a given seed)."""
    rng = random.Random(spec.seed)
    types = sorted({lookup_trace(t).robot_type for t in spec.trace_ids})
    free_at = {rt: [0.0] * spec.agents for rt in types}
    tasks: list[WorkloadTask] = []
    skipped = events = 0
    t = rng.expovariate(spec.eps)
    while t < spec.duration_s:
        n = rng.randint(1, spec.max_tpe)
        for _ in range(n):
            tr = lookup_trace(rng.choice(spec.trace_ids))
            pool = free_at[tr.robot_type]
            free = [i for i, f in enumerate(pool) if f <= t]
            if not free:
                skipped += 1
                continue
            agent = rng.choice(free)
            occupancy = spec.nominal_exec_s.get(tr.robot_type, 10.0) + spec.busy_margin_s
            length = rng.randint(1, spec.chain) if spec.chain > 1 else 1   # (no draw: presets stay as they were)
            pool[agent] = t + length * (occupancy + spec.think_s)
            after = ""
            for j in range(length):
                tid = tr.trace_id if j == 0 else rng.choice([x for x in spec.trace_ids
                                                              if lookup_trace(x).robot_type == tr.robot_type])
                step = lookup_trace(tid)
                task_id = f"{spec.name.lower()}-{len(tasks):04d}"
                tasks.append(WorkloadTask(
                    task_id=task_id, arrival=round(t + j * (occupancy + spec.think_s), 6), event=events,
                    agent_id=f"{tr.robot_type}_{agent}", trace_id=step.trace_id, robot_type=step.robot_type,
                    urgency=step.urgency, task=step.task, context=step.context, plan=step.plan,
                    prompt_tokens=spec.prompt_tokens, after=after, gap_s=spec.think_s if after else 0.0,
                    max_new_tokens=spec.max_new_tokens))
                after = task_id
        events += 1
        t += rng.expovariate(spec.eps)
    tasks.sort(key=lambda task: task.arrival)
    return Workload(spec, tasks, skipped, events)


def load_spec(name_or_path: str | Path, **overrides: Any) -> WorkloadSpec:
    """A workload spec from config/workloads/<name>.yaml (e.g. WID1) or a path; overrides replace fields."""
    path = Path(name_or_path)
    if not path.suffix:
        path = config_dir() / "workloads" / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (config_dir() / "workloads").glob("*.yaml"))
        raise FileNotFoundError(f"no workload spec {name_or_path!r} ({path}); known presets: {known}")
    with open(path, encoding="utf-8") as f:
        d = yaml.safe_load(f)
    d.update(overrides)
    return WorkloadSpec.from_dict(d)


def preset(name: str, **overrides: Any) -> Workload:
    """Generate a preset workload (WID1, WID2, WID3), optionally overriding spec fields (seed, duration_s...)."""
    return generate(load_spec(name, **overrides))


def burst(seed: int = 0, arms: tuple[int, int] = (16, 20), urgent: tuple[int, int] = (20, 30),
          arm_window_s: float = 0.3, burst_at_s: float = 2.0, burst_window_s: float = 0.1,
          prompt_tokens: int = 2884) -> Workload:
    """The urgent-burst shape: 16-20 arm plans (traces 9-11) arrive within arm_window_s and are generating when
    20-30 urgent drone requests (traces 6-8) arrive within burst_window_s at burst_at_s (counts drawn per seed)."""
    rng = random.Random(seed)
    n_arm, n_urgent = rng.randint(*arms), rng.randint(*urgent)
    spec = WorkloadSpec(name="BURST", eps=1.0 / burst_at_s, max_tpe=max(n_arm, n_urgent), trace_ids=(6, 7, 8, 9, 10, 11),
                        agents=max(n_arm, n_urgent), duration_s=burst_at_s + burst_window_s, seed=seed,
                        prompt_tokens=prompt_tokens)
    rows = [(rng.uniform(0.0, arm_window_s), rng.choice((9, 10, 11)), 0) for _ in range(n_arm)]
    rows += [(burst_at_s + rng.uniform(0.0, burst_window_s), rng.choice((6, 7, 8)), 1) for _ in range(n_urgent)]
    rows.sort()
    tasks, counters = [], {"arm": 0, "drone": 0}
    for i, (t, tid, event) in enumerate(rows):
        tr = lookup_trace(tid)
        agent = counters[tr.robot_type]
        counters[tr.robot_type] += 1
        tasks.append(WorkloadTask(task_id=f"burst-{i:04d}", arrival=round(t, 6), event=event,
                                  agent_id=f"{tr.robot_type}_{agent}", trace_id=tid, robot_type=tr.robot_type,
                                  urgency=tr.urgency, task=tr.task, context=tr.context, plan=tr.plan,
                                  prompt_tokens=prompt_tokens))
    return Workload(spec, tasks, 0, 2)
