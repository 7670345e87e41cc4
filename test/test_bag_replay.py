"""A recorded workload (mcap bag of Plan goals) replayed into the running server by the workload node, which
records the goals as sent and every result into a second bag."""
from __future__ import annotations

import math
import subprocess
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from timely_llm_ros.evaluation.workload.bag import (CORPUS_PHRASING, RunRecord, format_comparison,  # noqa: E402
                                              main as bag_cli,
                                              read_bag, read_results, write_bag, write_run_bag)
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadSpec, WorkloadTask  # noqa: E402
from timely_llm_ros.paths import default_model_dir  # noqa: E402

from ros_harness import NodeProcess, start_executor, start_server  # noqa: E402

needs_model = pytest.mark.skipif(not (default_model_dir() / "config.json").is_file(),
                                 reason=f"needs the trained planner at {default_model_dir()} (replay generates real "
                                        "plans)")

# (offset s, agent, robot type, urgency, task, context): corpus-style tasks the embedded planner was trained on
GOALS = [
    (0.0, "drone_1", "drone", "normal", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
    (0.2, "drone_2", "drone", "urgent", "a child is too close, avoid injuring them", "child in front, 60 cm away"),
    (0.5, "arm_1", "arm", "normal", "clean the desk", "desk: paper, cup; places: trash bin, drawer, tray"),
    (1.2, "drone_2", "drone", "normal", "check for keys or wallet", "room: bedroom; objects: bed, wallet, lamp"),
    (1.8, "drone_1", "drone", "urgent", "evade the bird", "bird above, 120 cm away"),
]


def small_workload() -> Workload:
    spec = WorkloadSpec(name="replay-test", eps=1.0, max_tpe=1, trace_ids=(1,), agents=2, duration_s=2.0)
    tasks = [WorkloadTask(f"replay-{i}", t, i, agent, 1, robot, urgency, task, context, "", 0)
             for i, (t, agent, robot, urgency, task, context) in enumerate(GOALS)]
    return Workload(spec, tasks, 0, len(tasks))


def test_run_bag_round_trips_goals_as_sent_and_results(tmp_path):
    from rclpy.serialization import serialize_message
    from timely_llm_ros.action import Plan
    from timely_llm_ros.msg import PlanSegment, Skill

    w = small_workload()
    res = Plan.Result(error_code=Plan.Result.DROPPED, error_message="late", request_id="req-7", plan="mf(50);",
                      segments=[PlanSegment(index=0, text="mf(50);", skills=[Skill(name="mf", args=["50"])],
                                            estimated_exec_time=2.2, exec_time=2.5, executed=True)],
                      response_time=0.4, waiting_time=0.5, completion_time=3.0, utility=0.7, tokens_generated=9)
    records = [RunRecord(w.tasks[0], 0.01, 3.5, serialize_message(res), {"request_id": "req-7", "status": "DROPPED"}),
               RunRecord(w.tasks[1], 0.21)]  # never answered
    bag = write_run_bag(tmp_path / "run.mcap", w, records)
    got = read_results(bag)
    assert [g["task_id"] for g in got] == ["replay-0", "replay-1"]
    back = got[0]["result"]
    assert (back.error_code, back.request_id, back.segments[0].skills[0].args, back.utility) == (11, "req-7", ["50"], 0.7)
    assert got[1]["result"] is None and got[1]["result_at"] is None
    sent = read_bag(bag)
    assert [t.task_id for t in sent.tasks] == ["replay-0", "replay-1"]
    assert [t.arrival for t in sent.tasks] == pytest.approx([0.01, 0.21])
    table = format_comparison(got, got[:1], "run_a", "run_b")
    lines = {line.split()[0]: line for line in table.splitlines() if line.startswith("replay-")}
    assert set(lines) == {"replay-0", "replay-1"}
    assert "DROPPED" in lines["replay-0"] and lines["replay-1"].count("no result") == 2
    assert "run_a: 1 results, 1 served, mean response 0.400 s, mean utility 0.700" in table


def test_bag_cli_records_a_preset(tmp_path, capsys):
    assert bag_cli(["record", "--preset", "WID1", "--duration", "20", "--out", str(tmp_path / "wid1.mcap")]) == 0
    w = read_bag(tmp_path / "wid1.mcap")
    assert w.spec.name == "WID1" and w.spec.duration_s == 20 and w.tasks
    assert all(0 <= t.arrival < 20 for t in w.tasks)
    assert bag_cli(["record", "--preset", "WID1", "--out", str(tmp_path / "wid1.mcap")]) == 1  # never overwrites
    assert bag_cli(["record", "--preset", "WID1", "--duration", "20", "--phrasing", "corpus",
                    "--out", str(tmp_path / "wid1_corpus.mcap")]) == 0
    phrased = read_bag(tmp_path / "wid1_corpus.mcap")
    assert [t.arrival for t in phrased.tasks] == [t.arrival for t in w.tasks]
    assert [(t.task, t.context) for t in phrased.tasks] == [CORPUS_PHRASING[t.trace_id] for t in w.tasks]


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    workload_bag = write_bag(small_workload(), tmp / "workload.mcap")
    results_bag = tmp / "results.mcap"
    nodes = []
    try:
        nodes.append(start_server("executor_timeout_s:=5.0", "executor_discovery_timeout_s:=3.0"))
        for agent, robot in (("drone_1", "drone"), ("drone_2", "drone"), ("arm_1", "arm")):
            nodes.append(start_executor(agent, robot, 0.05))
        node = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                           ["-p", f"workload_file:={workload_bag}", "-p", f"record_bag:={results_bag}",
                            "-p", "result_timeout_s:=120.0"], "replaying")
        nodes.append(node)
        try:
            code = node.proc.wait(180)
        except subprocess.TimeoutExpired:
            node.stop()
            pytest.fail("workload node did not finish in 180 s:\n" + node.output())
        yield code, node.drained(), results_bag
    finally:
        for n in reversed(nodes):
            n.stop()


