"""The server as a managed node, driven from outside through its lifecycle services, and its burst behaviour:
every goal of a burst larger than its queue gets a goal response and a result (served or OVERLOADED)."""
from __future__ import annotations

import re
from collections import Counter

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402

from timely_llm_ros.action import Plan  # noqa: E402

from ros_harness import plan_client, start_server, wait  # noqa: E402

R = Plan.Result
QUEUE = 12
BURST = 200
DRY = dict(agent_id="drone_1", robot_type="drone", task="look for the cat", context="cat, chair, table",
           urgency_class="normal", dry_run=True)


def _call(node, srv_type, name: str, request):
    client = node.create_client(srv_type, name)
    try:
        assert client.wait_for_service(timeout_sec=20.0), f"no service {name}"
        response = wait(client.call_async(request), 60.0)
        assert response is not None, f"{name}: no response"
        return response
    finally:
        node.destroy_client(client)


def _state(node) -> str:
    return _call(node, GetState, "/timely_server/get_state", GetState.Request()).current_state.label


def _transition(node, transition_id: int) -> bool:
    return _call(node, ChangeState, "/timely_server/change_state",
                 ChangeState.Request(transition=Transition(id=transition_id))).success


def _result_code(client, **fields) -> int:
    return _result(client, **fields)[0]


def _result(client, **fields) -> tuple[int, str]:
    status, result = client.send(**fields).result(60)
    assert result.error_message or result.error_code == R.ERROR_NONE
    return result.error_code, result.error_message


@pytest.fixture(scope="module")
def managed_server():
    server = start_server("autostart:=false", f"max_queued:={QUEUE}", "max_batch:=8",
                          ready="waiting for configure/activate")
    try:
        yield server
    finally:
        server.stop()


def test_lifecycle_driven_from_outside_and_a_burst_beyond_the_queue_loses_nothing(managed_server):
    with plan_client() as client:
        node = client.node
        assert _state(node) == "unconfigured"
        # the action exists, but nothing is loaded: the answer names the transitions that would serve the goal
        code, message = _result(client, **DRY)
        assert code == R.NOT_ACTIVE and "unconfigured" in message and "configure, then activate" in message, message
        assert _transition(node, Transition.TRANSITION_CONFIGURE)
        assert _state(node) == "inactive"
        code, message = _result(client, **DRY)
        assert code == R.NOT_ACTIVE and "inactive" in message and "configure" not in message, message
        assert _transition(node, Transition.TRANSITION_ACTIVATE)
        assert _state(node) == "active"

        # a burst of simultaneous goals, far beyond max_queued: each gets a response and a terminal result
        runs = [client.send_async(**dict(DRY, agent_id=f"drone_{i}", max_new_tokens=3)) for i in range(BURST)]
        for run in runs:
            run.accepted(60.0)
        codes = Counter()
        for run in runs:
            status, result = run.result(180)
            assert status in (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_ABORTED)
            codes[result.error_code] += 1
        assert sum(codes.values()) == BURST
        assert codes[R.OVERLOADED] >= 1, codes                      # the bound is enforced ...
        assert BURST - codes[R.OVERLOADED] >= QUEUE, codes           # ... and the queue was used in full
        # served ones end as plans (3-token caps: PLAN_TOO_LONG, GENERATION_FAILED where no skill was complete, or
        # INVALID_PLAN where they stop parsing) or, on a loaded box, DROPPED once their utility is gone: never
        # anything else
        assert set(codes) <= {R.OVERLOADED, R.ERROR_NONE, R.PLAN_TOO_LONG, R.GENERATION_FAILED, R.INVALID_PLAN,
                              R.DROPPED}, codes

        assert _transition(node, Transition.TRANSITION_DEACTIVATE)
        assert _state(node) == "inactive"
        assert _result_code(client, **DRY) == R.NOT_ACTIVE
        assert _transition(node, Transition.TRANSITION_CLEANUP)
        assert _state(node) == "unconfigured"
        assert _transition(node, Transition.TRANSITION_CONFIGURE)   # and it can load again
        assert _transition(node, Transition.TRANSITION_ACTIVATE)
        status, result = client.send(**DRY).result(120)
        assert result.error_code in (R.ERROR_NONE, R.GENERATION_FAILED, R.INVALID_PLAN), result.error_message
    managed_server.stop()
    assert managed_server.proc.returncode == 0, managed_server.output()[-2000:]
    assert "Traceback" not in managed_server.output()
    assert "cleaned up: model freed" in managed_server.output()
    # each configure freezes what it loaded (370k objects) out of the cycle collector's reach: a full collection
    # walking them stopped the engine loop for 250 ms in a burst
    frozen = [int(n) for n in re.findall(r"(\d+) long-lived objects frozen", managed_server.output())]
    assert len(frozen) == 2 and min(frozen) > 10_000, frozen
