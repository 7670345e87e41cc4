"""A policy set while the server runs (`ros2 param set /timely_server policy timebill`) is wired into the server as
the same policy set at configure: TimeBill's prompt-KV eviction then happens in the engine either way.

The server node runs in this process (the real node, its real parameter callback and scheduler thread, the embedded
planner), so the test can read which prompt-KV share the engine evicted: no topic carries that."""
from __future__ import annotations

import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402

from timely_llm_ros.core.request import PlanRequest  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from waiting import wait_until  # noqa: E402


def _evicted_share(policy: str, live_policy: str | None) -> dict[str, float]:
    """Configure a server with `policy`, set `live_policy` as `ros2 param set` does, serve one request with a
    0.5 s budget (TimeBill then evicts its largest share, 0.95, under its default step-time constants) and
    return the engine's eviction record (empty when the engine has none)."""
    from timely_llm_ros.ros.server.node import PlanServerNode

    context = rclpy.Context()
    rclpy.init(context=context)
    node = PlanServerNode(context=context, parameter_overrides=[
        Parameter("autostart", value=False), Parameter("policy", value=policy),
        Parameter("hardware_fit", value=False)])
    try:
        assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
        if live_policy is not None:
            result = node.set_parameters([Parameter("policy", value=live_policy)])[0]
            assert result.successful, result.reason
        req = PlanRequest(req_id="r1", agent_id="drone_1", robot_type="drone", task="look for the cat",
                          context="cat, chair, table", tuf=DEFAULT_URGENCY_CLASSES["normal"],
                          arrival=time.monotonic(), urgency="normal", time_budget_s=0.5, dry_run=True)
        node.runtime.loop.post(lambda s: s.submit(req))
        def applied_when_idle() -> dict | None:
            policy, applied, busy = node.runtime.loop.call(lambda s: (s.policy.name, dict(getattr(s.engine, "applied", {})),
                                                              s.busy())).result(10.0)
            return None if busy else {"policy": policy, **applied}

        return wait_until(applied_when_idle, 30.0, "the request did not end", 0.05)
    finally:
        node.trigger_shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_live_switch_to_timebill_evicts_prompt_kv_exactly_as_timebill_set_at_configure():
    configured = _evicted_share("timebill", None)
    switched = _evicted_share("fcfs", "timebill")
    assert configured == {"policy": "timebill", "r1": 0.95}
    assert switched == configured


def test_an_unknown_policy_is_refused_when_set_even_while_the_server_is_unconfigured():
    # it used to be stored and fail only the next configure, far from the `ros2 param set` that caused it
    from timely_llm_ros.ros.server.node import PlanServerNode

    context = rclpy.Context()
    rclpy.init(context=context)
    node = PlanServerNode(context=context, parameter_overrides=[
        Parameter("autostart", value=False), Parameter("hardware_fit", value=False)])
    try:
        refused = node.set_parameters([Parameter("policy", value="bogus")])[0]
        accepted = node.set_parameters([Parameter("policy", value="fcfs")])[0]
        assert not refused.successful and "unknown policy 'bogus'" in refused.reason
        assert accepted.successful, accepted.reason
        assert node.get_parameter("policy").value == "fcfs" and node.params.policy == "fcfs"
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
