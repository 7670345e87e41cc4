"""The event loop serving a workload: PlanScheduler + an engine + simulated robots, on a virtual or a wall clock.

Tasks are submitted at their arrival times. Each SegmentReady reaches its robot (agent) after the network delay;
the robots follow the robot-side rules of core/execution (RobotQueue: one plan at a time, a plan's segments in
order, the rest of a plan NOT_RUN after a failure, PREEMPTED under urgent_preempts) and run a segment for
ExecTimeModel.sample_time (seeded per request and segment, so every policy sees the same robot times; optionally
scaled by time_scale); they report start and end back to the scheduler. A preempted segment ends at the end of
the skill it runs; a withdrawn one (its plan ended) stops when the withdrawal arrives.

Default (discrete-event simulation): a SimEngine on a VirtualClock; each engine step advances the virtual clock
by its modelled time and, when idle, the clock jumps to the next event. Real time: pass a real engine (e.g. the
TransformersEngine) and a WallClock (the default clock for an injected engine); engine steps are real forward
passes, robot executions are timed events on the wall clock and waiting for the next event sleeps. The core never
imports torch: the engine is passed in.
"""
from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

from timely_llm_ros.core.composition import build_scheduler
from timely_llm_ros.core.engine import Engine, weak_method
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.exec_time import ExecTimeModel, load_exec_models
from timely_llm_ros.core.execution import Ended, RobotQueue, SegmentStatus
from timely_llm_ros.core.policies.base import Policy
from timely_llm_ros.core.prompting import PromptEncoder
from timely_llm_ros.core.request import RequestState, Segment
from timely_llm_ros.core.scheduler import (RequestFinished, RequestOutcome, SchedulerConfig, SegmentReady,
                         SegmentsWithdrawn)
from timely_llm_ros.core.skills import SkillSet, load_skill_sets
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadTask
from timely_llm_ros.evaluation.sim.clock import LoopClock, VirtualClock, WallClock
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine

_ARRIVE, _REACH, _EXEC_END, _WITHDRAW = 0, 1, 2, 3
_ENDED_AS = {Ended.NOT_RUN: SegmentStatus.NOT_RUN, Ended.PREEMPTED: SegmentStatus.PREEMPTED}


@dataclass(frozen=True)
class ExecNoise:
    """How real robot execution deviates from the execution-time model (closed-loop simulation).

    factor: each segment's sampled time is multiplied by a factor drawn per segment: "none" (1), "uniform"
    (low..high), "lognormal" (median `median`, log-sd `sigma`). failure_rate: probability that a segment fails,
    after a uniform 10-100% of its time; the robot then drops the segments queued behind it.
    """

    factor: str = "none"
    low: float = 1.0
    high: float = 1.0
    median: float = 1.0
    sigma: float = 0.0
    failure_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.factor not in ("none", "uniform", "lognormal"):
            raise ValueError(f"exec noise factor must be none, uniform or lognormal, got {self.factor!r}")
        if not 0.0 <= self.failure_rate <= 1.0 or self.low <= 0 or self.high < self.low or self.median <= 0:
            raise ValueError("exec noise needs 0 <= failure_rate <= 1, 0 < low <= high, median > 0")

    def draw(self, rng: random.Random) -> tuple[float, float | None]:
        """(time factor, fraction of the time after which it fails or None)."""
        if self.factor == "uniform":
            f = rng.uniform(self.low, self.high)
        elif self.factor == "lognormal":
            f = self.median * math.exp(rng.gauss(0.0, self.sigma))
        else:
            f = 1.0
        fails = rng.random() < self.failure_rate
        return f, (rng.uniform(0.1, 1.0) if fails else None)


@dataclass(frozen=True)
class _Run:
    """The segment a simulated robot runs: when it ends and how, and its skills' ends (a preemption waits for one)."""

    req_id: str
    index: int
    end: float
    boundaries: list[float]
    ended: Ended
    token: int             # its pending end event (a stopped run's event is stale)


