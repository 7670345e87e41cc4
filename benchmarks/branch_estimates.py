#!/usr/bin/env python3
"""Branch-aware execution-time estimates against worst-case ones: how long robots sit idle at segment boundaries.

    .venv/bin/python benchmarks/branch_estimates.py [--seeds 1-5] [--tasks 120] [--rate 3.0]

The drone reference plans with a conditional (config/eval/drone.yaml) are replayed (trace replay: the plan is forced,
the engine's time per token is config/latency/smollm2-cpu.yaml's) by the scheduler under the timely policy on a
discrete-event clock (Poisson arrivals of --rate per second, each task a robot of its own), with robots that run each segment by its meaning: its statements are interpreted on a scene
(evaluation/scene.py; the objects the task's context lists stand in view, every other object the plan names is
somewhere in the room with probability --present), only the calls the interpreter makes take time (each sampled from
the drone's execution-time profile), and the robot reports those calls. The scheduler's E for the next segment
then comes from:

  worst case     every conditional's body counted (the estimates before issue 36),
  branch-aware   each body by the probability its condition held on the robots so far (core/plan_time.py).

Printed per estimate, side by side over the same seeds (same arrivals, scenes and robot times): idle s, the mean
time a robot waited between the end of one segment and the start of the next of the same plan, and the mean Eq. 3
utility per request (TUF_0 of the first segment + TUF_1 of each later one), each as mean [min, max] over seeds.
"""
from __future__ import annotations

import argparse
import math
import random
import re
import sys
from pathlib import Path
from statistics import mean

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from timely_llm_ros.core.errors import ErrorCode  # noqa: E402
from timely_llm_ros.core.execution import Ended  # noqa: E402
from timely_llm_ros.core.latency_model import load_latency_model  # noqa: E402
from timely_llm_ros.core.policies import make_policy  # noqa: E402
from timely_llm_ros.core.scheduler import SchedulerConfig  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState, SegmentRun, format_value  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402
from timely_llm_ros.evaluation.scene import Scene  # noqa: E402
from timely_llm_ros.evaluation.scene_skills import act  # noqa: E402
from timely_llm_ros.evaluation.sim.simulator import _ENDED_AS, _EXEC_END, Simulator, _Run  # noqa: E402
from timely_llm_ros.evaluation.workload.generator import WorkloadTask  # noqa: E402
from timely_llm_ros.paths import config_dir  # noqa: E402

DRONE = load_skill_sets()["drone"]
RETURNS = {n: s.returns for n, s in DRONE.skills.items() if s.returns}
_QUOTED = re.compile(r"'([^']*)'")


def conditional_tasks() -> list[dict]:
    tasks = yaml.safe_load((config_dir() / "eval" / "drone.yaml").read_text())["tasks"]
    return [t for t in tasks if "?" in t["plan"]]


def scene_for(task: dict, rng: random.Random, present: float) -> Scene:
    """The task's listed objects in view ahead; each other object its plan names somewhere in the room (or not)."""
    listed = [o.strip() for o in task["scene"].split("objects:")[-1].split(",") if o.strip()]
    named = sorted(set(_QUOTED.findall(task["plan"])) - set(listed))
    objects = []
    for name in listed:
        objects.append({"name": name, "x": rng.uniform(1.0, 4.0), "y": rng.uniform(-0.8, 0.8), "z": 0.8,
                        "size": 0.4})
    for name in named:
        if name.endswith("?"):      # a question for the camera (p, sa), not an object
            continue
        if rng.random() < present:
            angle, r = rng.uniform(0.0, 2 * math.pi), rng.uniform(1.0, 4.0)
            objects.append({"name": name, "x": r * math.cos(angle), "y": r * math.sin(angle), "z": 0.8, "size": 0.4})
    return Scene.from_config({"objects": objects})


