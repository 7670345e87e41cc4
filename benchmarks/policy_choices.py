#!/usr/bin/env python3
"""What the timely policy's choices buy: each one against its alternative on the same workloads, one choice a
sub-command.

    python benchmarks/policy_choices.py late [--seeds 1-5] [--drone-rate 2] ...
        each urgency class's `late` choice (drop | serve) under a steady stream (simulator)
    python benchmarks/policy_choices.py feedback [--model smollm2] [--ros runs.csv] ...
        completion feedback: timely against timely-open-loop, paired per seed (simulator; ROS runs if given)
    python benchmarks/policy_choices.py branches [--seeds 1-5] ...
        branch-aware execution-time estimates against worst-case ones (simulator, plans interpreted on scenes)

`python benchmarks/policy_choices.py SUB-COMMAND --help` describes each in full (LATE_DOC, FEEDBACK_DOC and
BRANCHES_DOC below).
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import ros_burst as rb  # noqa: E402
from report import parse_seeds  # noqa: E402
from timely_llm_ros.core.errors import ErrorCode  # noqa: E402
from timely_llm_ros.core.execution import Ended  # noqa: E402
from timely_llm_ros.core.policies import make_policy  # noqa: E402
from timely_llm_ros.core.policies.timely import options_from_skill_sets  # noqa: E402
from timely_llm_ros.core.request import RequestState  # noqa: E402
from timely_llm_ros.core.scheduler import SchedulerConfig  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.interpreter import Interpreter, PlanError, PlanState, SegmentRun, format_value  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.evaluation.metrics import request_utility  # noqa: E402
from timely_llm_ros.evaluation.scene import Scene  # noqa: E402
from timely_llm_ros.evaluation.scene_skills import act  # noqa: E402
from timely_llm_ros.evaluation.sim import load_latency_model  # noqa: E402
from timely_llm_ros.evaluation.sim.simulator import _ENDED_AS, Simulator  # noqa: E402
from timely_llm_ros.evaluation.workload.generator import WorkloadTask, lookup_trace  # noqa: E402
from timely_llm_ros.paths import config_dir  # noqa: E402

LATE_DOC = """Late plan or no plan: what each urgency class's ``late`` choice (drop | serve) does under a steady
stream.

    python benchmarks/policy_choices.py late [--seeds 1-5] [--max-batch 1] [--drone-rate 1.5] [--arm-rate 0.2]
                                      [--duration-s 120] [--latency llama3-8b-rtx4090]

