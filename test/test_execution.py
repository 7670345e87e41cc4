"""core/execution: the robot's rules (RobotQueue) and the planner's record of every robot's plans and segments
(ExecutionTracker): one plan per robot, acks, deadlines, provisional starts, NOT_RUN, PREEMPTED, E."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.errors import ErrorCode
from timely_llm_ros.core.events import SegmentReady, SegmentsWithdrawn
from timely_llm_ros.core.execution import Ended, ExecutionTracker, PlanPreempted, RobotQueue, SegmentStatus
from timely_llm_ros.core.request import Segment


# ----------------------------------------------------------------------------------------------- the robot's side
def _run_all(q: RobotQueue) -> list[str]:
    """Run what the robot would run, each segment to success, until nothing may run."""
    ran = []
    while (item := q.next()) is not None:
        ran.append(item)
        q.end(q.running.plan, q.running.index, Ended.DONE)
    return ran


def test_a_robot_runs_one_plan_at_a_time_and_never_goes_back_to_a_plan_it_left():
    q = RobotQueue()
    for plan, index in (("a", 0), ("b", 0), ("a", 1), ("b", 1)):
        assert q.arrive(plan, index, f"{plan}{index}").refused is None
    assert _run_all(q) == ["a0", "a1", "b0", "b1"]
    late = q.arrive("a", 2, "a2")
    assert late.refused is not None and late.refused.ended == Ended.NOT_RUN and "plan b took the robot" in \
        late.refused.message


def test_a_plans_segments_run_strictly_in_order_and_a_missing_one_is_waited_for():
    q = RobotQueue()
    q.arrive("a", 1, "a1")
    assert q.next() is None                  # a1 waits for a0, however long
    q.arrive("a", 0, "a0")
    assert _run_all(q) == ["a0", "a1"]
    q.arrive("a", 3, "a3")                   # a2 never comes: the server withdraws a3, the robot never skips
    q.arrive("b", 0, "b0")
    assert q.next() is None and q.current_plan == "a"


def test_a_segment_whose_predecessor_never_arrived_is_named_and_once_ended_frees_the_robot():
    q = RobotQueue()
    q.arrive("a", 0, "a0")
    q.arrive("a", 2, "a2")
    q.arrive("n", 3, "n3")                   # a plan never seen, from its segment 3
    assert q.missing_predecessor() == [("n3", [0, 1, 2])]   # a2 waits for a1, which has not arrived either, but
    assert _run_all(q) == ["a0"]                             # a0 is here until it ends
    assert q.missing_predecessor() == [("a2", [1]), ("n3", [0, 1, 2])]
    q.arrive("b", 0, "b0")                   # a holds the robot while a2 waits: b cannot start
    assert q.next() is None and q.missing_predecessor() == [("a2", [1]), ("n3", [0, 1, 2])]
    q.remove("a2")                           # the executor gives up on it after its bound
    q.end("a", 2, Ended.NOT_RUN)
    assert _run_all(q) == ["b0"]
    assert q.arrive("a", 1, "a1").refused is not None   # the robot left plan a


def test_a_plan_stops_at_a_failed_segment_and_its_replan_continues_the_numbering():
    q = RobotQueue()
    for i in range(3):
        q.arrive("a", i, f"a{i}")
    assert q.next() == "a0"
    assert q.end("a", 0, Ended.STOPPED) == ["a1", "a2"]    # NOT_RUN: the plan goes no further
    q.arrive("a", 5, "a5")                                  # the new plan after the failure (3, 4 never sent)
    assert _run_all(q) == ["a5"]


def test_after_a_return_the_plans_later_segments_end_not_run_also_when_they_arrive_later():
    q = RobotQueue()
    q.arrive("a", 0, "a0")
    q.arrive("a", 1, "a1")
    assert q.next() == "a0"
    assert q.end("a", 0, Ended.RETURNED) == ["a1"]
    assert "returned at segment 0" in q.arrive("a", 2, "a2").refused.message


def test_urgent_preempts_stops_the_running_plan_between_skills_and_queue_lets_it_finish():
    q = RobotQueue("urgent_preempts")
    for i in range(3):
        q.arrive("a", i, f"a{i}")
    assert q.next() == "a0"
    arrival = q.arrive("u", 0, "u0", preempts=True)
    assert (arrival.stop, arrival.preempted, arrival.preempted_plan) == ("a0", ["a1", "a2"], "a")
    assert q.arrive("u", 1, "u1", preempts=True).preempted_plan == ""   # its next segment stops nothing more
    assert q.next() is None                                  # a0 still ends its skill in progress
    q.end("a", 0, Ended.PREEMPTED)
    assert _run_all(q) == ["u0", "u1"]
    assert q.arrive("a", 3, "a3").refused.ended == Ended.PREEMPTED

    q = RobotQueue("queue")
    q.arrive("a", 0, "a0")
    q.arrive("a", 1, "a1")
    assert q.next() == "a0"
    arrival = q.arrive("u", 0, "u0", preempts=True)
    assert arrival.stop is None and not arrival.preempted
    q.end("a", 0, Ended.DONE)
    assert _run_all(q) == ["a1", "u0"]


def test_an_unknown_plan_rule_is_refused():
    with pytest.raises(ValueError, match="urgent_preempts"):
        RobotQueue("whenever")


# ----------------------------------------------------------------------------------------------- the planner's side
class _View:
    expected_exec_end = None
    earliest_start = None


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _seg(index: int, t: float, est: float = 2.0) -> Segment:
    return Segment(index=index, text=f"mf({index});", skills=[], gen_started=t, gen_finished=t, est_exec_s=est)


def _tracker(rule: str = "queue", **kw) -> tuple[ExecutionTracker, _Clock]:
    clock = _Clock()
    return ExecutionTracker(clock, network_delay_s=0.1, plan_rule=lambda robot: rule, **kw), clock


def _sent(outs) -> list[tuple[str, int, bool]]:
    return [(o.req_id, o.segment.index, o.preempts) for o in outs if isinstance(o, SegmentReady)]


def test_a_second_plan_for_a_robot_is_held_until_the_first_ends():
    tr, clock = _tracker()
    a, b = _View(), _View()
    tr.add_plan("a", "drone_1", 1.0, a, stream=True)
    tr.add_plan("b", "drone_1", 1.0, b, stream=True)
    assert _sent(tr.add_segment("a", _seg(0, 0.0))) == [("a", 0, False)]
    assert _sent(tr.add_segment("b", _seg(0, 0.0))) == []            # held: drone_1 runs a
    assert tr.segment("b", 0).status == SegmentStatus.HELD
    clock.t = 3.0
    tr.finished("a", 0, 3.0, SegmentStatus.FINISHED)
    assert _sent(tr.end_plan("a")) == [("b", 0, False)]
    other = _View()
    tr.add_plan("c", "drone_2", 1.0, other, stream=True)            # another robot is not held up
    assert _sent(tr.add_segment("c", _seg(0, 3.0))) == [("c", 0, False)]


def test_a_waiting_plan_cannot_start_before_the_plan_ahead_is_expected_to_end():
    tr, clock = _tracker()
    a, b = _View(), _View()
    tr.add_plan("a", "drone_1", 1.0, a, stream=True)
    tr.add_plan("b", "drone_1", 1.0, b, stream=True)
    tr.add_segment("a", _seg(0, 0.0, est=2.0))
    tr.add_segment("a", _seg(1, 0.0, est=3.0))
    assert a.expected_exec_end == pytest.approx(0.1 + 2.0 + 3.0)     # sent at 0, arrives after d, then both
    assert b.earliest_start == pytest.approx(a.expected_exec_end) and b.expected_exec_end is None
    tr.add_segment("b", _seg(0, 0.5, est=1.0))
    assert b.expected_exec_end == pytest.approx(a.expected_exec_end + 1.0)   # held behind a, not from 0.5 + d
    tr.started("a", 0, 1.0)                                           # a started late: everything moves
    assert a.expected_exec_end == pytest.approx(1.0 + 5.0) and b.earliest_start == pytest.approx(6.0)
    tr.finished("a", 0, 1.5, SegmentStatus.FINISHED)                 # ... and ended early: the real end counts
    assert a.expected_exec_end == pytest.approx(1.5 + 3.0)
    assert tr.segment("a", 1).seg.exec_started == 1.5                # provisional: the one before it ended


def test_acks_and_execution_deadlines_fail_a_silent_robot_with_their_codes():
    tr, clock = _tracker(ack_timeout_s=2.0, exec_timeout_s=5.0)
    tr.add_plan("a", "drone_1", 1.0, _View(), stream=True)
    tr.add_plan("b", "drone_2", 1.0, _View(), stream=True)
    tr.add_segment("a", _seg(0, 0.0, est=1.0))
    tr.add_segment("a", _seg(1, 0.0, est=1.0))
    tr.add_segment("b", _seg(0, 0.0, est=1.0))
    clock.t = 0.5
    tr.accepted("a", 0, 0.5)                 # nothing ahead of it on drone_1: it runs from now
    tr.accepted("a", 1, 0.5)
    assert tr.segment("a", 0).status == SegmentStatus.RUNNING and tr.segment("a", 1).status == SegmentStatus.ACCEPTED
    [unanswered] = tr.expired(2.1)           # b's robot never answered
    assert (unanswered.req_id, unanswered.code) == ("b", ErrorCode.EXECUTOR_UNAVAILABLE)
    assert "executor_ack_timeout_s" in unanswered.message
    assert tr.expired(6.4) == []             # a0: 0.5 + 1 + 5
    tr.started("a", 0, 1.0)                  # its real start moves the deadline
    assert tr.expired(6.6) == []
    [late] = tr.expired(7.1)
    assert (late.req_id, late.index, late.code, late.later) == ("a", 0, ErrorCode.EXECUTOR_TIMEOUT, (1,))
    assert late.message.endswith("after it started; check the robot")
    assert tr.segment("a", 1).status == SegmentStatus.NOT_RUN


def test_a_timeout_of_a_segment_the_robot_never_said_it_runs_says_so():
    """Accepted, but no feedback: its start is the tracker's guess, and the message does not claim it started."""
    tr, clock = _tracker(ack_timeout_s=2.0, exec_timeout_s=5.0)
    tr.add_plan("a", "drone_1", 1.0, _View(), stream=True)
    tr.add_segment("a", _seg(0, 0.0, est=1.0))
    tr.accepted("a", 0, 0.5)
    [late] = tr.expired(6.6)
    assert late.code == ErrorCode.EXECUTOR_TIMEOUT
    assert "after it was due to start (the robot sent no feedback that it runs)" in late.message


