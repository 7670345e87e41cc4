"""Send one Plan goal from a plain rclpy node and print what comes back: each segment as it is generated, then what
the robot ran and the value the plan returned.

    python examples/rover/plan_client.py rover_1 "is there a cat here? if so, take a photo of it" \\
        --scene "room: living room; objects: sofa, table, lamp"

The client is rclpy's ActionClient with the project's fixes (timely_llm_ros/ros/action_client.py): the same API,
plus ``wait_until_answering`` (a handshake after ``wait_for_server``: a goal sent right after discovery can lose its
goal response) and ``result_async`` (asks again if a result was lost). With rclpy's own ActionClient the code is
the same with ``wait_for_server`` and ``goal_handle.get_result_async()`` (docs/server.md says what that risks).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from timely_llm_ros.action import Plan
from timely_llm_ros.ros.action_client import ActionClient


def show_feedback(message) -> None:
    fb = message.feedback
    if fb.new_segment:
        seg = fb.segment
        print(f"  segment {seg.index}: {seg.text}   (estimate {seg.estimated_exec_time:.2f} s)")


def wait(future):
    """The future's value once the spinning thread has completed it."""
    while not future.done():
        time.sleep(0.01)
    return future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agent_id", help="the robot's namespace, e.g. rover_1")
    parser.add_argument("task")
    parser.add_argument("--scene", default="", help="what the robot sees (goal field context)")
    parser.add_argument("--robot-type", default="rover")
    parser.add_argument("--urgency", default="normal", help="an urgency class of config/urgency_classes.yaml")
    args = parser.parse_args(argv)
    rclpy.init()
    node = rclpy.create_node("rover_plan_client")
    client = ActionClient(node, Plan, "/plan")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)    # takes responses, feedback and results
    spin.start()
    try:
        if not client.wait_until_answering(timeout_sec=30.0):
            print("no /plan server answered within 30 s: is timely_server running (same ROS_DOMAIN_ID)?",
                  file=sys.stderr)
            return 1
        goal = Plan.Goal(agent_id=args.agent_id, robot_type=args.robot_type, task=args.task, context=args.scene,
                         urgency_class=args.urgency)
        handle = wait(client.send_goal_async(goal, feedback_callback=show_feedback))
        if not handle.accepted:
            print("goal not accepted", file=sys.stderr)
            return 1
        result = wait(client.result_async(handle)).result
        print(f"error_code {result.error_code} {result.error_message}".rstrip())
        print(f"plan: {result.plan}")
        for seg in result.segments:
            ran = " ".join(f"{s.name}({', '.join(s.args)})" for s in seg.executed_skills) or "-"
            print(f"  segment {seg.index} ran in {seg.exec_time:.2f} s: {ran}")
        print(f"returned: {result.return_value!r}" if result.returned else "returned: nothing")
        return 0 if result.error_code == Plan.Result.ERROR_NONE else 1
    finally:
        executor.shutdown(timeout_sec=5.0)
        spin.join(5.0)
        client.destroy()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
