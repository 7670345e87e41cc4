"""Our ROS interface definitions: their defaults and result codes agree with the core, every field is documented,
and CMake and package.xml build them all. (Construction and serialization are rosidl's and not tested here.)

Needs the interfaces built into the venv (tools/build_interfaces.sh, run by the Makefile).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from timely_llm_ros.action import ExecuteSegment, Plan
from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.msg import PlanSegment

ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = sorted([*ROOT.glob("msg/*.msg"), *ROOT.glob("action/*.action")])
_CONSTANT = re.compile(r"^uint16\s+([A-Z_]+)\s*=\s*(\d+)")


def _result_constants(action_file: Path) -> dict[str, int]:
    """uint16 NAME=value lines of an action's Result section, read from the definition file."""
    _goal, result, _feedback = action_file.read_text().split("\n---\n")
    return {m[1]: int(m[2]) for line in result.splitlines() if (m := _CONSTANT.match(line.strip()))}


def test_segment_exec_time_is_minus_one_until_executed():
    segment = PlanSegment()
    assert segment.exec_time == -1.0 and not segment.executed


def test_plan_result_constants_are_exactly_the_core_error_codes():
    declared = _result_constants(ROOT / "action" / "Plan.action")
    expected = {("ERROR_NONE" if code is ErrorCode.NONE else code.name): int(code) for code in ErrorCode}
    assert declared == expected
    for name, value in expected.items():
        assert getattr(Plan.Result, name) == value, name


def test_execute_segment_error_codes_are_distinct():
    declared = _result_constants(ROOT / "action" / "ExecuteSegment.action")
    assert set(declared) == {"ERROR_NONE", "UNKNOWN_SKILL", "BUSY", "CANCELLED", "FAILED", "NOT_RUN", "PREEMPTED"}
    assert len(set(declared.values())) == len(declared) and declared["ERROR_NONE"] == 0
    assert all(getattr(ExecuteSegment.Result, k) == v for k, v in declared.items())


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_every_field_and_constant_is_documented(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("#") or text == "---":
            continue
        previous = lines[i - 1].strip() if i else ""
        is_error_constant = _CONSTANT.match(text) and (previous.startswith("#") or _CONSTANT.match(previous))
        assert previous.startswith("#") or is_error_constant, f"{path.name}:{i + 1} {text!r} has no comment"


def test_cmake_generates_every_definition_file():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    listed = set(re.findall(r'"((?:msg|action)/\w+\.(?:msg|action))"', cmake))
    assert listed == {str(p.relative_to(ROOT)) for p in DEFINITIONS}


def test_package_xml_is_a_valid_format_3_interface_package():
    from catkin_pkg.package import parse_package

    package = parse_package(str(ROOT / "package.xml"))
    package.validate()
    assert package.name == "timely_llm_ros" and package.package_format == 3
    assert [g.name for g in package.member_of_groups] == ["rosidl_interface_packages"]
    assert package.get_build_type() == "ament_cmake"
    build = {d.name for d in package.buildtool_depends + package.build_depends}
    run = {d.name for d in package.exec_depends}
    assert {"ament_cmake", "rosidl_default_generators", "builtin_interfaces", "action_msgs"} <= build
    assert {"rosidl_default_runtime", "rclpy", "builtin_interfaces", "action_msgs", "python3-yaml"} <= run
