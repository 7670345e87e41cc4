#!/usr/bin/env python3
"""CPU an idle executor host uses: N simulated robots in one process, nothing to execute.

    python benchmarks/executor_host_idle.py [--drones 30] [--arms 20] [--seconds 10]

Runs the host twice, side by side in one run: with the default feedback timer (paused while a robot is idle) and
with feedback_period_s 0 (no timer at all), and prints each one's CPU (cores, from /proc/<pid>/stat over the
window, after start-up) and their ratio. With the executor before 8a15431 (timer always running) the same run
printed 0.730 vs 0.060 cores (12.2x); since then 0.065 vs 0.068 (0.96x).

    python benchmarks/executor_host_idle.py --status-periods 1.0,10.0,0 [--reps 2]

instead compares values of status_period_s (the ExecutorStatus timer; 0 = published on change only), the runs
alternating, each value --reps times; prints every run and the median per value.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from report import cpu_seconds, interrupt, start_executor_host  # noqa: E402


def idle_cores(agents: str, extra: list[str], warmup_s: float, seconds: float) -> float:
    proc = start_executor_host(agents, ["-p", "time_scale:=0.2", *extra])
    try:
        time.sleep(warmup_s)
        if proc.poll() is not None:
            raise RuntimeError(f"executor host exited with {proc.returncode} during start-up")
        t0, c0 = time.monotonic(), cpu_seconds(proc.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_seconds(proc.pid)
    finally:
        interrupt(proc)
    return (c1 - c0) / (t1 - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drones", type=int, default=30)
    ap.add_argument("--arms", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    ap.add_argument("--warmup", type=float, default=8.0, help="start-up time left out")
    ap.add_argument("--status-periods", default="", help="compare these status_period_s values instead")
    ap.add_argument("--reps", type=int, default=2, help="runs per status_period_s value")
    args = ap.parse_args(argv)
    agents = ",".join([f"drone_{i}:drone" for i in range(args.drones)] + [f"arm_{i}:arm" for i in range(args.arms)])
    n = args.drones + args.arms
    print(f"executor host, {n} idle robots, {args.seconds:.0f} s after {args.warmup:.0f} s of start-up", flush=True)
    if args.status_periods:
        periods = [p.strip() for p in args.status_periods.split(",") if p.strip()]
        cores: dict[str, list[float]] = {p: [] for p in periods}
        for _ in range(args.reps):
            for period in periods:
                cores[period].append(idle_cores(agents, ["-p", f"status_period_s:={float(period)}"], args.warmup,
                                                args.seconds))
                print(f"  status_period_s {period}: {cores[period][-1]:.3f} cores", flush=True)
        for period, values in cores.items():
            print(f"  status_period_s {period}: median {statistics.median(values):.3f} cores "
                  f"[{min(values):.3f}-{max(values):.3f}]")
        return 0
    timer = idle_cores(agents, [], args.warmup, args.seconds)
    print(f"  feedback timer (default, paused while idle): {timer:.3f} cores", flush=True)
    none = idle_cores(agents, ["-p", "feedback_period_s:=0.0"], args.warmup, args.seconds)
    print(f"  no feedback timer (feedback_period_s 0):     {none:.3f} cores", flush=True)
    print(f"  ratio: {timer / none:.2f}x" if none > 0 else "  ratio: n/a (no CPU without timers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
