"""The reliability suite (tools/stress, `make stress`) itself runs: a reduced configuration of every phase.

The suite runs to its table, sends what it was asked to, scores every goal, and its verdict is PASS: no lost goal,
no unexpected code, no crash, no generation left running, no leak, every process exits 0 on SIGINT."""
from __future__ import annotations

import re
import subprocess
import sys

from ros_harness import REPO, ros_env


def test_reduced_stress_run_passes_every_phase():
    cmd = [sys.executable, "tools/stress/run.py", "--fuzz", "30", "--aborts", "2", "--hangs", "1", "--kills", "1",
           "--cancels", "8", "--burst", "12", "--soak-agents", "6", "--soak-s", "3", "--result-timeout", "5",
           "--plans", "30", "--seed", "2"]
    proc = subprocess.run(cmd, cwd=REPO, env=ros_env(), capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 2, out[-5000:]  # 2 = the suite itself could not run
    rows = {m.group(1): [c.strip() for c in m.group(2).split("|")]
            for m in re.finditer(r"^\| (fuzz|faults|cancels|burst|soak|plans) \|(.*)\|$", out, re.M)}
    assert list(rows) == ["fuzz", "faults", "cancels", "burst", "soak", "plans"], out[-5000:]
    assert rows["plans"][0] == "30" and rows["plans"][-1] == "ok"   # 10 random plans of each of 3 robot types
    assert rows["fuzz"][0] == "31" and rows["cancels"][0] == "8" and rows["burst"][0] == "12"
    assert rows["faults"][0] == "5"  # 2 aborts + 1 hang + 1 kill mid-segment + 1 goal after the kill
    assert int(rows["soak"][0]) >= 6
    assert proc.returncode == 0 and "PASS" in out, out[-5000:]


def test_request_lines_keep_the_newest_lines_of_the_newest_requests():
    sys.path.insert(0, str(REPO / "tools" / "stress"))
    try:
        from procs import RequestLines
    finally:
        sys.path.pop(0)
    lines = RequestLines(keep=2, per_request=3)
    lines.add("[INFO] [timely_server]: [0123456789ab] drone_1 (drone, urgent): 'take off'")
    lines.add("segment timing 0123456789ab 0 sent 12.5")
    lines.add("[WARN] [timely_server]: [fedcba987654] ended EXECUTOR_UNAVAILABLE: executor /d/execute_segment ...")
    assert lines.of("0123456789ab") == ["[INFO] [timely_server]: [0123456789ab] drone_1 (drone, urgent): 'take off'",
                                        "segment timing 0123456789ab 0 sent 12.5"]
    for i in range(4):
        lines.add(f"segment timing fedcba987654 {i} ended 1.0")
    assert lines.of("fedcba987654") == [f"segment timing fedcba987654 {i} ended 1.0" for i in (1, 2, 3)]
    lines.add("goal 00000000000a, not 0123456789abc (13 digits) nor 0123456789a (11)")
    assert lines.of("00000000000a") and lines.of("0123456789ab") == []   # the oldest of three ids is let go
    assert lines.of("0123456789abc") == lines.of("0123456789a") == []
