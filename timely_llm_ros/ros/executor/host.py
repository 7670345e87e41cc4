"""Many simulated executors in one process (one node per robot namespace): large fleets and `make stress`.

    python -m timely_llm_ros.ros.executor.host --agents drone_1:drone,arm_1:arm --ros-args -p time_scale:=0.05

Every ``-p`` applies to all of them (robot_type comes from ``--agents``).
"""
from __future__ import annotations

import argparse
import sys

from rclpy.parameter import Parameter

from timely_llm_ros.ros.executor.run import run_executor
from timely_llm_ros.ros.executor.sim import SimulatedExecutorNode


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    ros_args = argv[argv.index("--ros-args"):] if "--ros-args" in argv else []
    own = argv[1:len(argv) - len(ros_args)]
    parser = argparse.ArgumentParser(prog="executor host", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", required=True, help="comma-separated namespace:robot_type")
    opts = parser.parse_args(own)
    agents = [a.split(":", 1) for a in opts.agents.split(",") if a]
    if not agents or any(len(a) != 2 for a in agents):
        parser.error("--agents needs namespace:robot_type entries")

    def make():
        return [SimulatedExecutorNode(namespace=f"/{ns}", parameter_overrides=[Parameter("robot_type", value=rt)])
                for ns, rt in agents]
    return run_executor(make, [argv[0], *ros_args], num_threads=4)


if __name__ == "__main__":
    sys.exit(main())
