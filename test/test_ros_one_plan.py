"""One plan per robot through the real server, the embedded model and simulated executors in their own processes,
over DDS: two plans for one robot never interleave; under urgent_preempts a more urgent plan stops the running one,
which ends PREEMPTED. The executors log every segment's start and end (log_timing), which the tests read."""
from __future__ import annotations


import pytest

rclpy = pytest.importorskip("rclpy")

from timely_llm_ros.action import Plan  # noqa: E402

from ros_harness import plan_client, runs_on_robot, start_executor, start_server, wait_until  # noqa: E402

R = Plan.Result
TASK = dict(robot_type="drone", task="look for the cat", context="cat, chair, table, lamp")
# served late rather than dropped: the second plan waits for the robot (ERT 60 s; 30 s is the more urgent one)
LENIENT = dict(urgency_class="", ert=60.0, alpha=-0.01, beta=1.0)
URGENT = dict(urgency_class="", ert=30.0, alpha=-0.01, beta=1.0)


@pytest.fixture(scope="module")
def fleet():
    nodes = []
    try:
        nodes.append(start_server("executor_discovery_timeout_s:=8.0", "executor_ack_timeout_s:=8.0",
                                  "expected_agents:=[one_queue,one_preempt]"))
        nodes.append(start_executor("one_queue", "drone", 0.1, params=("log_timing:=true",)))
        nodes.append(start_executor("one_preempt", "drone", 0.3,
                                    params=("log_timing:=true", "plan_rule:=urgent_preempts")))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            yield client, nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def _never_two_at_once(runs) -> None:
    assert all(end <= nxt for (_, _, end), (_, nxt, _) in zip(runs, runs[1:])), runs


def test_two_plans_for_one_robot_never_interleave(fleet):
    client, nodes = fleet
    first, second = (client.send(agent_id="one_queue", **TASK, **LENIENT) for _ in range(2))
    results = [run.result(120) for run in (first, second)]
    assert all(status == 4 and result.error_code == R.ERROR_NONE for status, result in results), \
        [(r.error_code, r.error_message) for _, r in results]
    ids = [result.request_id for _, result in results]
    runs = runs_on_robot(nodes[1].output())
    order = [req for (req, _), _, _ in runs]
    assert set(order) == set(ids) and len(order) == sum(s.executed for _, r in results for s in r.segments)
    split = order.index(order[-1])
    assert set(order[:split]) == {order[0]} and set(order[split:]) == {order[-1]}, order   # one plan, then the other
    _never_two_at_once(runs)


def test_a_more_urgent_plan_preempts_the_running_one_which_ends_preempted(fleet):
    client, nodes = fleet
    robot = nodes[2]
    slow = client.send(agent_id="one_preempt", **TASK, **LENIENT)
    wait_until(lambda: runs_on_robot(robot.output()), 60, "the slow plan's first segment never ran")
    urgent = client.send(agent_id="one_preempt", **TASK, **URGENT)
    _, slow_result = slow.result(120)
    status, urgent_result = urgent.result(120)
    assert slow_result.error_code == R.PREEMPTED, (slow_result.error_code, slow_result.error_message)
    assert "more urgent" in slow_result.error_message
    assert urgent_result.error_code == R.ERROR_NONE, urgent_result.error_message
    log = robot.output()
    assert f"[{slow_result.request_id}] preempted by plan {urgent_result.request_id}" in log, log[-3000:]
    ran = [s for s in slow_result.segments if s.executed]
    assert len(ran) < len(slow_result.segments)                 # what it had left did not run
    runs = runs_on_robot(log)
    _never_two_at_once(runs)
    order = [req for (req, _), _, _ in runs]
    assert order[0] == slow_result.request_id and order[-1] == urgent_result.request_id
    assert set(order) == {slow_result.request_id, urgent_result.request_id}
    assert order.index(urgent_result.request_id) == len(order) - len(urgent_result.segments)   # never back to slow