@dataclass
class SimResult:
    """Outcomes of one simulated run and what it cost."""

    policy: str
    max_batch: int
    outcomes: list[RequestOutcome]
    sim_time_s: float
    engine_steps: int
    wall_s: float
    select_s: list[float] = field(default_factory=list)   # wall time of each policy.select call


class Simulator:
    """Runs one policy over a list of workload tasks on an engine (modelled or real) and modelled robots.

    engine None: a SimEngine of `latency` on a VirtualClock (needs latency). An injected engine runs on `clock`
    (default a WallClock, i.e. real time); a SimEngine injected this way must share that clock. Prompts of a
    SimEngine are padded to each task's prompt_tokens; a real engine gets the real tokenized prompt.
    forced_plans: replay each task's recorded plan (trace replay); False lets the engine generate the plan.
    prompts: the model's prompt format on a real engine (engine/model_setup.py; default the raw planner format).
    plan_rule: each robot's rule for a second plan (queue | urgent_preempts), by agent id.
    robots: "per_task" (default): every task gets a robot of its own, and a closed-loop chain keeps its robot for its
    next task — the paper's setting, where each task goes to a free agent of a pool sized so that one is free (the
    workload's agent ids only decided which tasks found none and were skipped); "named": the workload's agent ids
    are the robots, so a task whose agent still runs an earlier plan waits for it (one plan per robot).
    cached_prefix_tokens: per robot type, the prompt tokens a prefix cache supplies on a modelled engine (a chat
    model's system prompt differs in length by robot type); types left out get the latency model's figure.
    """

    def __init__(self, policy: Policy, latency: LatencyModel | None, skill_sets: Mapping[str, SkillSet] | None = None,
                 exec_models: Mapping[str, ExecTimeModel] | None = None,
                 urgency_classes: Mapping[str, TimeUtility] = DEFAULT_URGENCY_CLASSES, seed: int = 0,
                 on_finished: Callable[[RequestOutcome], None] | None = None, *, engine: Engine | None = None,
                 clock: LoopClock | None = None, time_scale: float = 1.0, forced_plans: bool = True,
                 network_delay_s: float | None = None, step_token_budget: int | None = None,
                 exec_noise: ExecNoise | None = None, scheduler_config: SchedulerConfig | None = None,
                 prompts: PromptEncoder | None = None,
                 plan_rule: Callable[[str], str] = lambda agent: "queue", robots: str = "per_task",
                 cached_prefix_tokens: Mapping[str, int] | None = None) -> None:
        if robots not in ("per_task", "named"):
            raise ValueError(f"robots must be 'per_task' or 'named', got {robots!r}")
        if engine is None and latency is None:
            raise ValueError("Simulator needs a latency model for its SimEngine, or an engine")
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0 (got {time_scale})")
        self.policy = policy
        self.latency = latency
        self.skill_sets = dict(skill_sets) if skill_sets is not None else load_skill_sets()
        self.exec_models = dict(exec_models) if exec_models is not None else load_exec_models()
        self.urgency_classes = urgency_classes
        self.seed = seed
        self.on_finished = on_finished
        self.time_scale = time_scale
        self.forced_plans = forced_plans
        if network_delay_s is None:
            network_delay_s = latency.network_delay_s if latency is not None else 0.0
        self.network_delay_s = network_delay_s
        if engine is None:
            self.clock: LoopClock = clock if clock is not None else VirtualClock()
            engine = SimEngine(latency, self.clock, step_token_budget=step_token_budget)
        else:
            self.clock = clock if clock is not None else WallClock()
        self.engine = engine
        config = replace(scheduler_config or SchedulerConfig(), network_delay_s=network_delay_s)
        self.exec_noise = exec_noise or ExecNoise()
        # modelled or real, the engine is driven as the server drives it (core/composition.py): a policy that
        # evicts prompt KV (TimeBill) evicts on a SimEngine too
        self.scheduler = build_scheduler(engine, policy, self.skill_sets, self.exec_models, self.clock, config,
                                         plan_rule, prompts=prompts)
        self.plan_rule = plan_rule
        self.robots = robots
        self.cached_prefix_tokens = dict(cached_prefix_tokens or {})
        self._followers: dict[str, list[WorkloadTask]] = {}   # closed loop: tasks waiting for a task's end
        self._events: list[tuple[float, int, int, tuple]] = []
        self._seq = itertools.count()
        self._select_s: list[float] = []
        self._robots: dict[str, RobotQueue[Segment]] = {}     # agent -> what its robot holds
        self._runs: dict[str, _Run] = {}                      # agent -> the segment its robot runs
        self._agent: dict[str, str] = {}                      # request id -> agent
        self._robot_type: dict[str, str] = {}
        self._rejected: list[RequestOutcome] = []   # refused by submit (e.g. prompt too long)
        self._arrivals: list[tuple[float, int, WorkloadTask]] = []   # arrivals not yet submitted, in time order
        if isinstance(engine, SimEngine):     # an arrival may cut a modelled step short at a layer boundary
            engine.interrupt_at = weak_method(self._first_interrupt)
        elif engine.capabilities.interruptible:            # a real engine asks between its layers (wall clock)
            engine.interrupt_check = weak_method(self._due_interrupt)

    def run(self, tasks: Workload | Iterable[WorkloadTask], max_sim_s: float = 1e7) -> SimResult:
        """Simulate until every task has finished (or max_sim_s of simulated time passed)."""
        if isinstance(tasks, Workload):
            tasks = tasks.tasks
        for task in tasks:
            if task.after:
                self._followers.setdefault(task.after, []).append(task)
            else:
                self._push(task.arrival, _ARRIVE, (task,))
        self._time_select()
        if isinstance(self.clock, WallClock):
            self.clock.reset()  # arrivals are offsets from the start of the run
        wall0 = time.perf_counter()
        sched = self.scheduler
        try:
            while (self._events or sched.busy()) and self.clock.now < max_sim_s:
                self._process_due()
                if sched.busy():
                    before = sched.steps
                    self._handle(sched.step())
                    if sched.steps != before or not sched.busy():
                        continue
                if not self._events:
                    break  # nothing will ever change: busy but the policy picks nothing
                self.clock.advance_to(min(self._events[0][0], max_sim_s))
            for req_id in [g.req_id for g in sched.generations()]:  # cut off: count them, never hide them
                self._handle(sched.cancel(req_id, ErrorCode.CANCELLED,
                                          f"the run ended at {self.clock.now:.1f} s before this request finished"))
        finally:
            vars(self.policy).pop("select", None)  # undo _time_select
        return SimResult(self.policy.name, self.policy.max_batch, [*sched.outcomes.values(), *self._rejected],
                         self.clock.now, sched.steps, time.perf_counter() - wall0, self._select_s)

    # internals
    def _push(self, t: float, kind: int, payload: tuple) -> None:
        seq = next(self._seq)
        heapq.heappush(self._events, (t, seq, kind, payload))
        if kind == _ARRIVE:
            bisect.insort(self._arrivals, (t, seq, payload[0]), key=lambda a: a[:2])

    def _first_interrupt(self, start: float, end: float) -> float | None:
        """SimEngine.interrupt_at: the first arrival strictly inside (start, end) that interrupts the step."""
        i = bisect.bisect_right(self._arrivals, start, key=lambda a: a[0])
        for t, _, task in itertools.islice(self._arrivals, i, None):
            if t >= end:
                break
            if self._interrupts(task, t, t):
                return t
        return None

    def _due_interrupt(self) -> bool:
        """A real engine's interrupt_check: has an arrival that interrupts the step in flight come due?"""
        now = self.clock.now
        return any(self._interrupts(task, t, now) for t, _, task in itertools.takewhile(
            lambda a: a[0] <= now, self._arrivals))

    def _interrupts(self, task: WorkloadTask, arrival: float, now: float) -> bool:
        return self.scheduler.interrupts_step(task.to_request(self.urgency_classes, arrival=arrival), now)

    def _process_due(self) -> None:
        while self._events and self._events[0][0] <= self.clock.now:
            t, seq, kind, payload = heapq.heappop(self._events)
            if kind == _ARRIVE:
                task: WorkloadTask = payload[0]
                self._arrivals.pop(bisect.bisect_left(self._arrivals, (t, seq), key=lambda a: a[:2]))
                self._submit(task, t)
            elif kind == _REACH:
                self._reach(t, *payload)
            elif kind == _EXEC_END:
                self._run_ended(t, *payload)
            else:
                self._withdrawn(t, *payload)

    def _submit(self, task: WorkloadTask, t: float | None = None) -> None:
        if self.engine.capabilities.set_prompt_tokens:  # modelled engine: LRTrace prompts are long in-context prompts
            self.engine.set_prompt_tokens(task.task_id, task.prompt_tokens, self.cached_prefix_tokens.get(task.robot_type))
        self._robot_type[task.task_id] = task.robot_type
        robot = task.agent_id
        if self.robots == "per_task":      # a chain's next task keeps its robot; any other task gets its own
            robot = self._agent.get(task.after) or f"{task.agent_id}#{task.task_id}"
        self._agent[task.task_id] = robot
        req = task.to_request(self.urgency_classes, arrival=t)
        req.agent_id = robot
        if not self.forced_plans:
            req.forced_plan = None
        try:
            self._handle(self.scheduler.submit(req))
        except RequestError as exc:  # rejected at the door: an outcome like any other
            outcome = RequestOutcome(req, RequestState.FAILED, exc.code, str(exc), "", [], 0,
                                     finished_at=self.clock.now)
            self._rejected.append(outcome)
            if self.on_finished is not None:
                self.on_finished(outcome)

    def _handle(self, events: Sequence) -> None:
        for ev in events:
            if isinstance(ev, SegmentReady):      # it reaches the robot after the network delay
                self._push(self.clock.now + self.network_delay_s, _REACH, (ev.req_id, ev.segment, ev.preempts))
            elif isinstance(ev, SegmentsWithdrawn):
                self._push(self.clock.now + self.network_delay_s, _WITHDRAW, (ev.req_id, ev.indices))
            elif isinstance(ev, RequestFinished):
                for nxt in self._followers.pop(ev.req_id, []):   # closed loop: the robot's next task
                    self._push(self.clock.now + nxt.gap_s, _ARRIVE, (nxt,))
                if self.on_finished is not None:
                    self.on_finished(ev.outcome)

    # the robots (core/execution's RobotQueue rules)
    def _robot(self, agent: str) -> RobotQueue[Segment]:
        robot = self._robots.get(agent)
        if robot is None:
            robot = self._robots[agent] = RobotQueue(self.plan_rule(agent))
        return robot

    def _reach(self, t: float, req_id: str, seg: Segment, preempts: bool) -> None:
        agent = self._agent[req_id]
        robot = self._robot(agent)
        arrival = robot.arrive(req_id, seg.index, seg, preempts)
        if arrival.refused is not None:
            self._report_end(t, req_id, seg.index, arrival.refused.ended, arrival.refused.message)
        for waiting in arrival.preempted:
            robot.end(arrival.preempted_plan, waiting.index, Ended.PREEMPTED)
            self._report_end(t, arrival.preempted_plan, waiting.index, Ended.PREEMPTED, f"preempted by {req_id}")
        run = self._runs.get(agent)
        if arrival.stop is not None and run is not None:   # it stops at the end of the skill it runs
            end = next((b for b in run.boundaries if b >= t), run.end)
            if end < run.end:
                token = next(self._seq)
                self._runs[agent] = _Run(run.req_id, run.index, end, run.boundaries, Ended.PREEMPTED, token)
                self._push(end, _EXEC_END, (agent, token))
        self._start_next(t, agent)

    def _start_next(self, t: float, agent: str) -> None:
        robot = self._robots[agent]
        if agent in self._runs:
            return
        seg = robot.next()
        if seg is None:
            return
        req_id = robot.running.plan
        end, boundaries, ended = self._run_segment(t, req_id, seg)
        token = next(self._seq)
        self._runs[agent] = _Run(req_id, seg.index, end, boundaries, ended, token)
        self._handle(self.scheduler.on_execution_started(req_id, seg.index, t))
        self._push(end, _EXEC_END, (agent, token))

    def _run_segment(self, t: float, req_id: str, seg) -> tuple[float, list[float], Ended]:
        """The robot's run of ``seg`` of request ``req_id``, started at t: when it ends, when each of its skills
        ends (where a stop takes effect), and how it ends. Each skill's time is sampled from the robot type's
        execution-time profile, scaled by time_scale and the execution noise, which may fail it part way."""
        model = self.exec_models[self.skill_sets[self._robot_type[req_id]].exec_profile]
        rng = random.Random(f"{self.seed}:{req_id}:{seg.index}")
        parts = [model.sample_time([call], rng) for call in seg.skills]
        factor, fails_at = self.exec_noise.draw(random.Random(f"{self.seed}:{req_id}:{seg.index}:noise"))
        length = sum(parts) * self.time_scale * factor
        boundaries = [t + b * self.time_scale * factor for b in itertools.accumulate(parts)]
        end = t + (length if fails_at is None else length * fails_at)
        return end, boundaries, Ended.DONE if fails_at is None else Ended.STOPPED

    def _run_ended(self, t: float, agent: str, token: int) -> None:
        run = self._runs.get(agent)
        if run is None or run.token != token:
            return          # stopped earlier (preempted or withdrawn)
        del self._runs[agent]
        orphans = self._robots[agent].end(run.req_id, run.index, run.ended)
        self._report_end(t, run.req_id, run.index, run.ended,
                         "simulated skill failure" if run.ended == Ended.STOPPED else "")
        for seg in orphans:
            self._report_end(t, run.req_id, seg.index, Ended.NOT_RUN, f"not run: segment {run.index} ended first")
        self._start_next(t, agent)

    def _withdrawn(self, t: float, req_id: str, indices: tuple[int, ...]) -> None:
        """The scheduler's withdrawal reaches the robot: waiting segments go, the running one stops now."""
        agent = self._agent[req_id]
        robot = self._robots.get(agent)
        if robot is None:
            return
        for q in [q for q in robot.waiting if q.plan == req_id and q.index in indices]:
            robot.remove(q.item)
            robot.end(req_id, q.index, Ended.STOPPED)
        run = self._runs.get(agent)
        if run is not None and run.req_id == req_id and run.index in indices:
            del self._runs[agent]
            robot.end(req_id, run.index, Ended.STOPPED)
            self._start_next(t, agent)

    def _report_end(self, t: float, req_id: str, index: int, ended: Ended, message: str) -> None:
        ok = ended in (Ended.DONE, Ended.RETURNED)
        self._handle(self.scheduler.on_execution_finished(req_id, index, t, ok=ok, error=message,
                                                          ended=_ENDED_AS.get(ended)))

    def _time_select(self) -> None:
        """Record the wall time of every policy.select call (scheduling overhead)."""
        policy, inner, log = self.policy, self.policy.select, self._select_s

        def timed(waiting, running, ctx):
            t0 = time.perf_counter()
            out = inner(waiting, running, ctx)
            log.append(time.perf_counter() - t0)
            return out

        policy.select = timed  # type: ignore[method-assign]


def simulate(policy: Policy, latency: LatencyModel, tasks: Workload | Iterable[WorkloadTask], seed: int = 0,
             **kwargs) -> SimResult:
    """One-call simulation (see Simulator)."""
    return Simulator(policy, latency, seed=seed, **kwargs).run(tasks)
