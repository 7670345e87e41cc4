"""From a colcon install's layout, copied or linked like --symlink-install, the package finds its config, skill sets,
launch files and the same prepared models as from the checkout's venv, and the server configures with
model:=smollm2 from there.

The rest of `make test` runs from the venv layout only. Building with colcon takes minutes (`make colcon-test` does
it); this reproduces the install layout in seconds (install_layout.py) and runs the package from it in processes of
their own, started outside the checkout with the environment a sourced install gives. Under `colcon test` the last
test also checks that reproduction against the real install (colcon test imports the package from the source
folder it runs in, so the rest of the suite does not run from the install)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from install_layout import PACKAGE, PYTHON_DIR, install_env, install_rules, layout_report, reproduce_install
from ros_harness import REPO, NodeProcess, ros_env

HERE = Path(__file__).resolve().parent
LAYOUTS = ("copied", "symlinked")


@pytest.fixture(scope="module")
def venv_report() -> dict:
    """What this process, imported from the checkout (the venv layout), finds."""
    return layout_report()


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory) -> dict[str, Path]:
    """The package laid out under install/timely_llm_ros of a workspace, once per layout."""
    return {layout: reproduce_install(REPO, tmp_path_factory.mktemp(layout) / "install" / PACKAGE,
                                      symlink=layout == "symlinked") for layout in LAYOUTS}


def report_from(prefix: Path, cwd: Path) -> dict:
    """layout_report() of a process importing the package from ``prefix``, started in ``cwd``."""
    run = subprocess.run([sys.executable, str(HERE / "install_layout.py"), "report"], cwd=cwd,
                         env=install_env(prefix, ros_env()), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def reports(prefixes, tmp_path_factory) -> dict[str, dict]:
    return {layout: report_from(prefix, tmp_path_factory.mktemp(f"cwd_{layout}")) for layout, prefix in
            prefixes.items()}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_package_imports_from_the_install_and_the_ament_index_names_its_share_folder(layout, prefixes, reports):
    prefix, report = prefixes[layout], reports[layout]
    assert Path(report["package"]).parent == prefix / PYTHON_DIR / PACKAGE
    assert report["ament_share"] == str(prefix / "share" / PACKAGE)
    assert report["interfaces"].startswith(f"{PACKAGE}.action")
    # copied: the share folder; linked: the sources the links point at (the checkout)
    expected_share = prefix / "share" / PACKAGE if layout == "copied" else REPO
    assert Path(report["share"]).resolve() == expected_share.resolve()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_model_entry_resolves_and_prepared_models_are_the_venvs_own_folders(layout, reports, venv_report):
    report = reports[layout]
    for name, entry in venv_report["models"].items():
        assert "folder" in entry, f"model {name!r} is not ready in the venv layout either: {entry.get('error')}"
        got = report["models"][name]
        assert "folder" in got, f"{layout} install: {got['error']}"
        if entry["gguf"]:       # prepared once (make setup), found from both layouts
            assert got["folder"] == entry["folder"]
        else:                   # shipped with the package: inside the layout's own share folder
            assert Path(got["folder"]).is_relative_to(report["share"])
    assert report["model_cache"] == venv_report["model_cache"]
    assert (Path(report["embedded_planner"]) / "config.json").is_file()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_skill_sets_profiles_and_the_launch_files_paths_resolve(layout, reports, venv_report):
    report = reports[layout]
    assert report["robot_types"] == venv_report["robot_types"]
    assert report["exec_profiles"] == venv_report["exec_profiles"]
    assert sorted(report["launch"]) == sorted(p.name for p in (REPO / "launch").glob("*.launch.py"))
    for launch_file, named in report["launch"].items():
        missing = [p for p in named if not Path(p).exists()]
        assert not missing, f"{launch_file} names files the install lacks: {missing}"


def test_the_server_configures_with_smollm2_from_the_installed_layout(prefixes, venv_report, tmp_path):
    """The installed node script (lib/timely_llm_ros/timely_server, what `ros2 run` starts), outside the checkout."""
    if "folder" not in venv_report["models"]["smollm2"]:
        pytest.fail(f"{venv_report['models']['smollm2']['error']} (make test prepares it)")
    prefix = prefixes["copied"]
    server = NodeProcess(str(prefix / "lib" / PACKAGE / "timely_server"),
                         ["-r", "__node:=timely_server", "-p", "model:=smollm2", "-p", "num_threads:=1",
                          "-p", "hardware_fit:=false"],
                         "timely_server ready", env=install_env(prefix, ros_env()), cwd=tmp_path)
    try:
        server.wait_ready(180)
        out = server.output()
    finally:
        server.stop()
    assert "grammar-constrained decoding on (grammar=auto, model entry 'smollm2')" in out
    assert "converting" not in out, out[-3000:]     # it loaded the folder make setup prepared


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if not p.is_dir() and "__pycache__" not in p.parts}


def test_the_reproduced_layout_holds_what_the_real_colcon_install_holds(prefixes):
    """Runs under `colcon test` (make colcon-test), whose environment names the package's install prefix."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        real = Path(get_package_share_directory(PACKAGE)).parent.parent
    except (PackageNotFoundError, OSError):
        pytest.skip("no colcon install of the package on AMENT_PREFIX_PATH: make colcon-test runs this check")
    if not (real / "lib" / PACKAGE).is_dir():
        pytest.skip(f"{real} holds only the package's interfaces (tools/build_interfaces.sh), not a colcon install")
    ours = prefixes["copied"]
    data_dirs, _ = install_rules(REPO)
    for part in [Path("lib") / PACKAGE, *(Path("share") / PACKAGE / d for d in data_dirs)]:
        assert _files(ours / part) == _files(real / part), part
    # the sources; the real install also holds the interfaces rosidl generated (msg/, action/ and their type
    # support libraries next to them), which the venv provides to the reproduction
    ours_sources, real_sources = _files(ours / PYTHON_DIR / PACKAGE), _files(real / PYTHON_DIR / PACKAGE)
    assert ours_sources <= real_sources
    assert {p for p in real_sources if p.suffix == ".py" and p.parts[0] not in ("msg", "action")} <= ours_sources
    assert (real / "share" / PACKAGE / "package.xml").is_file()
