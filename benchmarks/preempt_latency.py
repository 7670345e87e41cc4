#!/usr/bin/env python3
"""How long a more urgent plan waits for a robot that runs another plan (plan_rule urgent_preempts), with the
shipped executors: from the moment its first segment is sent with ``preempts`` (the planner server sends it the
moment it decides to preempt) to the moment that segment starts on the robot, its first skill called right after.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/preempt_latency.py [--trials 100]

Each trial: plan a's segment ``d(60);`` (hover 60 s) starts; 10-50 ms into it plan u's segment ``tp();`` is sent
with preempts. The running skill is interrupted as by a cancel (``ctx.sleep`` raises), so u starts at once instead
of 60 s later. Start times are the executor's own (its log_timing lines, CLOCK_MONOTONIC, which this process shares).
Prints p50, p99 and max per executor of three moments after u is sent: u received by the executor, the
preempted segment ended, u started.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rclpy  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402

from timely_llm_ros.action import ExecuteSegment  # noqa: E402
from timely_llm_ros.msg import Skill  # noqa: E402

EXECUTORS = {"simulated": "timely_llm_ros.ros.executor.node", "kinematic": "timely_llm_ros.ros.executor.kinematic"}
_TIMING = re.compile(r"segment timing (\S+) (\d+) (received|started|ended) ([\d.]+)")


class Executor:
    """One shipped executor in its own process; the start times it logs."""

    def __init__(self, module: str, ns: str) -> None:
        args = [sys.executable, "-m", module, "--ros-args", "-r", f"__ns:=/{ns}", "-r", "__node:=executor",
                "-p", "plan_rule:=urgent_preempts", "-p", "log_timing:=true"]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.times: dict[tuple[str, str], float] = {}    # (plan, received|started|ended) -> its segment 0's
        self.ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            if "executor ready" in line:
                self.ready.set()
            m = _TIMING.search(line)
            if m is not None and m.group(2) == "0":
                self.times[(m.group(1), m.group(3))] = float(m.group(4))

    def stop(self) -> None:
        self.proc.send_signal(2)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _goal(plan: str, text: str, preempts: bool) -> ExecuteSegment.Goal:
    name = text.split("(")[0]
    return ExecuteSegment.Goal(request_id=plan, index=0, text=text, skills=[Skill(name=name, args=[])],
                               expected_duration=1.0, preempts=preempts)


def _wait(future, timeout: float):
    end = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > end:
            raise TimeoutError("no answer from the executor")
        time.sleep(0.001)
    return future.result()


def measure(name: str, module: str, trials: int, rng: random.Random) -> list[tuple[float, float, float]]:
    """Per trial, seconds from sending the preempting segment u to: its arrival at the executor, the end of the
    preempted segment a, u's start on the robot."""
    robot = Executor(module, f"preempt_{name}")
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("preempt_latency", context=context)
    client = ActionClient(node, ExecuteSegment, f"/preempt_{name}/execute_segment")
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    out: list[float] = []
    try:
        if not robot.ready.wait(120) or not client.wait_for_server(timeout_sec=30):
            raise RuntimeError(f"the {name} executor did not come up")
        for i in range(trials):
            running = threading.Event()
            handle = _wait(client.send_goal_async(_goal(f"a{i}", "d(60);", False),
                                                  feedback_callback=lambda fb: running.set()), 10)
            if not running.wait(10):
                raise RuntimeError(f"plan a{i} did not start")
            time.sleep(rng.uniform(0.01, 0.05))
            sent = time.monotonic()
            urgent = _wait(client.send_goal_async(_goal(f"u{i}", "tp();", True)), 10)
            a = _wait(handle.get_result_async(), 10).result
            u = _wait(urgent.get_result_async(), 10).result
            if a.error_code != ExecuteSegment.Result.PREEMPTED or not u.success:
                raise RuntimeError(f"trial {i}: a ended {a.error_code} ({a.error_message}), u {u.error_message}")
            end = time.monotonic() + 5
            while (f"u{i}", "started") not in robot.times and time.monotonic() < end:
                time.sleep(0.001)
            out.append((robot.times[(f"u{i}", "received")] - sent, robot.times[(f"a{i}", "ended")] - sent,
                        robot.times[(f"u{i}", "started")] - sent))
    finally:
        executor.shutdown(timeout_sec=5)
        client.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)
        robot.stop()
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--executors", default=",".join(EXECUTORS), help="which of: " + ", ".join(EXECUTORS))
    opts = p.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rng = random.Random(opts.seed)
    print(f"ms after the preempting segment u is sent, {opts.trials} trials: p50 / p99 / max")
    print(f"{'executor':<10} {'u received':>20} {'preempted a ended':>20} {'u started':>20}")
    for name in opts.executors.split(","):
        runs = measure(name, EXECUTORS[name], opts.trials, rng)
        cols = []
        for k in range(3):
            ms = [1000 * r[k] for r in runs]
            cols.append(f"{_quantile(ms, 0.5):.1f} / {_quantile(ms, 0.99):.1f} / {max(ms):.1f}")
        print(f"{name:<10} {cols[0]:>20} {cols[1]:>20} {cols[2]:>20}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
