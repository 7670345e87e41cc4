"""The per-request outcome table the workload node prints, and how a run that executed no plan ended (plain text,
no ROS types needed)."""
from __future__ import annotations

from dataclasses import dataclass

from timely_llm_ros.core.errors import ErrorCode

NOT_SENT = "not sent"   # the status of a task a stopped run never sent (not a lost goal: /plan never had it)


@dataclass
class OutcomeRow:
    agent: str
    robot_type: str
    task: str
    urgency: str
    sent_at: float
    status: str = "?"
    segments: int = 0
    response_time: float = -1.0
    waiting_time: float = -1.0
    completion_time: float = -1.0
    utility: float = 0.0
    segment_utility: float = 0.0
    tokens: int = 0
    message: str = ""
    plan: str = ""
    achieved: str = "-"       # yes | no: why | ? (not judged) | - (no goal condition): ros/fleet/scene_staging.py

    def fill(self, result, code_name: str) -> None:
        """Copy a Plan.Result into the row."""
        self.status = "ok" if result.error_code == 0 else code_name
        self.segments = len(result.segments)
        self.response_time = result.response_time
        self.waiting_time = result.waiting_time
        self.completion_time = result.completion_time
        self.utility = result.utility
        self.segment_utility = result.segment_utility
        self.tokens = result.tokens_generated
        self.message = result.error_message
        self.plan = result.plan.strip()


def _sec(x: float) -> str:
    return f"{x:6.2f}" if x >= 0 else "     -"


def format_table(rows: list[OutcomeRow]) -> str:
    """A fixed-width table of every request, with totals; then why each judged plan missed its task."""
    head = (f"{'robot':<9} {'task':<38} {'urgency':<7} {'seg':>3} {'resp s':>6} {'wait s':>6} {'util':>5} "
            f"{'achieved':<8}  status")
    lines = [head, "-" * len(head)]
    for r in rows:
        task = _short(r.task)
        achieved = r.achieved.split(":")[0]
        lines.append(f"{r.agent:<9} {task:<38} {r.urgency:<7} {r.segments:>3} {_sec(r.response_time)} "
                     f"{_sec(r.waiting_time)} {r.utility:5.2f} {achieved:<8}  "
                     f"{r.status}{(': ' + r.message) if r.message else ''}")
    ok = [r for r in rows if r.status == "ok"]
    lines.append("-" * len(head))
    if ok:
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        lines.append(f"{len(ok)}/{len(rows)} plans executed; mean response {mean([r.response_time for r in ok]):.2f} s,"
                     f" mean waiting {mean([r.waiting_time for r in ok]):.2f} s, mean utility "
                     f"{mean([r.utility for r in ok]):.2f}")
    else:
        lines.append(f"0/{len(rows)} plans executed")
    judged = [r for r in rows if r.achieved == "yes" or r.achieved.startswith("no")]
    if judged:
        lines.append(f"{sum(r.achieved == 'yes' for r in judged)}/{len(judged)} plans achieved their task in their "
                     "robot's scene")
        lines += [f"  {r.agent} {_short(r.task)!r}: {r.achieved[len('no: '):]}" for r in judged if r.achieved != "yes"]
    return "\n".join(lines)


def _short(task: str) -> str:
    return task if len(task) <= 38 else task[:35] + "..."


def no_plan_summary(rows: list[OutcomeRow]) -> str:
    """How the goals of a run that executed no plan ended, e.g. "10 goals: 7 DROPPED, 3 GENERATION_FAILED (first:
    ...)", with a hint for the common causes."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    ended = ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    first = next((r.message for r in rows if r.message), "")
    hint = ""
    if "DROPPED" in counts:
        hint = ("; DROPPED: the urgency classes cannot be met on this model and machine (see the server's configure "
                "log and /diagnostics; its parameter scale_unmet_classes fits them to the engine)")
    goals = f"{len(rows)} goal{'s' if len(rows) != 1 else ''}"
    return f"{goals}: {ended}" + (f" (first: {first})" if first else "") + hint


def code_name(code: int) -> str:
    """The ErrorCode's name, or 'error N' for a code this build does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