def test_a_failed_segment_makes_the_later_ones_not_run_and_withdraws_those_at_the_robot():
    tr, clock = _tracker()
    tr.add_plan("a", "drone_1", 1.0, _View(), stream=True)
    for i in range(3):
        tr.add_segment("a", _seg(i, 0.0))
    outs = tr.finished("a", 0, 1.0, SegmentStatus.FAILED)
    assert outs == [SegmentsWithdrawn("a", (1, 2))]
    assert [tr.segment("a", i).status for i in (1, 2)] == [SegmentStatus.NOT_RUN] * 2
    assert not tr.outstanding("a")
    assert tr.finished("a", 1, 1.1, SegmentStatus.FINISHED) == []     # a late answer changes nothing


def test_the_robots_not_run_waits_for_the_earlier_segments_result_to_decide():
    tr, clock = _tracker()
    tr.add_plan("a", "drone_1", 1.0, _View(), stream=True)
    for i in range(2):
        tr.add_segment("a", _seg(i, 0.0))
    assert tr.not_run("a", 1, 0.5, "not run: segment 0 ended first") is True   # 0's result is still to come
    assert tr.refusal_after("a") is None
    tr.finished("a", 0, 1.0, SegmentStatus.FINISHED)
    assert tr.refusal_after("a") == (1, "not run: segment 0 ended first")    # 0 succeeded: nothing explains it
    tr.add_segment("a", _seg(2, 1.0))
    tr.add_segment("a", _seg(3, 1.0))
    tr.not_run("a", 3, 1.5, "not run: segment 2 ended first")
    tr.finished("a", 2, 2.0, SegmentStatus.FAILED)                           # ... this failure explains its NOT_RUN
    assert tr.segment("a", 3).robot_refusal == ""


