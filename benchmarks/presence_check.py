#!/usr/bin/env python3
"""The server's check for executors that left the ROS graph: two ways of asking, side by side in one run.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/presence_check.py [--robots 188] [--asked 116] [--reps 5]

An executor host serves --robots drones (real ExecuteSegment action servers, one process, as in ros_burst.py at
x4); a SegmentDispatcher in this process makes a client for --asked of them (the agents with a segment out in
the burst). Per repetition, order rotated: every client's ``server_is_ready()`` (goal, cancel and result services
plus feedback and status topics, per agent), the dispatcher's ``in_graph`` (one service count per agent) and its
``_identity`` (the status publisher's endpoint ids). The presence check every 0.5 s asked the first until this stop
and asks the second now; a goal's readiness check asked the first and the third and asks only the third now.
Prints each pass's wall time, the means and the two ratios; every way must find every agent.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from report import interrupt, start_executor_host  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=int, default=188)
    p.add_argument("--asked", type=int, default=116)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    agents = [f"drone_{i}" for i in range(args.robots)]
    host = start_executor_host(",".join(f"{a}:drone" for a in agents))
    import rclpy
    from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
    from rclpy.executors import SingleThreadedExecutor

    from timely_llm_ros.ros.segment_dispatcher import SegmentDispatcher

    rclpy.init()
    node = rclpy.create_node("presence_check_probe")
    dispatcher = SegmentDispatcher(node, lambda fn: None, MutuallyExclusiveCallbackGroup())
    asked = agents[:args.asked]
    clients = [dispatcher.client(a) for a in asked]
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(c.server_is_ready() for c in clients):
            executor.spin_once(timeout_sec=0.1)
        found = sum(c.server_is_ready() for c in clients)
        if found < len(clients):
            print(f"only {found} of {len(clients)} executors came up in 120 s", file=sys.stderr)
            return 1
        ways = {"server_is_ready": lambda: sum(c.server_is_ready() for c in clients),
                "in_graph": lambda: sum(dispatcher.in_graph(a) for a in asked),
                "identity": lambda: sum(bool(dispatcher._identity(a)) for a in asked)}
        times: dict[str, list[float]] = {w: [] for w in ways}
        for rep in range(args.reps):
            for way in list(ways)[rep % len(ways):] + list(ways)[:rep % len(ways)]:     # order rotated
                t0 = time.perf_counter()
                n = ways[way]()
                times[way].append(time.perf_counter() - t0)
                if n != len(asked):
                    print(f"{way} found {n} of {len(asked)}", file=sys.stderr)
                    return 1
            print(f"rep {rep + 1}: " + ", ".join(f"{w} {times[w][-1] * 1e3:.1f} ms" for w in ways), flush=True)
        mean = {w: statistics.fmean(v) for w, v in times.items()}
        print(f"\n{args.asked} agents asked ({args.robots} robots in the graph), mean of {args.reps} [min, max]: "
              + ", ".join(f"{w} {mean[w] * 1e3:.1f} ms [{min(v) * 1e3:.1f}, {max(v) * 1e3:.1f}]"
                          for w, v in times.items()))
        print(f"presence check (every 0.5 s): in_graph / server_is_ready {mean['in_graph'] / mean['server_is_ready']:.2f}x")
        print(f"per-goal readiness: identity / (server_is_ready + identity) "
              f"{mean['identity'] / (mean['server_is_ready'] + mean['identity']):.2f}x")
        return 0
    finally:
        interrupt(host)
        executor.shutdown()
        dispatcher.destroy()
        node.destroy_node()
        rclpy.shutdown()


if __name__ == "__main__":
    sys.exit(main())