The issue's case: one engine at max_batch 1 under a steady stream of drone goals (LRTrace traces 1-8: normal and
urgent), with normal arm plans (traces 9-11) arriving now and then; each goal goes to a robot of its own. The same
workload (per seed) is replayed by the timely policy with three settings of the classes' ``late`` choice:
drop/drop (the paper's rule), serve/drop (normal plans served late, urgent ones dropped) and serve/serve.
Per robot type and class it prints the share served (DONE), the share served on time (positive utility), the share
dropped, the mean utility (Eq. 1; a request never served counts min(0, TUF at its end)) and the response time of
those served (mean and 90th percentile), each as the median [min-max] over the seeds.
"""

FEEDBACK_DOC = """Does completion feedback matter? timely against timely-open-loop (E from execution estimates only: the
robots'
start and finish reports ignored), the same workloads, paired per seed.

    python benchmarks/policy_choices.py feedback [--model smollm2] [--profile YAML] [--seeds 1-10] [--scales 0.25,0.5,1]
        [--time-scales 0.2,1] [--ros out/ros_burst_feedback/runs.csv] [--out out/feedback_value]

The workload is benchmarks/ros_burst.py's (the urgent burst beside arm plans, counts x scale; each trace's plan as --model
writes it alone), simulated on the model's latency profile as ros_burst.py simulates it (the model's token counts,
its cached system prompts, the profile's hardware fit, the urgency classes fitted to the profile), with the robots'
execution times x each --time-scales (ros_burst.py's ROS runs use 0.2; 1 is the execution-time profiles as they are,
1-5 s per drone or arm action). Per scale, time scale and class, three figures, each as both policies' means over
seeds and the paired difference closed - open per seed, mean [min, max], with how many seeds it is positive:
  utility   Eq. 1, TUF_0 of the response time (the paper's figure metric: the first segment only);
  eq3       Eq. 3, TUF_0 of the first segment + TUF_1 of each later one (a robot left waiting for its next
            segment counts here), over the class's requests (dropped: 0);
  wait s    mid-plan waiting: the time a served robot waited for its later segments (waiting - response time).
--ros adds the same figures from ros_burst.py runs of both policies (its runs.csv).
"""


# ---- late

SETTINGS = {"drop/drop": ("drop", "drop"), "serve/drop": ("serve", "drop"), "serve/serve": ("serve", "serve")}


def steady_stream(seed: int, duration_s: float, drone_rate: float, arm_rate: float,
                  prompt_tokens: int = 2884) -> list[WorkloadTask]:
    """Poisson drone goals (traces 1-8) at drone_rate and arm goals (traces 9-11) at arm_rate per second, each
    to a robot of its own."""
    rng = random.Random(seed)
    rows = []
    for rate, traces in ((drone_rate, (1, 2, 3, 4, 5, 6, 7, 8)), (arm_rate, (9, 10, 11))):
        t = rng.expovariate(rate)
        while t < duration_s:
            rows.append((t, rng.choice(traces)))
            t += rng.expovariate(rate)
    rows.sort()
    tasks = []
    for i, (t, tid) in enumerate(rows):
        tr = lookup_trace(tid)
        tasks.append(WorkloadTask(task_id=f"steady-{i:04d}", arrival=round(t, 6), event=i,
                                  agent_id=f"{tr.robot_type}_{i}", trace_id=tid, robot_type=tr.robot_type,
                                  urgency=tr.urgency, task=tr.task, context=tr.context, plan=tr.plan,
                                  prompt_tokens=prompt_tokens))
    return tasks


def run(setting: str, tasks: list[WorkloadTask], seed: int, max_batch: int, latency) -> dict[str, dict[str, float]]:
    normal_late, urgent_late = SETTINGS[setting]
    classes = {"normal": replace(DEFAULT_URGENCY_CLASSES["normal"], late=normal_late),
               "urgent": replace(DEFAULT_URGENCY_CLASSES["urgent"], late=urgent_late)}
    policy = make_policy("timely", max_batch=max_batch, options=options_from_skill_sets(load_skill_sets()))
    result = Simulator(policy, latency, urgency_classes=classes, seed=seed).run(tasks)
    groups: dict[str, list] = {}
    for o in result.outcomes:
        groups.setdefault(f"{o.req.robot_type} {o.req.urgency}", []).append(o)
        groups.setdefault("all", []).append(o)
    out = {}
    for name, os in groups.items():
        served = sorted(o.response_time for o in os if o.state == RequestState.DONE)
        out[name] = {"n": len(os), "served": len(served) / len(os),
                     "on_time": sum(o.state == RequestState.DONE and o.utility > 0 for o in os) / len(os),
                     "dropped": sum(o.state == RequestState.DROPPED for o in os) / len(os),
                     "utility": statistics.fmean(request_utility(o) for o in os),
                     "response_s": statistics.fmean(served) if served else math.nan,
                     "p90_response_s": served[int(0.9 * (len(served) - 1))] if served else math.nan}
    return out


def spread(values: list[float], fmt: str) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def late_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="policy_choices.py late", description=LATE_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--max-batch", type=int, default=1)
    ap.add_argument("--drone-rate", type=float, default=1.5, help="drone goals per second")
    ap.add_argument("--arm-rate", type=float, default=0.2, help="arm goals per second")
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--latency", default="llama3-8b-rtx4090")
    args = ap.parse_args(argv)
    latency = load_latency_model(args.latency)
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    for seed in parse_seeds(args.seeds):
        tasks = steady_stream(seed, args.duration_s, args.drone_rate, args.arm_rate)
        for setting in SETTINGS:
            for group, m in run(setting, tasks, seed, args.max_batch, latency).items():
                rows.setdefault((group, setting), []).append(m)
    print(f"timely, max_batch {args.max_batch}, {args.drone_rate:g} drone + {args.arm_rate:g} arm goals/s for "
          f"{args.duration_s:g} s, latency {args.latency}, seeds {args.seeds}: median [min-max] over the seeds\n")
    print("| robots, class | late (normal/urgent) | requests | served | on time | dropped | utility (Eq. 1) | "
          "response s (served) | p90 response s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (group, setting), ms in sorted(rows.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0],
                                                                        list(SETTINGS).index(kv[0][1]))):
        print(f"| {group} | {setting} | {spread([m['n'] for m in ms], '.0f')} | "
              f"{spread([100 * m['served'] for m in ms], '.0f')}% | {spread([100 * m['on_time'] for m in ms], '.0f')}% | "
              f"{spread([100 * m['dropped'] for m in ms], '.0f')}% | "
              f"{spread([m['utility'] for m in ms], '.3f')} | {spread([m['response_s'] for m in ms], '.2f')} | "
              f"{spread([m['p90_response_s'] for m in ms], '.2f')} |")
    return 0



# ---- feedback

POLICIES = ("timely", "timely-open-loop")
METRICS = (("utility", ""), ("eq3", "_eq3"), ("wait s", "_midplan_wait_s"))   # (label, runs.csv key suffix)


def feedback_parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="policy_choices.py feedback", description=FEEDBACK_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--profile", default="", help="latency YAML (default: ros_burst.py's for the model)")
    p.add_argument("--seeds", default="1-10")
    p.add_argument("--scales", default="0.25,0.5,1", help="burst counts x these (ros_burst.py --scale)")
    p.add_argument("--time-scales", default="0.2,1", help="robot execution times x these")
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--class-scale", type=float, default=2.0)
    p.add_argument("--ros", default="", help="runs.csv of ros_burst.py runs of timely and timely-open-loop")
    p.add_argument("--out", default="out/feedback_value")
    return p.parse_args(argv)


def paired(closed: list[float], opened: list[float]) -> str:
    """closed - open per seed: mean [min, max] (k of n positive)."""
    d = [c - o for c, o in zip(closed, opened)]
    return f"{mean(d):+.3f} [{min(d):+.3f}, {max(d):+.3f}] ({sum(x > 1e-9 for x in d)}/{len(d)} > 0)"


def ros_rows(path: Path) -> list[str]:
    """The paired figures of ros_burst.py runs (source ros) of both policies."""
    if not path.is_file():
        return [f"- {path}: no such file (run ros_burst.py --policies timely,timely-open-loop first)"]
    rows = [r for r in csv.DictReader(path.open()) if r["source"] == "ros" and r["policy"] in POLICIES]
    seeds = sorted({int(r["seed"]) for r in rows})
    get = {(r["policy"], int(r["seed"])): r for r in rows}
    seeds = [s for s in seeds if all((p, s) in get for p in POLICIES)]
    if not seeds:
        return [f"- {path}: no seed with both {' and '.join(POLICIES)}"]
    out = []
    for cls in ("urgent", "normal"):
        for label, key in METRICS:
            c = [float(get["timely", s][cls + key]) for s in seeds]
            o = [float(get["timely-open-loop", s][cls + key]) for s in seeds]
            out.append(f"| ROS x{float(get['timely', seeds[0]]['scale']):g} | 0.2 | {cls} | {label} | {mean(c):.3f} | "
                       f"{mean(o):.3f} | {paired(c, o)} |")
    return out


def feedback_main(argv: list[str] | None = None) -> int:
    args = feedback_parse_args(argv)
    seeds = parse_seeds(args.seeds)
    out = REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    burst_args = rb.parse_args(["--model", args.model, "--profile", args.profile, "--max-batch", str(args.max_batch),
                                "--class-scale", str(args.class_scale)])
    latency, served, classes, _ = rb.prepare(burst_args, rb.burst_workload(seeds[0]))
    lines = [f"{args.model}: timely (closed loop) vs timely-open-loop on the urgent burst, seeds {args.seeds}; "
             f"utility per class (urgent max {classes['urgent'].beta:g}, normal max {classes['normal'].beta:g}), "
             "mean over seeds, and closed - open per seed\n",
             "| burst | robot time x | class | metric | closed | open | closed - open |",
             "|---|---|---|---|---|---|---|"]
    for k in [float(x) for x in args.scales.split(",")]:
        for ts in [float(x) for x in args.time_scales.split(",")]:
            burst_args.time_scale = ts
            runs = {p: [] for p in POLICIES}
            for seed in seeds:
                w = rb.burst_workload(seed, k)
                for p in POLICIES:
                    runs[p].append(rb.sim_model(p, seed, w, served, latency, burst_args, classes))
            for c in ("urgent", "normal"):
                for label, key in METRICS:
                    closed, opened = ([m[c + key] for m in runs[p]] for p in POLICIES)
                    lines.append(f"| x{k:g} | {ts:g} | {c} | {label} | {mean(closed):.3f} | {mean(opened):.3f} | "
                                 f"{paired(closed, opened)} |")
                    print(lines[-1], flush=True)
    if args.ros:
        lines += ros_rows(Path(args.ros))
    text = "\n".join(lines) + "\n"
    (out / f"feedback_{args.model}.md").write_text(text)
    print(text)
    return 0


# ---- branch-aware estimates

BRANCHES_DOC = """Branch-aware execution-time estimates against worst-case ones: how long robots sit idle at segment boundaries.

    python benchmarks/policy_choices.py branches [--seeds 1-5] [--tasks 120] [--rate 3.0]

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


def _mean_range(values: list[float]) -> str:
    return f"{mean(values):6.3f} [{min(values):.3f}, {max(values):.3f}]"


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

    def _run_segment(self, t: float, req_id: str, seg) -> tuple[float, list[float], Ended]:
        """The segment interpreted on its request's scene; only the calls the interpreter made take time."""
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
        length = sum(model.sample_time([call], rng) for call in run.executed) * self.time_scale
        return t + length, [t + length], Ended.STOPPED if failed else Ended.RETURNED if run.returned else Ended.DONE

    def _report_end(self, t: float, req_id: str, index: int, ended: Ended, message: str) -> None:
        run = self._ran.pop((req_id, index), SegmentRun())
        ok = ended in (Ended.DONE, Ended.RETURNED)
        kind = {Ended.NOT_RUN: "not_run", Ended.PREEMPTED: "preempted"}.get(ended)
        self._handle(self.scheduler.on_execution_finished(
            req_id, index, t, ok=ok, error=message or ("" if ok else "the plan failed on the robot"),
            executed=run.executed if kind is None else (), returned=ended == Ended.RETURNED,
            return_value=format_value(run.value) if run.returned else "", ended=_ENDED_AS.get(ended)))


def conditional_workload(seed: int, n: int, rate: float) -> tuple[list[WorkloadTask], dict[str, dict]]:
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


def branches_run(seed: int, branch_aware: bool, opts) -> tuple[float, float, int]:
    tasks, source = conditional_workload(seed, opts.tasks, opts.rate)
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


def branches_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="policy_choices.py branches", description=BRANCHES_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1-5")
    p.add_argument("--tasks", type=int, default=120)
    p.add_argument("--rate", type=float, default=3.0, help="arrivals per second")
    p.add_argument("--present", type=float, default=0.3, help="chance an object the plan looks for is in the room")
    p.add_argument("--max-batch", type=int, default=8)
    opts = p.parse_args(argv)
    seeds = parse_seeds(opts.seeds)
    rows = {}
    for name, aware in (("worst case", False), ("branch-aware", True)):
        results = [branches_run(seed, aware, opts) for seed in seeds]
        rows[name] = results
    print(f"{len(conditional_tasks())} drone reference plans with a conditional; {opts.tasks} tasks at {opts.rate}/s, "
          f"seeds {opts.seeds}")
    print(f"{'E from':<14} {'idle s at a segment boundary':<30} {'Eq.3 utility per request':<28} boundaries")
    for name, results in rows.items():
        print(f"{name:<14} {_mean_range([r[0] for r in results]):<30} {_mean_range([r[1] for r in results]):<28} "
              f"{sum(r[2] for r in results)}")
    return 0



# ---- the command line

SUB_COMMANDS = {"late": late_main, "feedback": feedback_main, "branches": branches_main}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.report import run_sub_command

    argv = sys.argv[1:] if argv is None else argv
    return run_sub_command(__doc__, SUB_COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