@needs_model
def test_replay_node_exits_0_when_every_goal_got_a_result(replay):
    code, output, _ = replay
    assert code == 0, output[-3000:]
    for _, agent, *_ in GOALS:
        assert agent in output  # the outcome table lists every request


@needs_model
def test_results_bag_holds_one_result_per_recorded_goal_for_the_right_agent(replay):
    _, output, bag = replay
    records = read_results(bag)
    assert sorted(r["task_id"] for r in records) == [f"replay-{i}" for i in range(len(GOALS))], output[-2000:]
    for r in records:
        i = int(r["task_id"].split("-")[1])
        assert r["agent_id"] == GOALS[i][1]
        assert r["result"] is not None and r["result"].request_id == r["request_id"] != ""
        assert r["result_at"] >= r["sent_at"]
    # the goals as sent read back as a workload: same agents, tasks and order, at (about) the recorded offsets
    sent = read_bag(bag)
    assert [(t.agent_id, t.task, t.urgency) for t in sent.tasks] == [(g[1], g[4], g[3]) for g in GOALS]
    for t, g in zip(sent.tasks, GOALS):
        assert g[0] - 1e-3 <= t.arrival <= g[0] + 0.5
    assert bag_cli(["compare", str(bag), str(bag)]) == 0


@needs_model
def test_recorded_bags_carry_wall_clock_timestamps(replay):
    from rosbags.highlevel import AnyReader

    _, _, bag = replay
    with AnyReader([bag]) as reader:
        stamps = [stamp for _, stamp, _ in reader.messages()]
    now = time.time_ns()
    assert stamps and all(now - 3600 * 10**9 < s <= now for s in stamps)  # recorded within the last hour


@needs_model
def test_replayed_outcomes_are_consistent(replay):
    _, output, bag = replay
    results = [r["result"] for r in read_results(bag)]
    served = [res for res in results if res.segments and all(s.executed for s in res.segments)]
    assert served, "no replayed plan was executed:\n" + output[-3000:]
    for res in served:
        assert [s.index for s in res.segments] == list(range(len(res.segments)))
        assert all(s.exec_time > 0 for s in res.segments)
        assert 0 < res.response_time <= res.completion_time
        assert res.waiting_time >= res.response_time - 1e-6
        assert math.isfinite(res.utility)
    for res in results:
        if res.error_code == 0:
            assert res in served
