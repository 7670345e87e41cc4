#!/usr/bin/env python3
"""Does the server's resident memory come back down after a burst? `trim_memory_idle_s` on (1 s) and off (0),
side by side in one run.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/memory_after_burst.py [--goals 200] [--bursts 3] [--reps 2]

Real processes on loopback: per repetition one server with the trim on and one with it off (in alternating order),
each as `make stress` starts it. Each server gets a warm-up (a full batch of 8 dry-run goals and 32 at once, so the
engine's batch buffers and the goal threads exist), then --bursts bursts of --goals dry-run goals sent at the same
moment (planned by the engine, not executed: no executors needed). Resident memory (/proc, with child processes) is
read after `--idle-s` seconds without a goal: once after the warm-up, then after each burst, with the server's thread
count (every open goal holds one of the executor's threads, which rclpy keeps). Prints per server the growth after
each burst, then resident memory after the warm-up and after the last burst with the trim on and off (the servers
are identical until the first trim, so the absolute figures compare).
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


def measure(trim_s: float, goals: int, bursts: int, idle_s: float, rep: int) -> list[float]:
    """Resident MiB: [baseline after the warm-up, after burst 1, ...], each read after idle_s without a goal."""
    from client import StressClient
    from goals import valid_goal
    from procs import start_server

    server = start_server([], [f"trim_memory_idle_s:={trim_s:.1f}"])
    client = None
    try:
        server.wait_ready(180)
        client = StressClient(f"memory_client_{rep}_{int(trim_s * 10)}")
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
    p.add_argument("--idle-s", type=float, default=3.0, help="quiet time before each reading (> the trim's 1 s)")
    args = p.parse_args(argv)
    final: dict[str, list[float]] = {"on": [], "off": []}
    base: dict[str, list[float]] = {"on": [], "off": []}
    for rep in range(args.reps):
        order = ("on", "off") if rep % 2 == 0 else ("off", "on")
        for mode in order:
            r = measure(1.0 if mode == "on" else 0.0, args.goals, args.bursts, args.idle_s, rep)
            steps = " ".join(f"{x - r[0]:+.1f}" for x in r[1:])
            print(f"rep {rep + 1} trim {mode:3s}: after the warm-up {r[0]:.1f} MiB; after each burst of {args.goals}: "
                  f"{steps} MiB", flush=True)
            base[mode].append(r[0])
            final[mode].append(r[-1])

    def show(values: list[float]) -> str:
        return f"{statistics.fmean(values):.1f} [{min(values):.1f}, {max(values):.1f}]"

    print(f"\nresident MiB, mean [min, max] of {args.reps} servers each: after the warm-up: trim on {show(base['on'])}, "
          f"off {show(base['off'])}; after {args.bursts} bursts of {args.goals}: trim on {show(final['on'])}, off "
          f"{show(final['off'])}; the trim gives back "
          f"{statistics.fmean(final['off']) - statistics.fmean(final['on']):.1f} MiB at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
