"""Plan goals for the stress suite: valid ones, and malformed ones from hypothesis strategies with the error code
each must get (core/errors.py; the codes the issue asks for where the server does not give them yet)."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

NONE, INVALID_TASK, INVALID_TIME, UNKNOWN_ROBOT, UNKNOWN_CLASS, INVALID_LIMITS, UNKNOWN_AGENT = 0, 1, 2, 3, 4, 5, 6
CANCELLED, DROPPED, EXEC_UNAVAILABLE, EXEC_TIMEOUT, EXEC_FAILED = 10, 11, 20, 21, 22
CODE_NAMES = {0: "NONE", 1: "INVALID_TASK", 2: "INVALID_TIME_REQUIREMENT", 3: "UNKNOWN_ROBOT_TYPE",
              4: "UNKNOWN_URGENCY_CLASS", 5: "INVALID_LIMITS", 6: "UNKNOWN_AGENT", 10: "CANCELLED", 11: "DROPPED",
              20: "EXECUTOR_UNAVAILABLE", 21: "EXECUTOR_TIMEOUT", 22: "EXECUTION_FAILED", 30: "GENERATION_FAILED",
              31: "PLAN_TOO_LONG", 40: "SERVER_SHUTDOWN", 41: "OVERLOADED", 42: "NOT_ACTIVE"}
# a lenient time requirement: under stress a valid request should be served, not dropped for lateness
LENIENT = dict(urgency_class="", ert=60.0, alpha=-0.01, beta=1.0)
TASKS = {"drone": ("look for the cat", "cat, chair, table, lamp"),
         "arm": ("stack the red block on the blue block", "red block, blue block, green block, table")}


def valid_goal(agent: str, robot_type: str, dry_run: bool = False, **over) -> dict:
    task, context = TASKS[robot_type]
    return dict(dict(agent_id=agent, robot_type=robot_type, task=task, context=context, dry_run=dry_run, **LENIENT),
                **over)


def _base(agent: str) -> dict:
    return valid_goal(agent, "drone")  # executed, as for a real robot: agent checks happen on the real path


_bad_number = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e300]) | st.floats(max_value=-1e-9)
_bad_alpha = st.floats(min_value=1e-9, allow_infinity=True, allow_nan=False) | st.just(math.nan)
_bad_beta = st.floats(max_value=0.0, allow_nan=False) | st.just(math.nan)
_ws = st.text(alphabet=" \t\n\r\u00a0\u2000\u3000", max_size=40)
_zero_width = st.text(alphabet="\u200b\u200c\u200d\u2060\ufeff \t", min_size=1, max_size=20)
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


@st.composite
def malformed_goal(draw, agent: str) -> tuple[str, int, dict]:
    """(category, expected error code, goal fields); the agent's executor exists, so only the defect counts."""
    g = _base(agent)
    kind = draw(st.sampled_from(["ert", "alpha", "beta", "partial_time", "robot", "class", "agent_chars", "agent_topic",
                                 "agent_long", "empty_task", "zero_width_task", "long_task", "long_context",
                                 "tokens"]))
    if kind in ("ert", "alpha", "beta", "partial_time"):
        g.update(urgency_class="", ert=1.0, alpha=-1.0, beta=1.0)
        if kind == "ert":
            g["ert"] = draw(_bad_number)
        elif kind == "alpha":
            g["alpha"] = draw(_bad_alpha)
        elif kind == "beta":
            g["beta"] = draw(_bad_beta)
        else:  # ert or alpha set, beta left 0 (all three 0 is valid since b18255e: text-only urgency, normal TUF)
            g.update(ert=0.0, alpha=0.0, beta=0.0)
            if draw(st.booleans()):
                g["ert"] = draw(st.floats(min_value=0.1, max_value=60.0))
            else:
                g["alpha"] = draw(st.floats(min_value=-10.0, max_value=-0.01))
        return kind, INVALID_TIME, g
    if kind == "robot":
        g["robot_type"] = draw(_name.filter(lambda s: s not in ("drone", "arm", "chat")))
        return kind, UNKNOWN_ROBOT, g
    if kind == "class":
        g["urgency_class"] = draw(_name.filter(lambda s: s not in ("normal", "urgent")))
        return kind, UNKNOWN_CLASS, g
    if kind == "agent_chars":
        g["agent_id"] = draw(st.sampled_from(["", " ", "/", "1drone", "drone-1", "drone 1", "drone.1", "dr\u00f6ne",
                                              "drone_1\u200b", "~drone", "drone$"]))
        return kind, UNKNOWN_AGENT, g
    if kind == "agent_topic":  # accepted by the validator's character set, not valid as a ROS namespace
        g["agent_id"] = draw(st.sampled_from(["a//b", "a/1b", "drone_1//x", "x/_/9", "drone_1/2"]))
        return kind, UNKNOWN_AGENT, g
    if kind == "agent_long":
        g["agent_id"] = "d" * draw(st.integers(300, 2000))
        return kind, UNKNOWN_AGENT, g
    if kind == "empty_task":
        g["task"] = draw(_ws)
        return kind, INVALID_TASK, g
    if kind == "zero_width_task":
        g["task"] = draw(_zero_width)
        return kind, INVALID_TASK, g
    if kind == "long_task":
        g["task"] = "look " * draw(st.integers(401, 3000))
        return kind, INVALID_TASK, g
    if kind == "long_context":
        g["context"] = "cat, " * draw(st.integers(1601, 5000))
        return kind, INVALID_TASK, g
    g["max_new_tokens"] = draw(st.integers(513, 2 ** 32 - 1))
    return kind, INVALID_LIMITS, g


def draw_malformed(n: int, agent: str, rng_seed: int) -> list[tuple[str, int, dict]]:
    """n malformed goals, reproducible for a seed (hypothesis generation phase only, no shrinking)."""
    out: list[tuple[str, int, dict]] = []

    @seed(rng_seed)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(malformed_goal(agent))
    def collect(item):
        out.append(item)

    while len(out) < n:  # hypothesis may stop a little early when it runs out of distinct examples
        collect()
    return out[:n]
