"""fleet_workload waits for the server's first contact with its robots' executors before its first goal, exits
non-zero, saying why, when it executed no plan, and runs each task with a goal condition in the scene its context
describes and says whether the plan achieved it."""
from __future__ import annotations

import csv
import re
import time

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from ros_harness import NodeProcess, start_executor, start_server  # noqa: E402

from timely_llm_ros.ros.fleet.workload_node import executors_unmet  # noqa: E402


def test_unmet_executors_are_the_driven_robots_the_server_still_lists():
    assert executors_unmet({"drone_1", "arm_1"}, None) is None           # no server state yet
    assert executors_unmet({"drone_1", "arm_1"}, []) == []
    assert executors_unmet({"drone_1", "arm_1"}, ["/arm_1", "drone_9", "drone_1"]) == ["arm_1", "drone_1"]
    assert executors_unmet({"drone_1"}, ["drone_2"]) == []                 # another fleet's robot: not ours


def test_the_outcome_table_says_which_plans_achieved_their_task_and_why_the_others_did_not():
    from timely_llm_ros.ros.fleet.outcome_table import OutcomeRow, format_table

    rows = [OutcomeRow("drone_1", "drone", "prevent a collision with the pole", "urgent", 0.0, status="ok",
                       achieved="no: as placed: moved toward the pole"),
            OutcomeRow("drone_2", "drone", "evade the bird", "urgent", 0.1, status="ok", achieved="yes"),
            OutcomeRow("arm_1", "arm", "clean the desk", "normal", 0.2, status="INVALID_PLAN", achieved="?"),
            OutcomeRow("chat_1", "chat", "what do you see?", "normal", 0.3, status="ok")]
    table = format_table(rows)
    assert [line.split()[-2] for line in table.splitlines()[2:6]] == ["no", "yes", "?", "-"]
    assert "1/2 plans achieved their task in their robot's scene" in table
    assert "drone_1 'prevent a collision with the pole': as placed: moved toward the pole" in table


def test_first_goals_wait_until_the_server_has_met_their_executors():
    """make demo once dropped an urgent first goal that had waited 0.93 s for the server's handshake with its
    robot's executor. Here drone_2's executor starts only once the workload has said it waits for it, so a
    workload that sent at once would never print that line and its drone_2 goal would wait in the server."""
    nodes = []
    try:
        nodes.append(start_server("expected_agents:=[drone_1,drone_2]", "executor_discovery_timeout_s:=30.0"))
        nodes.append(start_executor("drone_1", "drone", 0.05))
        workload = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                               ["-r", "__node:=fleet_workload", "-p", "agents:=['drone_1:drone','drone_2:drone']",
                                "-p", "requests_per_agent:=1", "-p", "stagger_s:=0.0"], "no ready line")
        nodes.append(workload)
        workload.wait_for("waiting for the server to meet the executors of drone_2", 60.0)
        time.sleep(1.0)   # under test: drone_2's executor starts after the workload began waiting for it
        nodes.append(start_executor("drone_2", "drone", 0.05))
        workload.wait_for("the server has met every executor of this fleet", 60.0)
        assert workload.proc.wait(120) == 0, workload.output()
        waited = float(re.search(r"every executor of this fleet \(waited ([\d.]+) s\)", workload.output()).group(1))
        assert waited >= 1.0, workload.output()
        assert "dropped" not in workload.output() and "TIMEOUT" not in workload.output(), workload.output()
    finally:
        for n in reversed(nodes):
            n.stop()


def test_a_run_that_executes_no_plan_exits_1_and_says_how_its_goals_ended():
    """A demo whose every goal ends without a plan executed (issue 30: SmolLM2 on the embedded planner's urgency
    classes, all DROPPED) must not look like a success: here the robot's executor never runs."""
    nodes = []
    try:
        nodes.append(start_server("executor_discovery_timeout_s:=1.0"))
        workload = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                               ["-r", "__node:=fleet_workload", "-p", "agents:=['ghost_1:drone']",
                                "-p", "requests_per_agent:=2", "-p", "stagger_s:=0.0"], "no ready line")
        nodes.append(workload)
        assert workload.proc.wait(120) == 1, workload.output()
        workload.wait_for("no plan was executed: 2 goals: 2 EXECUTOR_UNAVAILABLE (first: no executor at "
                          "/ghost_1/execute_segment", 5.0)
        assert "0/2 plans executed" in workload.output()
    finally:
        for n in reversed(nodes):
            n.stop()


def _workload_of_tasks(tmp_path, agent: str, requests: int, ready: str) -> NodeProcess:
    """fleet_workload for one agent ("name:type") sending the tasks of tmp_path/tasks.yaml, its table to
    tmp_path/results.csv."""
    return NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                       ["-r", "__node:=fleet_workload", "-p", f"agents:=['{agent}']",
                        "-p", f"requests_per_agent:={requests}", "-p", f"tasks_file:={tmp_path / 'tasks.yaml'}",
                        "-p", f"results_csv:={tmp_path / 'results.csv'}"], ready)


