"""The ROS parameters of every executor node (SkillExecutorNode), declared in one place with descriptions and ranges."""
from __future__ import annotations

from dataclasses import dataclass

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node


@dataclass(frozen=True)
class ExecutorParams:
    robot_type: str
    skills_dir: str
    queue_size: int
    plan_rule: str
    feedback_period_s: float
    shutdown_grace_s: float
    log_timing: bool
    status_period_s: float
    predecessor_timeout_s: float


def _float_range(lo: float, hi: float) -> list[FloatingPointRange]:
    return [FloatingPointRange(from_value=lo, to_value=hi, step=0.0)]


def declare_executor_params(node: Node, robot_type: str) -> ExecutorParams:
    """Declare the executor's parameters (read-only: read once at start) and read them; ``robot_type``: the
    default a subclass gives."""
    def declare(name: str, default, description: str, **ranges):
        return node.declare_parameter(name, default, ParameterDescriptor(description=description, read_only=True,
                                                                         **ranges)).value
    return ExecutorParams(
        robot_type=declare("robot_type", robot_type,
                           "skill set (config/skills/<type>.yaml, or <skills_dir>/skills/<type>.yaml) whose language "
                           "segments are parsed and run in; empty: each goal's skill list runs as sent"),
        skills_dir=declare("skills_dir", "",
                           "a team's folder of skill sets (skills/*.yaml) and execution-time profiles "
                           "(exec_time/*.yaml), added to the package's (same name: the team's); empty: the package's "
                           "only"),
        queue_size=declare("queue_size", 16,
                           "segments that may wait behind the running one; a new request's segment beyond it gets BUSY",
                           integer_range=[IntegerRange(from_value=0, to_value=10000, step=1)]),
        plan_rule=declare("plan_rule", "queue",
                          "a second plan while one runs: queue (it waits until the first ends) | urgent_preempts (a "
                          "plan sent with preempts stops the running one at once, its skill in progress interrupted; its segments end "
                          "PREEMPTED)"),
        feedback_period_s=declare("feedback_period_s", 0.5,
                                  "progress feedback period while a skill runs (0: only at skill boundaries)",
                                  floating_point_range=_float_range(0.0, 60.0)),
        shutdown_grace_s=declare("shutdown_grace_s", 2.0,
                                 "on SIGINT/SIGTERM, how long to wait for open segments to report their end",
                                 floating_point_range=_float_range(0.0, 60.0)),
        log_timing=declare("log_timing", False,
                           "log 'segment timing <request> <index> received|started|ended <monotonic s>' (make stress)"),
        status_period_s=declare("status_period_s", 0.0,
                                "executor_status is published on every change and, when > 0, again every this many "
                                "seconds (its liveliness does not depend on it; each tick costs an idle robot's host "
                                "CPU)", floating_point_range=_float_range(0.0, 3600.0)),
        predecessor_timeout_s=declare("predecessor_timeout_s", 10.0,
                                      "a segment whose plan's earlier segment has not arrived ends NOT_RUN after "
                                      "waiting this many seconds (the server sends in order; 0: wait for ever)",
                                      floating_point_range=_float_range(0.0, 3600.0)),
    )