class InterpretingSimulator(Simulator):
    """The simulator's robots, running each segment by its meaning on a scene of its request (see the docstring)."""

    def __init__(self, *args, scenes: dict[str, Scene], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._scenes = scenes
        self._states: dict[str, PlanState] = {}
        self._ran: dict[tuple[str, int], SegmentRun] = {}

    def _start_next(self, t: float, agent: str) -> None:
        robot = self._robots[agent]
        if agent in self._runs:
            return
        seg = robot.next()
        if seg is None:
            return
        req_id = robot.running.plan
        scene = self._scenes[req_id]
        state = self._states.setdefault(req_id, PlanState())
        run = SegmentRun()
        failed = False
        try:
            Interpreter(lambda call: act(scene, "drone", call), RETURNS).run_segment(
                parse(seg.text, DRONE.skills, DRONE.statement_forms).program, state, seg.index, run)
        except (PlanError, LookupError, TypeError):
            failed = True
        self._ran[(req_id, seg.index)] = run
        model = self.exec_models[DRONE.exec_profile]
        rng = random.Random(f"{self.seed}:{req_id}:{seg.index}")
        parts = [model.sample_time([call], rng) for call in run.executed]
        length = sum(parts) * self.time_scale
        ended = Ended.STOPPED if failed else Ended.RETURNED if run.returned else Ended.DONE
        token = next(self._seq)
        self._runs[agent] = _Run(req_id, seg.index, t + length, [t + length], ended, token)
        self._handle(self.scheduler.on_execution_started(req_id, seg.index, t))
        self._push(t + length, _EXEC_END, (agent, token))

    def _report_end(self, t: float, req_id: str, index: int, ended: Ended, message: str) -> None:
        run = self._ran.pop((req_id, index), SegmentRun())
        ok = ended in (Ended.DONE, Ended.RETURNED)
        kind = {Ended.NOT_RUN: "not_run", Ended.PREEMPTED: "preempted"}.get(ended)
        self._handle(self.scheduler.on_execution_finished(
            req_id, index, t, ok=ok, error=message or ("" if ok else "the plan failed on the robot"),
            executed=run.executed if kind is None else (), returned=ended == Ended.RETURNED,
            return_value=format_value(run.value) if run.returned else "", ended=_ENDED_AS.get(ended)))


def workload(seed: int, n: int, rate: float) -> tuple[list[WorkloadTask], dict[str, dict]]:
    rng = random.Random(seed)
    pool = conditional_tasks()
    t, out, source = 0.0, [], {}
    for i in range(n):
        t += rng.expovariate(rate)
        task = rng.choice(pool)
        tid = f"s{seed}_{i}"
        source[tid] = task
        out.append(WorkloadTask(task_id=tid, arrival=t, event=i, agent_id=f"drone_{i}", trace_id=0,
                                robot_type="drone", urgency="normal", task=task["task"], context=task["scene"],
                                plan=task["plan"], prompt_tokens=60, max_new_tokens=200))
    return out, source


def run(seed: int, branch_aware: bool, opts) -> tuple[float, float, int]:
    tasks, source = workload(seed, opts.tasks, opts.rate)
    rng = random.Random(f"scenes:{seed}")
    scenes = {tid: scene_for(source[tid], rng, opts.present) for tid in source}
    latency = load_latency_model("smollm2-cpu")
    sim = InterpretingSimulator(make_policy("timely", max_batch=opts.max_batch), latency, seed=seed,
                                scheduler_config=SchedulerConfig(branch_aware=branch_aware), scenes=scenes)
    result = sim.run(tasks)
    idle, utility = [], []
    for out in result.outcomes:
        segs = [s for s in out.segments if s.exec_started is not None and s.exec_finished is not None]
        idle += [max(0.0, b.exec_started - a.exec_finished) for a, b in zip(segs, segs[1:])]
        utility.append(out.total_utility if out.error_code != ErrorCode.DROPPED else 0.0)
    return mean(idle) if idle else 0.0, mean(utility), len(idle)


def spread(values: list[float]) -> str:
    return f"{mean(values):6.3f} [{min(values):.3f}, {max(values):.3f}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1-5")
    p.add_argument("--tasks", type=int, default=120)
    p.add_argument("--rate", type=float, default=3.0, help="arrivals per second")
    p.add_argument("--present", type=float, default=0.3, help="chance an object the plan looks for is in the room")
    p.add_argument("--max-batch", type=int, default=8)
    opts = p.parse_args(argv)
    lo, _, hi = opts.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    rows = {}
    for name, aware in (("worst case", False), ("branch-aware", True)):
        results = [run(seed, aware, opts) for seed in seeds]
        rows[name] = results
    print(f"{len(conditional_tasks())} drone reference plans with a conditional; {opts.tasks} tasks at {opts.rate}/s, "
          f"seeds {opts.seeds}")
    print(f"{'E from':<14} {'idle s at a segment boundary':<30} {'Eq.3 utility per request':<28} boundaries")
    for name, results in rows.items():
        print(f"{name:<14} {spread([r[0] for r in results]):<30} {spread([r[1] for r in results]):<28} "
              f"{sum(r[2] for r in results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
