"""This package's layout under a colcon install prefix, reproduced in seconds instead of built in minutes.

``reproduce_install(source, prefix, symlink)`` lays out what CMakeLists.txt's install rules and ament_package put
under ``<prefix>`` (colcon's ``install/timely_llm_ros``): the Python sources in lib/pythonX.Y/site-packages, the
data folders and package.xml in share/timely_llm_ros, the node scripts in lib/timely_llm_ros and the ament index
marker; copied, or linked file by file like ``colcon build --symlink-install``. The folder and script lists are read
from CMakeLists.txt itself. Not reproduced: the rosidl-generated interfaces (timely_llm_ros.msg/.action), which the
package still imports from the venv next to the installed sources (the package's __init__ extends its path), and
the setup scripts (the environment is set by hand: PYTHONPATH and AMENT_PREFIX_PATH, ``install_env``).
test_install_layout.py checks this reproduction against a real colcon install when it runs under one.

``layout_report()`` says where the package finds its data and models from wherever it is imported; run as a
script (``python install_layout.py report``) it prints that report as JSON, for a process started in a layout.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
from pathlib import Path

PACKAGE = "timely_llm_ros"
PYTHON_DIR = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def install_rules(source: Path) -> tuple[list[str], list[str]]:
    """(data folders installed to share/<package>, scripts installed to lib/<package>) as CMakeLists.txt names
    them; ValueError when the rules no longer have the shape this reproduction follows."""
    text = (source / "CMakeLists.txt").read_text(encoding="utf-8")
    data = re.search(r"foreach\(data_dir\s+([^)]*)\)", text)
    programs = re.search(r"install\(PROGRAMS\s+(.*?)\s+DESTINATION\s+lib/\$\{PROJECT_NAME\}", text, re.S)
    python = re.search(r"install\(DIRECTORY\s+\$\{PROJECT_NAME\}/\s+DESTINATION\s+\"\$\{PYTHON_INSTALL_DIR\}", text)
    if not (data and programs and python):
        raise ValueError("CMakeLists.txt's install rules changed shape: update test/install_layout.py to lay out "
                         "what they install")
    return data.group(1).split(), programs.group(1).split()


def _place(src: Path, dst: Path, symlink: bool) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if symlink:
        dst.symlink_to(src.resolve())
    else:
        shutil.copy2(src, dst)


def _place_tree(src: Path, dst: Path, symlink: bool) -> None:
    """Every file under src (no __pycache__, no .pyc), as install(DIRECTORY ...) with those EXCLUDE patterns does."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        _place(path, dst / rel, symlink)


def reproduce_install(source: Path, prefix: Path, symlink: bool = False) -> Path:
    """Lay out the package from the checkout ``source`` under ``prefix`` (see the module's docstring); returns
    prefix."""
    data_dirs, programs = install_rules(source)
    share = prefix / "share" / PACKAGE
    _place_tree(source / PACKAGE, prefix / PYTHON_DIR / PACKAGE, symlink)
    for name in data_dirs:
        if (source / name).is_dir():
            _place_tree(source / name, share / name, symlink)
    for script in programs:
        _place(source / script, prefix / "lib" / PACKAGE / Path(script).name, symlink)
    _place(source / "package.xml", share / "package.xml", symlink)
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("", encoding="utf-8")
    return prefix


def install_env(prefix: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` as sourcing <prefix>'s setup script would change it for this package: its site-packages first on
    PYTHONPATH (nothing else there: not the checkout), the prefix first on AMENT_PREFIX_PATH, no share override."""
    env = {k: v for k, v in base.items() if k != "TIMELY_LLM_ROS_SHARE"}
    env["PYTHONPATH"] = str(prefix / PYTHON_DIR)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(p for p in (str(prefix), base.get("AMENT_PREFIX_PATH", "")) if p)
    return env


def launch_file_paths(launch_file: Path, share: Path) -> list[Path]:
    """The paths a launch file builds as os.path.join(get_package_share_directory(...), "a", "b"), under share."""
    found = []
    for node in ast.walk(ast.parse(launch_file.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join" and node.args
                and isinstance(node.args[0], ast.Call)
                and ast.unparse(node.args[0].func) == "get_package_share_directory"
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:])):
            found.append(share.joinpath(*(a.value for a in node.args[1:])))
    return found


def layout_report() -> dict:
    """Where the imported package finds its sources, data, launch files, skill sets and models (JSON-ready)."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    import timely_llm_ros.paths as paths
    from timely_llm_ros.action import Plan
    from timely_llm_ros.core.models import load_model_specs
    from timely_llm_ros.core.robot_types import load_robot_types
    from timely_llm_ros.engine.models import weights_folder

    try:
        ament_share: str | None = get_package_share_directory(PACKAGE)
    except (PackageNotFoundError, OSError):     # not in an ament prefix (OSError: no AMENT_PREFIX_PATH at all)
        ament_share = None
    models = {}
    for name, spec in load_model_specs().items():
        try:
            models[name] = {"folder": str(weights_folder(spec, convert=False)), "gguf": spec.gguf is not None}
        except FileNotFoundError as exc:
            models[name] = {"error": str(exc), "gguf": spec.gguf is not None}
    launch = {}
    if ament_share is not None:
        for path in sorted((Path(ament_share) / "launch").glob("*.launch.py")):
            launch[path.name] = [str(p) for p in launch_file_paths(path, Path(ament_share))]
    robot_types = load_robot_types()
    return {
        "package": paths.__file__,
        "share": str(paths.share_dir()),
        "ament_share": ament_share,
        "model_cache": str(paths.model_cache_dir()),
        "models": models,
        "embedded_planner": str(paths.default_model_dir()),
        "robot_types": sorted(robot_types.skill_sets),
        "exec_profiles": sorted(robot_types.exec_models),
        "launch": launch,
        "interfaces": Plan.__module__,
    }


if __name__ == "__main__":
    if sys.argv[1:] != ["report"]:
        sys.exit("usage: install_layout.py report")
    print(json.dumps(layout_report()))
