#!/usr/bin/env python3
"""Does the server's resident memory come back down after a burst? One of two mechanisms on and off, side by side
in one run: `--compare threads` (default) the executor's idle worker threads ending (`worker_idle_exit_s` 5 s vs
0, rclpy's keep-every-thread pool), `--compare trim` the idle heap trim (`trim_memory_idle_s` 1 s vs 0).

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/memory_after_burst.py [--compare threads|trim] [--goals 200]
        [--bursts 3] [--reps 2] [--idle-s 7]

Real processes on loopback: per repetition one server with the mechanism on and one with it off (alternating order),
each as `make stress` starts it. Each server gets a warm-up (a full batch of 8 dry-run goals and 32 at once, so the
engine's batch buffers and the goal threads exist), then --bursts bursts of --goals dry-run goals sent at the same
moment (planned by the engine, not executed: no executors needed). Resident memory (/proc, with child processes) is
read after `--idle-s` seconds without a goal: once after the warm-up, then after each burst, with the server's thread
count (every open goal holds one of the executor's threads). Prints per server the growth after each burst, then
resident memory after the warm-up and after the last burst with the mechanism on and off.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools" / "stress"))
sys.path.insert(0, str(REPO))


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


COMPARED = {  # --compare: the server parameters with the mechanism on, and off
    "threads": (["worker_idle_exit_s:=5.0"], ["worker_idle_exit_s:=0.0"]),
    "trim": (["trim_memory_idle_s:=1.0"], ["trim_memory_idle_s:=0.0"]),
}


def measure(params: list[str], goals: int, bursts: int, idle_s: float, tag: str) -> list[float]:
    """Resident MiB: [baseline after the warm-up, after burst 1, ...], each read after idle_s without a goal."""
    from client import StressClient
    from goals import valid_goal
    from procs import start_server

    server = start_server([], params)
    client = None
    try:
        server.wait_ready(180)
        client = StressClient(f"memory_client_{tag}")
        if not client.wait_for_server(30):
            raise SystemExit("no /plan server answering")

        def burst(tag: str, n: int) -> None:
            records = [client.send(tag, "dry run", set(), valid_goal(f"{tag}_{i}", "drone", dry_run=True))
                       for i in range(n)]
            client.wait_terminal(records, 60 + 0.5 * n)
            lost = sum(1 for r in records if r.done is None)
            if lost:
                raise SystemExit(f"{lost} of {n} goals got no result")

        burst("warm8", 8)
        burst("warm32", 32)
        time.sleep(idle_s)
        readings = [server.rss_mb()]
        threads = [_threads(server.proc.pid)]
        for b in range(bursts):
            burst(f"burst{b}", goals)
            time.sleep(idle_s)
            readings.append(server.rss_mb())
            threads.append(_threads(server.proc.pid))
        print(f"  threads of the server: {threads}", flush=True)
        return readings
    finally:
        if client is not None:
            client.close()
        server.stop(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--goals", type=int, default=200)
    p.add_argument("--bursts", type=int, default=3)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--compare", choices=sorted(COMPARED), default="threads")
    p.add_argument("--idle-s", type=float, default=7.0,
                   help="quiet time before each reading (> worker_idle_exit_s 5 s and the trim's 1 s)")
    args = p.parse_args(argv)
    final: dict[str, list[float]] = {"on": [], "off": []}
    base: dict[str, list[float]] = {"on": [], "off": []}
    on, off = COMPARED[args.compare]
    for rep in range(args.reps):
        order = ("on", "off") if rep % 2 == 0 else ("off", "on")
        for mode in order:
            r = measure(on if mode == "on" else off, args.goals, args.bursts, args.idle_s, f"{rep}_{mode}")
            steps = " ".join(f"{x - r[0]:+.1f}" for x in r[1:])
            print(f"rep {rep + 1} {args.compare} {mode:3s}: after the warm-up {r[0]:.1f} MiB; after each burst of "
                  f"{args.goals}: {steps} MiB", flush=True)
            base[mode].append(r[0])
            final[mode].append(r[-1])

    def show(values: list[float]) -> str:
        return f"{statistics.fmean(values):.1f} [{min(values):.1f}, {max(values):.1f}]"

    print(f"\nresident MiB, mean [min, max] of {args.reps} servers each: after the warm-up: {args.compare} on "
          f"{show(base['on'])}, off {show(base['off'])}; after {args.bursts} bursts of {args.goals}: {args.compare} on "
          f"{show(final['on'])}, off {show(final['off'])}; {args.compare} gives back "
          f"{statistics.fmean(final['off']) - statistics.fmean(final['on']):.1f} MiB at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
