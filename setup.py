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
        ]
    },
)
