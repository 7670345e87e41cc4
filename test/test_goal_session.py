"""A goal's hand-over to the scheduler thread and its client's cancel, decided under one lock
(ros/server/plan_session.py): the scheduler never gets the cancel before the goal, and never gets a goal whose
client cancelled it first. Real GoalSession objects, two real threads racing."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("rclpy")

from timely_llm_ros.ros.server.plan_session import GoalSession  # noqa: E402


def _session() -> GoalSession:
    return GoalSession("r1", "drone_1", dry_run=False, urgency="normal", goal_handle=None)


def test_a_cancel_before_the_hand_over_keeps_the_goal_from_the_scheduler():
    session, posted = _session(), []
    assert not session.request_cancel(lambda: posted.append("cancel"))      # nothing to cancel there: end it here
    assert not session.hand_over(lambda: posted.append("submit"))
    assert posted == [] and not session.submitted


def test_a_cancel_after_the_hand_over_is_posted_after_the_goal():
    session, posted = _session(), []
    assert session.hand_over(lambda: posted.append("submit"))
    assert session.request_cancel(lambda: posted.append("cancel"))
    assert posted == ["submit", "cancel"]


def test_without_a_scheduler_a_cancel_is_the_callers_to_end():
    session, posted = _session(), []
    assert session.hand_over(lambda: posted.append("submit"))
    assert not session.request_cancel(None) and session.cancel_requested


def test_racing_hand_over_and_cancel_never_reorder_nor_lose_the_cancel():
    """Either the cancel came first (nothing posted, the caller ends the goal) or the scheduler gets the goal and
    then its cancel; 2,000 races between two threads."""
    for _ in range(2000):
        session, posted = _session(), []
        start = threading.Barrier(2)
        outcome: dict[str, bool] = {}

        def give() -> None:
            start.wait()
            outcome["handed"] = session.hand_over(lambda: posted.append("submit"))

        def cancel() -> None:
            start.wait()
            outcome["posted"] = session.request_cancel(lambda: posted.append("cancel"))

        threads = [threading.Thread(target=give), threading.Thread(target=cancel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if outcome["handed"]:
            assert outcome["posted"] and posted == ["submit", "cancel"]
        else:
            assert not outcome["posted"] and posted == []
