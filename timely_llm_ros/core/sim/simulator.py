"""The event loop serving a workload: PlanScheduler + an engine + simulated robots, on a virtual or a wall clock.

Tasks are submitted at their arrival times; each SegmentReady starts executing on the robot after the network
delay and lasts ExecTimeModel.sample_time (seeded per request and segment, so every policy sees the same robot
times; optionally scaled by time_scale); the executor reports start and finish back to the scheduler.

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
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from ...engine.base import Engine, weak_method
from ..errors import ErrorCode, RequestError
from ..exec_time import ExecTimeModel, load_exec_models
from ..policies.base import Policy
from ..prompting import PromptEncoder
from ..request import RequestState
from ..scheduler import PlanScheduler, RequestFinished, RequestOutcome, SchedulerConfig, SegmentReady
from ..skills import SkillSet, load_skill_sets
from ..tuf import DEFAULT_URGENCY_CLASSES, TimeUtility
from ..workload.generator import Workload, WorkloadTask
from .clock import LoopClock, VirtualClock, WallClock
from .latency_model import LatencyModel
from .sim_engine import SimEngine

_ARRIVE, _EXEC_START, _EXEC_END = 0, 1, 2


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
    """

    def __init__(self, policy: Policy, latency: LatencyModel | None, skill_sets: Mapping[str, SkillSet] | None = None,
                 exec_models: Mapping[str, ExecTimeModel] | None = None,
                 urgency_classes: Mapping[str, TimeUtility] = DEFAULT_URGENCY_CLASSES, seed: int = 0,
                 on_finished: Callable[[RequestOutcome], None] | None = None, *, engine: Engine | None = None,
                 clock: LoopClock | None = None, time_scale: float = 1.0, forced_plans: bool = True,
                 network_delay_s: float | None = None, step_token_budget: int | None = None,
                 exec_noise: ExecNoise | None = None, scheduler_config: SchedulerConfig | None = None,
                 prompts: PromptEncoder | None = None) -> None:
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
        config = scheduler_config or SchedulerConfig()
        config.network_delay_s = network_delay_s
        self.exec_noise = exec_noise or ExecNoise()
        self.scheduler = PlanScheduler(self.engine, policy, self.skill_sets, self.exec_models, self.clock, config,
                                       prompts=prompts)
        self._followers: dict[str, list[WorkloadTask]] = {}   # closed loop: tasks waiting for a task's end
        self._lost: set[tuple[str, int]] = set()                # segments a failed robot never runs
        self._events: list[tuple[float, int, int, tuple]] = []
        self._seq = itertools.count()
        self._select_s: list[float] = []
        self._robot_free: dict[str, float] = {}   # request id -> when its robot finishes its queued segments
        self._robot_type: dict[str, str] = {}
        self._rejected: list[RequestOutcome] = []   # refused by submit (e.g. prompt too long)
        self._arrivals: list[tuple[float, int, WorkloadTask]] = []   # arrivals not yet submitted, in time order
        if isinstance(engine, SimEngine):     # an arrival may cut a modelled step short at a layer boundary
            engine.interrupt_at = weak_method(self._first_interrupt)
        elif engine.interruptible:            # a real engine asks between its layers (wall clock)
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
        sched = self.scheduler
        while self._events and self._events[0][0] <= self.clock.now:
            t, seq, kind, payload = heapq.heappop(self._events)
            if kind == _ARRIVE:
                task: WorkloadTask = payload[0]
                self._arrivals.pop(bisect.bisect_left(self._arrivals, (t, seq), key=lambda a: a[:2]))
                self._submit(task, t)
            elif (payload[0], payload[1]) in self._lost:
                continue
            elif kind == _EXEC_START:
                self._handle(sched.on_execution_started(payload[0], payload[1], t))
            else:
                ok = payload[2] if len(payload) > 2 else True
                if not ok:   # the robot stops: what it had queued behind the failed segment never runs
                    self._lost.update((payload[0], i) for i in range(payload[1] + 1, payload[1] + 1000))
                    self._robot_free[payload[0]] = t
                self._handle(sched.on_execution_finished(payload[0], payload[1], t, ok=ok,
                                                         error="" if ok else "simulated skill failure"))

    def _submit(self, task: WorkloadTask, t: float | None = None) -> None:
        set_prompt_tokens = getattr(self.engine, "set_prompt_tokens", None)
        if callable(set_prompt_tokens):  # modelled engine: LRTrace prompts are long in-context prompts
            set_prompt_tokens(task.task_id, task.prompt_tokens)
        self._robot_type[task.task_id] = task.robot_type
        req = task.to_request(self.urgency_classes, arrival=t)
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
            if isinstance(ev, SegmentReady):
                self._start_execution(ev)
            elif isinstance(ev, RequestFinished):
                for nxt in self._followers.pop(ev.req_id, []):   # closed loop: the robot's next task
                    self._push(self.clock.now + nxt.gap_s, _ARRIVE, (nxt,))
                if self.on_finished is not None:
                    self.on_finished(ev.outcome)

    def _start_execution(self, ev: SegmentReady) -> None:
        model = self.exec_models[self.skill_sets[self._robot_type[ev.req_id]].exec_profile]
        rng = random.Random(f"{self.seed}:{ev.req_id}:{ev.segment.index}")
        # the robot runs its segments in order: one sent while it is busy starts when the previous one ends
        start = max(self.clock.now + self.network_delay_s, self._robot_free.get(ev.req_id, -math.inf))
        self._lost.discard((ev.req_id, ev.segment.index))      # a replanned segment reuses nothing, but be safe
        factor, fails_at = self.exec_noise.draw(random.Random(f"{self.seed}:{ev.req_id}:{ev.segment.index}:noise"))
        length = model.sample_time(ev.segment.skills, rng) * self.time_scale * factor
        end = start + (length if fails_at is None else length * fails_at)
        self._robot_free[ev.req_id] = end
        self._push(start, _EXEC_START, (ev.req_id, ev.segment.index))
        self._push(end, _EXEC_END, (ev.req_id, ev.segment.index, fails_at is None))

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
