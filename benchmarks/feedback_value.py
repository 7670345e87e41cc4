#!/usr/bin/env python3
"""Does completion feedback matter? timely against timely-open-loop (E from execution estimates only: the robots'
start and finish reports ignored), the same workloads, paired per seed.

    python benchmarks/feedback_value.py [--model smollm2] [--profile YAML] [--seeds 1-10] [--scales 0.25,0.5,1]
        [--time-scales 0.2,1] [--ros out/ros_burst_feedback/runs.csv] [--out out/feedback_value]

The workload is ros_burst.py's (the urgent burst beside arm plans, counts x scale; each trace's plan as --model
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
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from statistics import mean

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import ros_burst as rb  # noqa: E402
from report import parse_seeds  # noqa: E402

POLICIES = ("timely", "timely-open-loop")
METRICS = (("utility", ""), ("eq3", "_eq3"), ("wait s", "_midplan_wait_s"))   # (label, runs.csv key suffix)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def main(argv=None) -> int:
    args = parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
