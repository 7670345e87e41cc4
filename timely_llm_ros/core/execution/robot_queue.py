"""The robot's side of execution: which segment a robot runs next and which it ends without running (no ROS types;
the executor base node and the simulator's robots each hold one per robot).

- One plan at a time. The plan of the segment that started last keeps the robot while one of its segments runs or
  waits here; then the next plan goes, in order of its first segment's arrival (under ``urgent_preempts`` a plan
  whose segments carry ``preempts`` first). A robot never goes back to a plan it left: a segment of that plan that
  arrives after another plan started ends NOT_RUN (PREEMPTED if the other plan preempted it). The planner server
  sends a plan's segments only once the robot's previous plan has ended, so a served robot never sees that.
- A plan's segments run strictly in index order: segment k runs once k-1 has ended here. After a segment ended
  without success (failed, cancelled, refused, not run), the plan's next segment is the lowest index above it (the
  new plan after a failure continues the request's numbering). A missing predecessor is never skipped: segments
  that will not run are the server's to withdraw (cancel). A segment whose predecessor has not arrived at all
  (``missing_predecessor``) is the executor's to end NOT_RUN after a bound: the server sends in order, so only a
  hand-written client can leave one waiting for a segment it never sends.
- A plan stops at a segment that did not succeed or that returned: its later segments waiting here end NOT_RUN
  (after a return also those that arrive later). A segment that ends while an earlier one of its plan still runs or
  waits here (refused on arrival, or cancelled while it waited) does not stop the earlier ones: they run in order,
  and the plan's floor passes the early one when they have ended. So no order of refusals and completions leaves a
  segment waiting for a floor it can never reach (test/test_robot_queue_properties.py).
- ``urgent_preempts``: a segment with ``preempts`` of another plan than the robot's current one stops that plan
  at once: its running segment ends PREEMPTED when its skill in progress has been interrupted, its waiting segments
  end PREEMPTED at once, and so do its segments that arrive later; the preempting plan runs next. Under ``queue``
  the flag is ignored: the plan waits its turn.

Not thread-safe: the caller holds its lock.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

PLAN_RULES = ("queue", "urgent_preempts")

Item = TypeVar("Item")


class Ended(str, Enum):
    """How a segment ended on the robot."""

    DONE = "done"                # ran to completion
    RETURNED = "returned"        # ran to completion and a return statement ended its plan
    STOPPED = "stopped"          # failed, cancelled or refused: the plan goes no further here
    NOT_RUN = "not_run"          # ended without starting (an earlier segment of its plan ended first)
    PREEMPTED = "preempted"      # stopped (or never started) because a more urgent plan took the robot


@dataclass
class Queued(Generic[Item]):
    """A segment that waits here (or runs)."""

    plan: str
    index: int
    item: Item
    preempts: bool = False


@dataclass
class Refusal:
    """A segment ended on arrival, without running."""

    ended: Ended
    message: str


@dataclass
class Arrival(Generic[Item]):
    """What a segment's arrival did: ``refused`` (it ends at once) or it waits; a preempting arrival also names the
    running segment to stop (its skill interrupted) and the preempted plan's waiting segments (they end PREEMPTED)."""

    refused: Refusal | None = None
    stop: Item | None = None
    preempted: list[Item] = field(default_factory=list)
    preempted_plan: str = ""


@dataclass
class _Plan:
    """What the robot remembers of a plan."""

    rank: int                        # arrival order of its first segment
    floor: int = -1                  # highest index ended here
    restart: bool = False            # the segment at `floor` ended without success
    returned_at: int | None = None   # its segment whose return ended the plan
    left_for: str = ""               # a later plan took the robot from it
    preempted_by: str = ""           # ... by preempting it
    early: dict[int, Ended] = field(default_factory=dict)   # segments above the floor that ended while an earlier
                                                            # one of the plan still ran or waited here


