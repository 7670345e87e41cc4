"""The stress phases. Each sends goals through the StressClient and returns its GoalRecords; report.py scores them."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from goals import (CANCELLED, DROPPED, EXEC_FAILED, EXEC_TIMEOUT, EXEC_UNAVAILABLE, NONE, draw_malformed,
                   valid_goal)
from procs import Child, start_executors
from report import Row

VALID = {NONE, DROPPED}


@dataclass
class Run:
    """What every phase shares."""

    client: object
    server: Child
    hosts: list[Child]
    rng: random.Random
    seed: int
    outstanding: int = 32
    result_timeout_s: float = 120.0
    notes: list[str] = field(default_factory=list)


class ServerDied(RuntimeError):
    """The server process exited during a phase (a crash): the phase stops, the run reports it."""


def _throttle(run: Run, records: list, limit: int) -> None:
    """Wait while `limit` goals are open (a goal with no answer after result_timeout_s counts as lost, not open)."""
    while True:
        if not run.server.alive:
            raise ServerDied(f"server exited with {run.server.proc.returncode}")
        now = time.monotonic()
        if sum(1 for r in records if not r.terminal and now - r.sent < run.result_timeout_s) < limit:
            return
        time.sleep(0.005)


def warm_up(run: Run, agent: str, n: int = 8) -> list:
    """Before the first RSS reading: a full batch of valid goals (the engine's batch buffers) and `outstanding`
    malformed ones at once (the server's goal threads and their allocator arenas), so the baseline is a warm
    server and RSS growth over the run measures what the phases leave behind, not first use."""
    records = [run.client.send("warm-up", "valid", VALID, valid_goal(agent, "drone")) for _ in range(n)]
    for kind, code, fields in draw_malformed(run.outstanding, agent, run.seed + 1):
        records.append(run.client.send("warm-up", kind, {code}, fields))
    run.client.wait_terminal(records, run.result_timeout_s)
    return records


def fuzz(run: Run, n_bad: int, agent: str, valid_every: int = 20) -> list:
    """n_bad malformed goals (hypothesis) with one valid goal after every valid_every, at most `outstanding` open."""
    bad = draw_malformed(n_bad, agent, run.seed)
    records: list = []
    for i, (kind, code, fields) in enumerate(bad):
        _throttle(run, records, run.outstanding)
        records.append(run.client.send("fuzz", kind, {code}, fields))
        if i % valid_every == valid_every - 1:
            records.append(run.client.send("fuzz", "valid", VALID, valid_goal(agent, "drone")))
    run.client.wait_terminal(records, run.result_timeout_s)
    return records


def faults(run: Run, n_abort: int, n_hang: int, n_kill: int, kill_agents: list[str], kill_hosts: list[Child]) -> list:
    """Executors that fail every segment, hang, or are SIGKILLed mid-segment (then get a new goal)."""
    records = [run.client.send("faults", "abort", {EXEC_FAILED}, valid_goal("fa_1", "drone")) for _ in range(n_abort)]
    records += [run.client.send("faults", "hang", {EXEC_TIMEOUT}, valid_goal("fh_1", "drone")) for _ in range(n_hang)]
    killed = []
    for agent, host in list(zip(kill_agents, kill_hosts))[:n_kill]:
        rec = run.client.send("faults", "kill mid-segment", {EXEC_UNAVAILABLE, EXEC_TIMEOUT}, valid_goal(agent, "drone"))
        records.append(rec)
        killed.append((agent, host, rec))
    for agent, host, rec in killed:
        end = time.monotonic() + 60
        while time.monotonic() < end and not any("started" in ev for ev in host.timing.values()) and not rec.terminal:
            time.sleep(0.02)
        if any("started" in ev for ev in host.timing.values()):
            time.sleep(run.rng.uniform(0.0, 0.3))
            host.kill()
        else:
            run.notes.append(f"faults: {agent} never started a segment ({rec.code} {rec.message!r}); killed anyway")
            host.kill()
    run.client.wait_terminal(records, run.result_timeout_s + 20)
    # a new goal for an executor that is gone: the issue asks for EXECUTOR_UNAVAILABLE
    after = [run.client.send("faults", "goal after kill", {EXEC_UNAVAILABLE}, valid_goal(agent, "drone"))
             for agent, _, _ in killed]
    run.client.wait_terminal(after, run.result_timeout_s + 20)
    return records + after


CANCEL_POINTS = ("queued", "generating", "suspended", "executing", "random")


def cancels(run: Run, n: int, agents: list[str]) -> list:
    """n goals, each cancelled at a random point: on the first feedback of a chosen state, or after a random delay."""
    records: list = []
    pending: dict = {}

    def on_feedback(rec, fb) -> None:
        if rec.cancel_at_state == "" and fb.state == pending.get(id(rec), (None,))[0]:
            rec.cancel_at_state = fb.state
            run.client.cancel(rec)

    for i in range(n):
        _throttle(run, records, run.outstanding)
        point = run.rng.choice(CANCEL_POINTS)
        delay = 0.0 if point == "queued" else run.rng.uniform(0.0, 3.0)
        agent = agents[i % len(agents)]
        rec = run.client.send("cancels", f"cancel {point}", {CANCELLED, NONE, DROPPED}, valid_goal(agent, "drone"),
                              on_feedback=on_feedback)
        pending[id(rec)] = (point, time.monotonic() + delay)
        records.append(rec)
        _cancel_due(run, records, pending)
    end = time.monotonic() + run.result_timeout_s
    while time.monotonic() < end and not all(r.terminal for r in records):
        _cancel_due(run, records, pending)
        time.sleep(0.01)
    return records


def _cancel_due(run: Run, records: list, pending: dict) -> None:
    now = time.monotonic()
    for rec in records:
        if rec.cancel_at_state == "" and rec.handle is not None and not rec.terminal and pending[id(rec)][1] <= now:
            rec.cancel_at_state = (rec.states[-1] if rec.states else "accepted") + " (timer)"
            run.client.cancel(rec)


def burst(run: Run, n: int, agents: list[str]) -> list:
    """n goals sent at the same moment (half dry-run, half executed)."""
    records = [run.client.send("burst", "burst", {NONE, DROPPED},
                               valid_goal(agents[i % len(agents)], "drone", dry_run=i % 2 == 0)) for i in range(n)]
    run.client.wait_terminal(records, run.result_timeout_s + 0.5 * n)
    return records


def soak(run: Run, agents: list[str], seconds: float) -> list:
    """Every agent in closed loop (next goal when its last one ended) for `seconds`."""
    records: list = []
    current: dict = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for agent in agents:
            rec = current.get(agent)
            if rec is None or rec.terminal:
                current[agent] = run.client.send("soak", "closed loop", {NONE, DROPPED}, valid_goal(agent, "drone"))
                records.append(current[agent])
        time.sleep(0.01)
    run.client.wait_terminal(records, run.result_timeout_s)
    return records


def fault_hosts(n_kill: int) -> tuple[list[Child], list[str], list[Child]]:
    """Executors with faults: fa_1 fails every segment, fh_1 hangs, fk_<i> (one process each) get SIGKILLed."""
    hosts = [start_executors("exec-abort", [("fa_1", "drone")], "time_scale:=0.05", "abort_probability:=1.0"),
             start_executors("exec-hang", [("fh_1", "drone")], "time_scale:=0.05", "hang_probability:=1.0")]
    kill_agents = [f"fk_{i}" for i in range(n_kill)]
    kill_hosts = [start_executors(f"exec-kill-{a}", [(a, "drone")], "time_scale:=1.0") for a in kill_agents]
    return hosts, kill_agents, kill_hosts


def plan_properties(n: int, seed: int) -> Row:
    """The plans phase: test/test_plan_properties.py on at least ``n`` random plans in all, spread over the robot
    types (each cut as the server cuts it, run by the robot's interpreter, timed by the estimator), in a process of
    its own; each robot type whose properties fail counts as an unexpected result, with hypothesis's falsifying
    example."""
    repo = Path(__file__).resolve().parent.parent.parent
    types = 3       # drone, arm and the example rover (test_plan_properties.ROBOT_TYPES)
    per_type = -(-n // types)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hypothesis-seed={seed}",
                           "test/test_plan_properties.py"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "TIMELY_PLAN_EXAMPLES": str(per_type)})
    out = proc.stdout + proc.stderr
    last = out.strip().splitlines()[-1] if out.strip() else ""
    passed, failed = (sum(int(m) for m in re.findall(rf"(\d+) {word}", last)) for word in ("passed", "failed"))
    row = Row("plans", goals=per_type * (passed + failed), left_running=0)
    row.codes["robot types ok"] = passed
    if proc.returncode != 0:
        row.unexpected = max(failed, 1)
        for name in re.findall(r"^FAILED (\S+)", out, re.M) or ["pytest did not run: " + out[-300:]]:
            row.unexpected_kinds[name] += 1
        row.unexpected_examples = [("", line.strip()) for line in out.splitlines() if "text=" in line][:5]
    return row
