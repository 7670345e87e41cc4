"""LLM engines implementing the core's engine interface (core/engine.py)."""
import os as _os

from timely_llm_ros.core.engine import Engine, EngineError, MemoryStats, StepResult


def _torch_cache_outside_tmp() -> None:
    """Loading a model makes torch create its inductor cache folder, by default /tmp/torchinductor_<user>, which
    would stay behind after every run: keep it under the checkout's build/ (or ~/.cache for an install)."""
    if "TORCHINDUCTOR_CACHE_DIR" in _os.environ:
        return
    from pathlib import Path

    from timely_llm_ros.paths import share_dir

    build = share_dir() / "build"
    root = build if _os.access(build if build.exists() else build.parent, _os.W_OK) else \
        Path(_os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "timely_llm_ros"
    _os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "torch_inductor")


_torch_cache_outside_tmp()

__all__ = ["Engine", "EngineError", "MemoryStats", "StepResult"]