def test_a_more_urgent_plan_preempts_under_urgent_preempts_and_waits_under_queue():
    for rule in ("urgent_preempts", "queue"):
        tr, clock = _tracker(rule)
        tr.add_plan("slow", "drone_1", 5.0, _View(), stream=True)
        tr.add_plan("urgent", "drone_1", 0.5, _View(), stream=True)
        tr.add_segment("slow", _seg(0, 0.0))
        outs = tr.add_segment("urgent", _seg(0, 0.2))
        if rule == "queue":
            assert _sent(outs) == [] and not any(isinstance(o, PlanPreempted) for o in outs)
            continue
        assert [o.req_id for o in outs if isinstance(o, PlanPreempted)] == ["slow"]
        assert _sent(outs) == [("urgent", 0, True)]
        assert tr.outstanding("slow")                          # its segment at the robot ends there (PREEMPTED)
        tr.finished("slow", 0, 0.4, SegmentStatus.PREEMPTED)
        assert tr.plan("slow").cut and not tr.outstanding("slow")
        assert tr.segment("urgent", 0).seg.exec_started == 0.4   # the robot turned to it


def test_a_current_plan_that_sent_nothing_yet_waits_again_instead_of_being_preempted():
    tr, clock = _tracker("urgent_preempts")
    tr.add_plan("slow", "drone_1", 5.0, _View(), stream=True)
    tr.add_plan("urgent", "drone_1", 0.5, _View(), stream=True)
    outs = tr.add_segment("urgent", _seg(0, 0.2))
    assert _sent(outs) == [("urgent", 0, True)] and not any(isinstance(o, PlanPreempted) for o in outs)
    assert _sent(tr.add_segment("slow", _seg(0, 0.3))) == []       # held until the urgent plan ends
    assert _sent(tr.end_plan("urgent")) == [("slow", 0, False)]


def test_an_executor_that_left_fails_every_segment_it_held():
    tr, clock = _tracker()
    tr.add_plan("a", "drone_1", 1.0, _View(), stream=True)
    tr.add_segment("a", _seg(0, 0.0))
    tr.add_segment("a", _seg(1, 0.0))
    [gone] = tr.executor_lost("drone_1", 1.0, "drone_1 left")
    assert (gone.index, gone.code, gone.later) == (0, ErrorCode.EXECUTOR_UNAVAILABLE, (1,))
    assert tr.executor_lost("drone_1", 1.5, "again") == []


def test_the_open_loop_ablation_computes_e_from_estimates_only():
    tr, clock = _tracker(uses_feedback=False)
    view = _View()
    tr.add_plan("a", "drone_1", 1.0, view, stream=True)
    tr.add_segment("a", _seg(0, 0.0, est=2.0))
    tr.started("a", 0, 3.0)                          # a late start and an early end are ignored
    tr.finished("a", 0, 3.5, SegmentStatus.FINISHED)
    assert view.expected_exec_end == pytest.approx(0.1 + 2.0)
