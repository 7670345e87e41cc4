#!/usr/bin/env python3
"""Late plan or no plan: what each urgency class's ``late`` choice (drop | serve) does under a steady stream.

    python benchmarks/late_or_drop.py [--seeds 1-5] [--max-batch 1] [--drone-rate 1.5] [--arm-rate 0.2]
                                      [--duration-s 120] [--latency llama3-8b-rtx4090]

The issue's case: one engine at max_batch 1 under a steady stream of drone goals (LRTrace traces 1-8: normal and
urgent), with normal arm plans (traces 9-11) arriving now and then; each goal goes to a robot of its own. The same
workload (per seed) is replayed by the timely policy with three settings of the classes' ``late`` choice:
drop/drop (the paper's rule), serve/drop (normal plans served late, urgent ones dropped) and serve/serve.
Per robot type and class it prints the share served (DONE), the share served on time (positive utility), the share
dropped, the mean utility (Eq. 1; a request never served counts min(0, TUF at its end)) and the response time of
those served (mean and 90th percentile), each as the median [min-max] over the seeds.
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import parse_seeds  # noqa: E402

from timely_llm_ros.evaluation.metrics import request_utility  # noqa: E402
from timely_llm_ros.core.policies import make_policy  # noqa: E402
from timely_llm_ros.core.policies.timely import options_from_skill_sets  # noqa: E402
from timely_llm_ros.core.request import RequestState  # noqa: E402
from timely_llm_ros.evaluation.sim import load_latency_model  # noqa: E402
from timely_llm_ros.evaluation.sim.simulator import Simulator  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.evaluation.workload.generator import WorkloadTask, lookup_trace  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--max-batch", type=int, default=1)
    ap.add_argument("--drone-rate", type=float, default=1.5, help="drone goals per second")
    ap.add_argument("--arm-rate", type=float, default=0.2, help="arm goals per second")
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--latency", default="llama3-8b-rtx4090")
    args = ap.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
