"""The scheduler's tunables (the server node exposes them as ROS parameters)."""
from __future__ import annotations

from dataclasses import dataclass

from timely_llm_ros.core.skills.program import MAX_PLAN_CALLS


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler tunables (the server node exposes them as ROS parameters)."""

    network_delay_s: float = 0.0      # server -> robot latency added to expected execution starts
    max_prompt_tokens: int = 4096     # longer prompts are rejected (INVALID_TASK)
    max_waiting: int = 10_000         # queue bound; beyond it new requests are rejected
    replan_on_failure: int = 0        # replans per request after a failed segment (0: the request ends FAILED)
    max_plan_tokens: int | None = None  # plan length cap for every robot type (None: each skill set's own)
    max_plan_calls: int = MAX_PLAN_CALLS  # a plan's skill calls with its loops unrolled, at most (INVALID_PLAN)
    branch_aware: bool = True         # E counts each conditional's body by the probability it runs, learned from the
                                      # robots' reports (core/plan_time.py); False: every body (the worst case)
    keep_outcomes: int = 0            # finished outcomes kept in .outcomes (0: all, as the simulator needs; a
                                      # long-running server keeps the latest N so its memory stays flat)
    ack_timeout_s: float | None = None    # a robot must accept or reject a segment within this (None: unchecked)
    exec_timeout_s: float | None = None   # ... and finish a started one within its estimate + this