def test_a_task_with_a_goal_runs_in_the_scene_its_context_describes_and_the_table_says_whether_it_achieved_it(
        tmp_path):
    """The workload sets the robot's simulated scene before each task with a goal and judges what the robot reports
    it ran there; the verdict equals the one the evaluation harness gives the same plan without ROS."""
    from timely_llm_ros.core.skills import load_skill_sets
    from timely_llm_ros.core.skills.context import parse_context
    from timely_llm_ros.core.skills.interpreter import format_value
    from timely_llm_ros.evaluation.goal_checks import judge_robot_run
    from timely_llm_ros.evaluation.goals import read_goal
    from timely_llm_ros.evaluation.scene_builder import variant_scene
    from timely_llm_ros.evaluation.scene_run import run_plan

    tasks = {"drone": [
        {"task": "look for the cat", "context": "room: living room; objects: sofa, lamp", "urgency": "normal",
         "goal": {"photograph": "cat"}},
        {"task": "get away from the pole", "context": "pole in front, 50 cm away", "urgency": "normal",
         "goal": {"avoid": "pole"}},
        {"task": "take a picture", "context": "room: hall; objects: door", "urgency": "normal"}]}
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks))
    nodes = []
    try:
        nodes.append(start_server("expected_agents:=[drone_1]"))
        executor = start_executor("drone_1", "drone", 0.02)
        nodes.append(executor)
        workload = _workload_of_tasks(tmp_path, "drone_1:drone", 3, "no ready line")
        nodes.append(workload)
        assert workload.proc.wait(180) in (0, 1), workload.output()
        out = workload.drained()
    finally:
        for n in reversed(nodes):
            n.stop()
    assert executor.output().count("scene set") == 2, executor.output()
    rows = list(csv.DictReader(open(tmp_path / "results.csv", encoding="utf-8")))
    assert [r["task"] for r in rows] == [t["task"] for t in tasks["drone"]]
    assert rows[2]["achieved"] == "-"
    drone = load_skill_sets()["drone"]
    for row, entry in zip(rows[:2], tasks["drone"]):
        goal = read_goal(entry["goal"])
        variant = goal.variants(parse_context(entry["context"]).objects)[0]
        scene = variant_scene("drone", entry["context"], goal, variant)
        run = run_plan(drone, row["plan"], scene.copy())
        error = "" if row["status"] == "ok" else row["status"]
        verdict = judge_robot_run(goal, variant, scene, "drone", run.executed,
                                  format_value(run.value) if run.returned else None, error)
        assert row["achieved"].startswith("yes" if verdict.achieved else "no"), (row, verdict)
    judged = sum(r["achieved"] == "yes" for r in rows[:2])
    assert f"{judged}/2 plans achieved their task in their robot's scene" in out, out[-3000:]


def test_a_stop_while_a_scene_is_being_set_sends_no_goal_and_ends_the_run_at_once(tmp_path):
    """CI once lost this race: Ctrl-C came while the workload waited (up to 10 s) for an arm's set_parameters
    service to stage its scene; the goal went out after the stop, its response was never awaited, and the run
    exited 1 with a "no result". Here the robot has no executor at all, so staging waits until the stop."""
    tasks = {"drone": [{"task": "look for the cat", "context": "room: living room; objects: sofa, lamp",
                        "urgency": "normal", "goal": {"photograph": "cat"}}]}
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks))
    nodes = []
    try:
        server = start_server()
        nodes.append(server)
        workload = _workload_of_tasks(tmp_path, "ghost_1:drone", 1, "fleet of 1 agents")
        nodes.append(workload)
        workload.wait_for("ghost_1: waiting up to 10 s for ghost_1/executor/set_parameters", 30)
        stopped_at = time.monotonic()
        workload.proc.send_signal(2)
        assert workload.proc.wait(30) == 0, workload.output()
        assert time.monotonic() - stopped_at < 5.0, workload.output()
        out = workload.drained()
    finally:
        for n in reversed(nodes):
            n.stop()
    rows = list(csv.DictReader(open(tmp_path / "results.csv", encoding="utf-8")))
    assert [(r["status"], r["message"]) for r in rows] == [("not sent", "stopped before the goal was sent")], out
    assert "ghost_1" not in server.output(), server.output()[-3000:]    # /plan never had the goal


def test_the_demo_deals_each_robot_type_its_tasks_in_order_without_repeats():
    """make demo's agents and tasks: every task of a type is sent once before any is sent again, and drone_2's
    first goal, the demo's contention goal (config/demo_fleet.yaml), is an urgent one."""
    from timely_llm_ros.paths import config_dir
    from timely_llm_ros.ros.fleet.workload_node import parse_agents

    params = yaml.safe_load((config_dir() / "demo_fleet.yaml").read_text(encoding="utf-8"))
    workload = params["/**/fleet_workload"]["ros__parameters"]
    tasks = yaml.safe_load((config_dir() / "fleet_tasks.yaml").read_text(encoding="utf-8"))
    agents = parse_agents(workload["agents"], tasks, workload["requests_per_agent"])
    for robot_type, pool in tasks.items():
        sent = [t["task"] for a in agents if a.robot_type == robot_type for t in a.tasks]
        assert len(set(sent)) == min(len(sent), len(pool)), (robot_type, sent)
    contention = next(a for a in agents if a.name == workload["contention_agent"])
    assert contention.tasks[0]["urgency"] == "urgent", contention.tasks[0]
    # past the end of its list a type starts over
    again = parse_agents(["arm_1:arm", "arm_2:arm", "arm_3:arm"], {"arm": [{"task": "a"}, {"task": "b"}]}, 1)
    assert [a.tasks[0]["task"] for a in again] == ["a", "b", "a"]
