"""Where the package's data lives: the source checkout, or share/timely_llm_ros of a ROS install; and the one
folder where prepared models are cached, the same for both."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

PACKAGE = "timely_llm_ros"
SHARE_ENV = "TIMELY_LLM_ROS_SHARE"
MODEL_CACHE_ENV = "TIMELY_LLM_ROS_MODEL_CACHE"


@lru_cache(maxsize=None)
def share_dir() -> Path:
    """Directory holding config/ and models/ (TIMELY_LLM_ROS_SHARE overrides)."""
    env = os.environ.get(SHARE_ENV)
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
            f"cannot find {PACKAGE}'s config/: set {SHARE_ENV} to the folder holding config/ and models/"
        ) from exc


def config_dir() -> Path:
    """The config/ folder (fleet YAML, skill sets, execution-time profiles)."""
    return share_dir() / "config"


def default_model_dir() -> Path:
    """The embedded default planner model shipped with the package."""
    return share_dir() / "models" / "default_planner"


def model_cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding prepared models: GGUF files converted into HF folders (engine/models.py), and whatever
    else is derived from a model once and kept (adapters, merged folders). It does not depend on where the package
    runs from, so a venv over the checkout and a colcon install (copied or symlinked) find the same preparations.

    In order: ``override`` (the server's parameter model_cache_dir) when non-empty, else $TIMELY_LLM_ROS_MODEL_CACHE
    when set, else $XDG_CACHE_HOME/timely_llm_ros/models (~/.cache/timely_llm_ros/models). The folder may not
    exist yet: whoever writes into it creates it."""
    chosen = os.fspath(override) if override else os.environ.get(MODEL_CACHE_ENV, "")
    if chosen:
        return Path(chosen).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"   # XDG: a relative value is to be ignored
    return base / PACKAGE / "models"
