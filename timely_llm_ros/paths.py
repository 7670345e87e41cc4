"""Where the package's data lives: the source checkout, or share/timely_llm_ros of a ROS install."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

PACKAGE = "timely_llm_ros"


@lru_cache(maxsize=None)
def share_dir() -> Path:
    """Directory holding config/ and models/ (TIMELY_LLM_ROS_SHARE overrides)."""
    env = os.environ.get("TIMELY_LLM_ROS_SHARE")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "config").is_dir():
        return checkout
    try:  # installed by colcon: <prefix>/share/timely_llm_ros
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE))
    except Exception as exc:  # pragma: no cover - only on broken installs
        raise FileNotFoundError(
            f"cannot find {PACKAGE}'s config/: set TIMELY_LLM_ROS_SHARE to the folder holding config/ and models/"
        ) from exc


def config_dir() -> Path:
    """The config/ folder (fleet YAML, skill sets, execution-time profiles)."""
    return share_dir() / "config"


def default_model_dir() -> Path:
    """The embedded default planner model shipped with the package."""
    return share_dir() / "models" / "default_planner"
