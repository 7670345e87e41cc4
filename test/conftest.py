"""Test session setup: each session gets its own ROS domain on loopback, logs under build/."""
import os
import random
import sys
from pathlib import Path

import pytest

# the repository root: tests import tools/ (the embedded planner's trainer, the demo timeline) besides the package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    # pytest-xdist workers inherit the session's domain: each takes one of its own next to it, so two workers'
    # servers (both /timely_server) never meet
    _worker = int(os.environ["PYTEST_XDIST_WORKER"][2:])
    os.environ["ROS_DOMAIN_ID"] = str((int(os.environ["ROS_DOMAIN_ID"]) + 1 + _worker) % 200 + 1)
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_LOG_DIR", str(Path(__file__).resolve().parent.parent / "build" / "ros_log"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """tmp_path folders under the checkout's build/ (ignored), not /tmp/pytest-of-<user>: two sessions on one
    machine (two clones, make test beside colcon test) then never clean up each other's folders."""
    if not config.option.basetemp:
        base = Path(__file__).resolve().parent.parent / "build" / "pytest_tmp"
        base.parent.mkdir(parents=True, exist_ok=True)    # a colcon workspace's copy of the package has no build/:
        config.option.basetemp = str(base)                # pytest makes the basetemp, but not its parents


def pytest_sessionfinish(session, exitstatus) -> None:
    """Remove this session's tmp_path folders (pytest.ini puts them under build/pytest_tmp) when it ends."""
    import shutil

    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None) if factory is not None else None
    if basetemp is not None:
        shutil.rmtree(basetemp, ignore_errors=True)
