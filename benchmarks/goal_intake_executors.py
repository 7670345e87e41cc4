#!/usr/bin/env python3
"""Goal intake of a bare Plan action server under three rclpy executor layouts, side by side (a design probe).

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/goal_intake_executors.py [--goals 200] [--hold 3] [--reps 3]
        [--modes threads,coroutines,events]

The plan server's own layout holds one thread per open goal on a MultiThreadedExecutor (docs/server.md). This
probe measures what an event-driven goal path could gain, without the engine or the scheduler: one process, an
action server whose execute callback registers the goal, waits until a completer thread ends it ``--hold``
seconds after the burst (as the scheduler would), and succeeds; a client on its own executor sends ``--goals``
goals at once (deep queues on both sides, as the server has). Layouts:
  threads     MultiThreadedExecutor, goals + 16 threads, a blocking execute callback (the server's layout);
  coroutines  SingleThreadedExecutor, an ``async`` execute callback awaiting an rclpy Future that the completer
              sets, then ``executor.wake()`` (nothing else wakes an executor whose task's future completes from
              another thread);
  events      the same coroutine on rclpy's experimental EventsExecutor.
Every executor is spun by short spin_once calls on its own thread, as the nodes do (ros/spin.py). Each run is its
own process (killed after 60 s; a run that does not finish is reported as such). Printed per run:
the span over which the execute callbacks started (intake) per goal, when the last result reached the client,
and the process CPU seconds; then the mean per layout and the ratio to ``threads``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def spin_forever(executor) -> None:
    """Spin as the nodes do (ros/spin.py): short spin_once calls. With the EventsExecutor's own blocking spin()
    on a thread, this probe's process stopped making progress (no thread printed or answered)."""
    while True:
        executor.spin_once(timeout_sec=0.05)


def run_one(mode: str, n: int, hold: float) -> dict:
    """One burst in this process; returns its figures (called in a child process)."""
    import rclpy
    from rclpy.action import ActionServer, GoalResponse
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from rclpy.task import Future

    from timely_llm_ros.action import Plan
    from timely_llm_ros.ros.action_client import ActionClient, deep_queues

    rclpy.init()
    node = rclpy.create_node("intake_probe_server")
    deep = QoSProfile(depth=4096)
    queues = {f"{name}_qos_profile": deep for name in ("goal_service", "result_service", "cancel_service")}
    started: list[float] = []
    to_end: list = []
    lock = threading.Lock()
    burst_at = [float("inf")]

    def completer() -> None:          # the scheduler's part: ends every registered goal `hold` s after the burst
        while True:
            time.sleep(0.002)
            if time.monotonic() < burst_at[0] + hold:
                continue
            with lock:
                items, to_end[:] = list(to_end), []
            for end in items:
                end()

    if mode == "threads":
        executor = MultiThreadedExecutor(num_threads=n + 16)

        def execute(goal_handle):
            started.append(time.monotonic())
            done = threading.Event()
            with lock:
                to_end.append(done.set)
            done.wait()
            goal_handle.succeed()
            return Plan.Result()
        ActionServer(node, Plan, "plan", execute_callback=execute, goal_callback=lambda _: GoalResponse.ACCEPT,
                     callback_group=ReentrantCallbackGroup(), **queues)
    else:
        if mode == "events":
            from rclpy.experimental.events_executor import EventsExecutor
            executor = EventsExecutor()
        else:
            executor = SingleThreadedExecutor()

        async def execute(goal_handle):
            started.append(time.monotonic())
            done = Future(executor=executor)
            with lock:
                to_end.append(lambda: (done.set_result(True), executor.wake()))
            await done
            goal_handle.succeed()
            return Plan.Result()
        ActionServer(node, Plan, "plan", execute_callback=execute, goal_callback=lambda _: GoalResponse.ACCEPT,
                     **queues)
    executor.add_node(node)
    threading.Thread(target=spin_forever, args=(executor,), daemon=True).start()
    threading.Thread(target=completer, daemon=True).start()

    client_node = rclpy.create_node("intake_probe_client")
    client = ActionClient(client_node, Plan, "plan", **deep_queues(4096))
    client_executor = SingleThreadedExecutor()
    client_executor.add_node(client_node)
    threading.Thread(target=spin_forever, args=(client_executor,), daemon=True).start()
    client.wait_until_answering(timeout_sec=20)
    time.sleep(1.0)
    results: list[float] = []

    def on_response(future) -> None:
        client.result_async(future.result()).add_done_callback(lambda _: results.append(time.monotonic()))

    cpu0 = time.process_time()
    t0 = burst_at[0] = time.monotonic()
    for i in range(n):
        client.send_goal_async(Plan.Goal(agent_id=f"d{i}")).add_done_callback(on_response)
    deadline = t0 + hold + 40
    while len(results) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"mode": mode, "started": len(started), "results": len(results),
            "intake_ms_per_goal": (max(started) - min(started)) / max(len(started) - 1, 1) * 1e3 if started else None,
            "intake_last_ms": (max(started) - t0) * 1e3 if started else None,
            "last_result_s": max(results) - t0 if results else None, "cpu_s": time.process_time() - cpu0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--goals", type=int, default=200)
    p.add_argument("--hold", type=float, default=3.0, help="seconds every goal stays open after the burst")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--modes", default="threads,coroutines,events")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child, args.goals, args.hold)), flush=True)
        os._exit(0)          # executors spin on daemon threads; nothing to tear down for a probe
    modes = [m for m in args.modes.split(",") if m]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    got: dict[str, list[dict]] = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in modes[rep % len(modes):] + modes[:rep % len(modes)]:       # order rotated per repetition
            try:
                out = subprocess.run([sys.executable, __file__, "--child", mode, "--goals", str(args.goals),
                                      "--hold", str(args.hold)], capture_output=True, text=True, timeout=60 + args.hold,
                                     env=env)
                row = json.loads(out.stdout.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError):
                row = {"mode": mode, "started": None, "results": 0, "intake_ms_per_goal": None}
            got[mode].append(row)
            if row["results"] == args.goals:
                print(f"rep {rep + 1} {mode:10s} intake {row['intake_ms_per_goal']:.2f} ms a goal (last at "
                      f"{row['intake_last_ms']:.0f} ms), last result {row['last_result_s']:.2f} s, CPU "
                      f"{row['cpu_s']:.2f} s", flush=True)
            else:
                print(f"rep {rep + 1} {mode:10s} did not finish: {row.get('started')} goals started, "
                      f"{row['results']} of {args.goals} results", flush=True)
    ok = {m: [r for r in rows if r["results"] == args.goals] for m, rows in got.items()}
    base = statistics.fmean(r["intake_ms_per_goal"] for r in ok["threads"]) if ok.get("threads") else None
    print(f"\n{args.goals} goals at once, each held open {args.hold:g} s; mean of the finished runs:")
    for m, rows in ok.items():
        if not rows:
            print(f"  {m:10s} no run finished")
            continue
        per_goal = [r["intake_ms_per_goal"] for r in rows]
        intake = statistics.fmean(per_goal)
        cpu = statistics.fmean(r["cpu_s"] for r in rows)
        ratio = f" ({intake / base:.2f}x threads)" if base else ""
        print(f"  {m:10s} intake {intake:.2f} ms a goal [{min(per_goal):.2f}, {max(per_goal):.2f}]{ratio}, "
              f"CPU {cpu:.2f} s ({len(rows)} of {args.reps} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
