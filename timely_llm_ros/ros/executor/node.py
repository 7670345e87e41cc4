"""robot_executor: the simulated robot executor (scripts/robot_executor), one per robot namespace.

Serves <namespace>/execute_segment with SimulatedExecutorNode (ros/executor/sim.py), a subclass of the executor
API for real robots (ros/executor/base.py, docs/executor.md). Parameters: robot_type, time_scale, seed, the
fault-injection parameters, and the base's queue_size / plan_rule / feedback_period_s / shutdown_grace_s.
"""
from __future__ import annotations

import sys

from timely_llm_ros.ros.executor.run import run_executor
from timely_llm_ros.ros.executor.sim import SimulatedExecutorNode

RobotExecutorNode = SimulatedExecutorNode  # the name this module always had


def main(args: list[str] | None = None) -> int:
    return run_executor(SimulatedExecutorNode, args)


if __name__ == "__main__":
    sys.exit(main())
