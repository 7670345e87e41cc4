"""pip install for the venv workflow (`make demo` / `make test`); colcon builds use CMakeLists.txt."""
from setuptools import find_packages, setup

setup(
    name="timely_llm_ros",
    version="0.1.0",
    description="Deadline-aware segmented LLM planning for robot fleets over ROS 2 (TimelyLLM and baselines)",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["timely_llm_ros", "timely_llm_ros.*"]),
    include_package_data=False,
    entry_points={
        "console_scripts": [
            "timely_server = timely_llm_ros.ros.server.node:main",
            "robot_executor = timely_llm_ros.ros.executor.node:main",
            "fleet_workload = timely_llm_ros.ros.fleet.workload_node:main",
            "timely_bringup = timely_llm_ros.ros.fleet.bringup:main",
            "timely_adapt = timely_llm_ros.adapt.train:main",
        ],
        # scheduling policies (core/policies/registry.py; BUILTIN_POLICIES lists the same for a source tree)
        "timely_llm_ros.policies": [
            "timely = timely_llm_ros.core.policies.timely:TimelyPolicy",
            "edf = timely_llm_ros.core.policies.edf:SegmentedEdf",
            "fcfs = timely_llm_ros.core.policies.fcfs:SegmentedFcfs",
            "fcfs-stream = timely_llm_ros.core.policies.fcfs:FcfsStream",
            "fcfs-whole-plan = timely_llm_ros.core.policies.fcfs:FcfsWholePlan",
            "slice = timely_llm_ros.core.policies.slice:SlicePolicy",
            "semantic = timely_llm_ros.core.policies.semantic:SemanticPolicy",
            "rtlm = timely_llm_ros.core.policies.rtlm:RtlmPolicy",
            "fifo-static = timely_llm_ros.core.policies.rtlm:FifoStatic",
            "timebill = timely_llm_ros.core.policies.timebill:TimeBillPolicy",
        ],
    },
)
