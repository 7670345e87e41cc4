"""The demo's timeline comes from a real run: a short fleet (one arm, one drone) whose urgent drone goal is held back
until the arm's first plan is generating, the server's step trace and the workload's events, and the picture drawn
from them says who was suspended while the urgent request waited for its first segment."""
from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("rclpy")

from ros_harness import REPO, ros_env  # noqa: E402

from tools import demo_timeline  # noqa: E402
from timely_llm_ros.core.step_trace import read_step_trace  # noqa: E402

TASKS = {
    "arm": [{"task": "clean the desk", "context": "desk: paper, can, tissue; places: trash bin, drawer, tray",
             "urgency": "normal"}],
    "drone": [{"task": "prevent a collision with the pole", "context": "pole on the left, 40 cm away",
               "urgency": "urgent"}],
}
# The shipped classes with every time stretched 10x (ert x10, alpha /10): the same order of urgency, but a machine that
# takes most of a second for one first segment (SmolLM2 on one slow thread, under the other tests' load) no longer
# drops the urgent goal as hopeless (zero utility at 0.5 s unstretched), which is the scheduler working, not this run
CLASSES = {"normal": {"ert": 10.0, "alpha": -0.2, "beta": 1.0, "late": "serve"},
           "urgent": {"ert": 2.0, "alpha": -0.667, "beta": 2.0, "late": "drop"}}
AGENTS = ("arm_1", "drone_2")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real short run (server, two executors, the workload), as `make demo` runs it; its folder."""
    folder = tmp_path_factory.mktemp("demo_run")
    (folder / "tasks.yaml").write_text(yaml.safe_dump(TASKS))
    (folder / "classes.yaml").write_text(yaml.safe_dump(CLASSES))
    (folder / "params.yaml").write_text(yaml.safe_dump({
        "/**/timely_server": {"ros__parameters": {
            # one generation a step: the urgent request cannot join the batch beside the arm's, so the arm's is
            # suspended for it (with room in the batch that depended on timing); the demo's own model: the embedded
            # planner wrote the arm's whole plan about 0.15 s after the urgent goal's release, a margin a loaded
            # machine could eat, where SmolLM2's twelve-segment plan leaves seconds
            "num_threads": 1, "max_batch": 1, "expected_agents": list(AGENTS), "model": "smollm2",
            "urgency_classes_file": str(folder / "classes.yaml"), "step_trace_csv": str(folder / "steps.csv")}},
        "/**/executor": {"ros__parameters": {"time_scale": 0.1}},
        "/**/fleet_workload": {"ros__parameters": {
            "agents": ["arm_1:arm", "drone_2:drone"], "requests_per_agent": 1,
            "tasks_file": str(folder / "tasks.yaml"), "stagger_s": 0.0, "contention_agent": "drone_2",
            "events_csv": str(folder / "events.csv")}},
    }))
    (folder / "fleet.yaml").write_text(yaml.safe_dump({"bringup": {
        "params_file": "params.yaml", "stop_grace_s": 10.0,
        "executors": [{"agent": a, "robot_type": a.split("_")[0]} for a in AGENTS]}}))
    done = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.fleet.bringup", "--fleet", str(folder / "fleet.yaml")],
                          env=ros_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "2/2 plans executed" in out, out[-4000:]
    return folder


def test_the_urgent_goal_arrives_while_the_arms_plan_generates(run):
    tracks = demo_timeline.read_events(run / "events.csv")
    urgent, arm = tracks["drone_2#1"], tracks["arm_1#1"]
    assert urgent.urgency == "urgent (held)"
    # held until the arm's plan was generating (its Plan feedback), and sent before the arm's plan was complete
    assert any(s == "generating" and t < urgent.sent for t, s in arm.states), arm.states
    assert urgent.sent < arm.segments[-1][0]
    # the robots ran what was generated, by their executors' own status matched by request id (a status is latched
    # with depth 1, so a segment shorter than the status's delivery, such as a return, may never show as busy)
    for track in tracks.values():
        assert track.result == "ok"
        ran = {i for _, _, i in track.executed}
        assert 0 in ran and ran <= {i for _, i in track.segments}, (track.label, track.executed, track.segments)
        assert all(start >= track.segments[index][0] - 0.25 for start, _, index in track.executed)


def test_the_timeline_shows_who_was_suspended_while_the_urgent_request_waited(run):
    steps = read_step_trace(run / "steps.csv")
    tracks = demo_timeline.read_events(run / "events.csv")
    contention = demo_timeline.find_contention(tracks, steps)
    assert contention is not None and contention.request.label == "drone_2#1"
    assert contention.arrival < contention.first_segment and contention.steps >= 1
    assert contention.suspended, demo_timeline.summary(contention, contention.arrival)
    # each request it names was suspended, by the raw feedback rows, at some moment while the urgent one waited
    with open(run / "events.csv", newline="") as f:
        states = [r for r in csv.DictReader(f) if r["kind"] == "state"]
    for label in contention.suspended:
        own = [(float(r["t"]), r["value"]) for r in states if r["request"] == label]
        entered = [t for (t, s), (t_next, _) in zip(own, own[1:] + [(float("inf"), "")])
                   if s == "suspended" and t < contention.first_segment and t_next > contention.arrival]
        assert entered, (label, own)
    png = run / "timeline.png"
    assert demo_timeline.main([str(run)]) == 0
    assert png.stat().st_size > 20_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
