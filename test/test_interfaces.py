"""The generated ROS interfaces: they import, construct, agree with the core's error codes, and serialize.

Needs the interfaces built into the venv (tools/build_interfaces.sh, run by the Makefile).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from rclpy.serialization import deserialize_message, serialize_message

from timely_llm_ros.action import ExecuteSegment, Plan
from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.msg import ExecutorStatus, PlanSegment, RequestStatus, SchedulerState, Skill

ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = sorted([*ROOT.glob("msg/*.msg"), *ROOT.glob("action/*.action")])
_CONSTANT = re.compile(r"^uint16\s+([A-Z_]+)\s*=\s*(\d+)")


def _result_constants(action_file: Path) -> dict[str, int]:
    """uint16 NAME=value lines of an action's Result section, read from the definition file."""
    _goal, result, _feedback = action_file.read_text().split("\n---\n")
    return {m[1]: int(m[2]) for line in result.splitlines() if (m := _CONSTANT.match(line.strip()))}


@pytest.mark.parametrize("cls", [
    Skill, PlanSegment, RequestStatus, SchedulerState, ExecutorStatus,
    Plan.Goal, Plan.Result, Plan.Feedback, ExecuteSegment.Goal, ExecuteSegment.Result, ExecuteSegment.Feedback,
])
def test_every_generated_type_default_constructs_and_serializes(cls):
    msg = cls()
    assert deserialize_message(serialize_message(msg), cls) == msg


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


def test_plan_result_round_trip_keeps_nested_segments_and_skills():
    segments = [
        PlanSegment(index=0, text="to(); mf(50)", estimated_exec_time=3.5, exec_time=4.25, executed=True,
                    skills=[Skill(name="to"), Skill(name="mf", args=["50"])]),
        PlanSegment(index=1, text="tu(90); ld()", estimated_exec_time=2.0,
                    skills=[Skill(name="tu", args=["90"]), Skill(name="ld", args=[])]),
    ]
    result = Plan.Result(error_code=Plan.Result.DROPPED, error_message="utility fell to zero",
                         request_id="r-7", plan="to(); mf(50); tu(90); ld()", segments=segments,
                         response_time=0.4, waiting_time=0.9, completion_time=12.5, utility=1.75,
                         tokens_generated=31)
    back = deserialize_message(serialize_message(result), Plan.Result)
    assert back == result
    assert [s.index for s in back.segments] == [0, 1]
    assert [[(k.name, list(k.args)) for k in s.skills] for s in back.segments] == [
        [("to", []), ("mf", ["50"])], [("tu", ["90"]), ("ld", [])]]
    assert back.segments[0].executed and back.segments[1].exec_time == -1.0


def test_scheduler_state_round_trip_keeps_requests_and_stamp():
    state = SchedulerState(stamp=Time(sec=12, nanosec=500), policy="timely", engine="transformers", queued=2,
                           kv_device_bytes=1.5e6, requests_total=2**40, requests=[
                               RequestStatus(request_id="a", agent_id="drone_1", robot_type="drone",
                                             state="suspended", segments_generated=2, priority=0.75, age=3.0),
                               RequestStatus(request_id="b", agent_id="arm_1", robot_type="arm", state="queued")])
    back = deserialize_message(serialize_message(state), SchedulerState)
    assert back == state
    assert [r.agent_id for r in back.requests] == ["drone_1", "arm_1"] and back.stamp.nanosec == 500


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