class RobotQueue(Generic[Item]):
    """The segments a robot holds, and what it runs next under its plan rule (see the module docstring)."""

    def __init__(self, plan_rule: str = "queue", remember: int = 1000) -> None:
        if plan_rule not in PLAN_RULES:
            raise ValueError(f"plan_rule must be one of {', '.join(PLAN_RULES)}, got {plan_rule!r} "
                             "(-p plan_rule:=queue or urgent_preempts)")
        self.plan_rule = plan_rule
        self._remember = remember
        self._plans: OrderedDict[str, _Plan] = OrderedDict()
        self._next_rank = 0
        self._current: str | None = None     # plan of the segment that started last
        self.running: Queued[Item] | None = None
        self.waiting: list[Queued[Item]] = []

    def __len__(self) -> int:
        return len(self.waiting)

    def holds(self, plan: str) -> bool:
        """True when a segment of this plan runs or waits here."""
        return (self.running is not None and self.running.plan == plan) or any(q.plan == plan for q in self.waiting)

    @property
    def current_plan(self) -> str:
        """The plan that has the robot: its segment runs, or one of its segments waits and it ran last ("" if none)."""
        return self._current if self._current is not None and self.holds(self._current) else ""

    def arrive(self, plan: str, index: int, item: Item, preempts: bool = False) -> Arrival[Item]:
        """A segment arrives: it waits (``refused`` None) or ends at once; a preempting one may stop another plan."""
        rec = self._plans.get(plan)
        refused = self.refusal(plan, index)
        if refused is not None:
            return Arrival(refused)
        if rec is None:
            self._record(plan)
        out: Arrival[Item] = Arrival()
        current = self.current_plan
        if preempts and self.plan_rule == "urgent_preempts" and current and current != plan \
                and not self._plans[current].preempted_by:
            self._plans[current].preempted_by = plan
            out.preempted_plan = current
            out.preempted = [q.item for q in self.waiting if q.plan == current]
            self.waiting = [q for q in self.waiting if q.plan != current]
            if self.running is not None and self.running.plan == current:
                out.stop = self.running.item
        self.waiting.append(Queued(plan, index, item, preempts))
        return out

    def refusal(self, plan: str, index: int) -> Refusal | None:
        """Why a segment of `plan` would end on arrival without running (None: it would wait its turn)."""
        rec = self._plans.get(plan)
        if rec is None:
            return None
        if rec.returned_at is not None and index > rec.returned_at:
            return Refusal(Ended.NOT_RUN, f"not run: the plan returned at segment {rec.returned_at}")
        if rec.preempted_by:
            return Refusal(Ended.PREEMPTED, f"preempted: plan {rec.preempted_by} took the robot (plan_rule "
                                            "urgent_preempts)")
        if rec.left_for:
            return Refusal(Ended.NOT_RUN, f"not run: plan {rec.left_for} took the robot after this plan's segment "
                                          f"{rec.floor}; a robot does not go back to a plan it left")
        if index <= rec.floor:
            return Refusal(Ended.NOT_RUN, f"not run: this plan is past segment {index} here (at {rec.floor})")
        if (self.running is not None and (self.running.plan, self.running.index) == (plan, index)) \
                or any((q.plan, q.index) == (plan, index) for q in self.waiting):
            # a second copy would wait for a turn it never gets (the plan is past it once the first one ends)
            return Refusal(Ended.NOT_RUN, f"not run: segment {index} of this plan already runs or waits here "
                                          "(the same segment sent twice)")
        return None

    def _record(self, plan: str) -> _Plan:
        rec = self._plans[plan] = _Plan(self._next_rank)
        self._next_rank += 1
        if len(self._plans) > self._remember:   # forget the oldest plan that holds nothing here
            held = {q.plan for q in self.waiting} | ({self.running.plan} if self.running is not None else set())
            old = next((p for p in self._plans if p not in held and p != plan), None)
            if old is not None:
                del self._plans[old]
        return rec

    def remove(self, item: Item) -> bool:
        """Take a waiting segment out (cancelled); end() it with STOPPED once it has answered."""
        for i, q in enumerate(self.waiting):
            if q.item is item:
                del self.waiting[i]
                return True
        return False

    def next(self) -> Item | None:
        """The segment to run now (it becomes ``running``), or None: the robot runs one, or nothing may run yet."""
        if self.running is not None:
            return None
        current = self.current_plan
        chosen = self._runnable(current) if current else None
        if chosen is None and not current:
            for plan in self._plan_order():
                chosen = self._runnable(plan)
                if chosen is not None:
                    break
        if chosen is None:
            return None
        if self._current is not None and self._current != chosen.plan and self._current in self._plans:
            left = self._plans[self._current]
            if chosen.preempts and self.plan_rule == "urgent_preempts":
                left.preempted_by = left.preempted_by or chosen.plan
            else:
                left.left_for = chosen.plan
        self._current = chosen.plan
        self.waiting.remove(chosen)
        self.running = chosen
        return chosen.item

    def _plan_order(self) -> list[str]:
        """Plans with waiting segments, in the order they get the robot."""
        urgent: dict[str, bool] = {}
        for q in self.waiting:
            urgent[q.plan] = urgent.get(q.plan, False) or q.preempts
        by_rule = self.plan_rule == "urgent_preempts"
        return sorted(urgent, key=lambda p: (not (by_rule and urgent[p]), self._plans[p].rank))

    def _runnable(self, plan: str) -> Queued[Item] | None:
        """The plan's waiting segment that may run now: the one after the last that ended here (or, after one ended
        without success, the lowest index above it); None while its predecessor is missing."""
        mine = [q for q in self.waiting if q.plan == plan]
        if not mine:
            return None
        first = min(mine, key=lambda q: q.index)
        rec = self._plans[plan]
        return first if first.index == rec.floor + 1 or (rec.restart and first.index > rec.floor) else None

    def missing_predecessor(self) -> list[tuple[Item, list[int]]]:
        """Waiting segments that cannot run because an earlier segment of their plan has neither ended here nor
        arrived (none of the plan runs or waits here below them), each with the indices it waits for."""
        stuck = []
        for q in self.waiting:
            rec = self._plans[q.plan]
            if q.index == rec.floor + 1 or (rec.restart and q.index > rec.floor):
                continue
            if not self._earlier_here(q.plan, rec.floor, q.index):
                stuck.append((q.item, [k for k in range(rec.floor + 1, q.index) if k not in rec.early]))
        return stuck

    def end(self, plan: str, index: int, ended: Ended) -> list[Item]:
        """A segment of `plan` ended (ran, or ended without running). Returns the plan's later segments waiting here
        that end NOT_RUN because of it (the plan stops at a segment that did not succeed or that returned)."""
        if self.running is not None and self.running.plan == plan and self.running.index == index:
            self.running = None
        rec = self._plans.get(plan) or self._record(plan)
        if ended == Ended.RETURNED:
            rec.returned_at = index
        orphans: list[Queued[Item]] = []
        if ended != Ended.DONE:
            orphans = [q for q in self.waiting if q.plan == plan and q.index > index]
            self.waiting = [q for q in self.waiting if not (q.plan == plan and q.index > index)]
        if index > rec.floor:
            if self._earlier_here(plan, rec.floor, index):   # they still run, in order; the floor waits for them
                rec.early[index] = ended
                rec.early.update({q.index: Ended.NOT_RUN for q in orphans})
            else:
                rec.floor, rec.restart = index, ended not in (Ended.DONE, Ended.RETURNED)
                if orphans:
                    rec.floor, rec.restart = max(rec.floor, *(q.index for q in orphans)), True
        self._pass_early(plan, rec)
        return [q.item for q in orphans]

    def _earlier_here(self, plan: str, floor: int, index: int) -> bool:
        """Whether a segment of `plan` between `floor` and `index` (both excluded) runs or waits here."""
        held = [q for q in self.waiting if q.plan == plan]
        if self.running is not None and self.running.plan == plan:
            held.append(self.running)
        return any(floor < q.index < index for q in held)

    def _pass_early(self, plan: str, rec: _Plan) -> None:
        """Move the floor past the segments that ended early once nothing earlier of the plan is left here."""
        while rec.early:
            first = min(rec.early)
            if first <= rec.floor:
                del rec.early[first]
                continue
            if self._earlier_here(plan, rec.floor, first) or not (first == rec.floor + 1 or rec.restart):
                return
            ended = rec.early.pop(first)
            rec.floor, rec.restart = first, ended not in (Ended.DONE, Ended.RETURNED)
