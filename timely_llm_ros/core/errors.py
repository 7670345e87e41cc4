"""Error codes shared by the core and the ROS interfaces (mirrored as constants in action/Plan.action)."""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Why a plan request ended the way it did (0 = success)."""

    NONE = 0
    INVALID_TASK = 1            # empty or oversized task/context text
    INVALID_TIME_REQUIREMENT = 2  # NaN/negative ERT, alpha > 0, beta <= 0, ...
    UNKNOWN_ROBOT_TYPE = 3
    UNKNOWN_URGENCY_CLASS = 4
    INVALID_LIMITS = 5          # bad generation limits
    UNKNOWN_AGENT = 6           # no executor known for this agent
    WRONG_ROBOT_TYPE = 7        # the agent's executor serves another robot type (checked before generating)
    CANCELLED = 10
    DROPPED = 11                # utility could no longer be positive (drop rule)
    EXECUTOR_UNAVAILABLE = 20   # executor action server not found
    EXECUTOR_TIMEOUT = 21       # executor did not answer in time
    EXECUTION_FAILED = 22       # executor reported failure
    UNKNOWN_SKILL = 23          # the plan calls a skill the robot's executor does not have
    PREEMPTED = 24              # the robot stopped this plan for a more urgent one (urgent_preempts)
    GENERATION_FAILED = 30      # engine error, or the model ended without an executable skill
    PLAN_TOO_LONG = 31          # hit the plan length cap without finishing
    INVALID_PLAN = 32           # the model's text stopped parsing under the skill language
    SERVER_SHUTDOWN = 40
    OVERLOADED = 41             # the server's queue (max_queued) is full: retry later
    NOT_ACTIVE = 42             # the lifecycle server is not active (unconfigured or inactive)


class RequestError(ValueError):
    """A request rejected with an error code and a message that says what to do."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
