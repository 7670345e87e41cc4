"""The whole stack on a real pretrained model: SmolLM2-135M-Instruct (its chat prompt, under its skill grammar by
default; its GGUF as stored, on the llamacpp engine, the default for a GGUF entry) in the real server process, a simulated drone executor in its own, a Plan client over DDS. The plan parses
and its robot executes every segment; /diagnostics warns about exactly the urgency classes the hardware fit measured
this engine cannot meet (whichever those are on this machine)."""
from __future__ import annotations

import re

import pytest

rclpy = pytest.importorskip("rclpy")

from timely_llm_ros.action import Plan  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402

from ros_harness import plan_client, start_executor, start_server, wait_until  # noqa: E402

R = Plan.Result
NETWORK_DELAY_S = 0.008   # the server's default network_delay_s
LENIENT = dict(urgency_class="", ert=60.0, alpha=-0.01, beta=1.0)   # served whatever this machine's speed


@pytest.fixture(scope="module")
def smollm2_fleet():
    nodes = []
    try:
        # configure loads the model, prefills each robot type's system prompt and measures the hardware fit: about
        # 20 s on a quiet 2-core box, minutes on a crowded one
        nodes.append(start_server("model:=smollm2", "expected_agents:=[drone_1]", "executor_discovery_timeout_s:=8.0",
                                  ready_timeout=300.0))
        nodes.append(start_executor("drone_1", "drone", 0.05))
        nodes[0].wait_for("all expected executors discovered", 30.0)
        with plan_client() as client:
            yield client, nodes[0]
    finally:
        for node in reversed(nodes):
            node.stop()


def test_a_smollm2_plan_under_its_grammar_parses_and_the_robot_executes_every_segment(smollm2_fleet):
    client, server = smollm2_fleet
    drone = load_skill_sets()["drone"]
    status, result = client.send(agent_id="drone_1", robot_type="drone", task="look for the cat",
                                 context="room: living room; objects: sofa, lamp, plant", **LENIENT).result(180)
    assert "grammar-constrained decoding on (grammar=auto, model entry 'smollm2')" in server.output()
    assert "engine llamacpp (LlamaCppEngine): SmolLM2-135M-Instruct.Q4_1.gguf" in server.output()
    assert status == 4 and result.error_code == R.ERROR_NONE, (result.error_code, result.error_message)
    assert not parse(result.plan, drone.skills, drone.statement_forms).problems, result.plan
    assert result.segments and all(s.executed for s in result.segments), result.segments


def test_diagnostics_warn_exactly_about_the_classes_the_measured_first_segments_cannot_meet(smollm2_fleet):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    client, server = smollm2_fleet
    diags = []
    assert client.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
    wait_until(lambda: diags, 20, "no /diagnostics from the configured server")
    status = diags[-1].status[0]
    values = {kv.key: kv.value for kv in status.values}
    first = {m.group(1): float(v.split(" s")[0]) for k, v in values.items()
             if (m := re.fullmatch(r"fit (\w+) first segment", k))}
    assert set(first) == set(load_skill_sets()), values
    classes = {m.group(1): float(re.match(r"ERT ([\d.]+) s", v).group(1)) for k, v in values.items()
               if (m := re.fullmatch(r"urgency class (\w+)", k))}
    assert set(classes) == {"normal", "urgent"}, values
    unmet = {name for name, ert in classes.items() if max(first.values()) + NETWORK_DELAY_S > ert}
    for name in classes:
        assert (f"urgency class {name}: ERT" in status.message) == (name in unmet), (name, status.message, values)
    if unmet:
        assert status.level == DiagnosticStatus.WARN, status.message
        assert "[WARN]" in server.output() and f"urgency class {sorted(unmet)[0]}: ERT" in server.output()
