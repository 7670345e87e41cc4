"""The server's health on /diagnostics (levels from core/health.py) and its log of starving urgency classes.

One DiagnosticStatus, "timely_server: scheduler": ERROR while no engine is loaded, the loaded one's process has died,
or an expected robot's executor is missing; WARN on a drop or failure rate over the window, a starving class, a long
backlog or an urgency class the loaded engine cannot meet (the hardware fit at configure); OK otherwise. Its
key-values are what an operator reads: robots alive, busy and missing, per-class counts over the window, the
scheduler's counters, memory.
"""
from __future__ import annotations

import time
from typing import Sequence

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from std_msgs.msg import Header

from timely_llm_ros.msg import SchedulerState

from timely_llm_ros.core.health import ERROR, OK, WARN, HealthLimits, OutcomeWindow, assess
from timely_llm_ros.core.request import RequestState

NAME = "timely_server: scheduler"
_LEVELS = {OK: DiagnosticStatus.OK, WARN: DiagnosticStatus.WARN, ERROR: DiagnosticStatus.ERROR}


def robots_health(expected: Sequence[str], directory, dispatcher) -> dict[str, list[str]]:
    """{"alive", "busy", "missing"}: tracked robots whose executor is alive (by its status; an expected one that
    publishes no status counts as alive once its ExecuteSegment server answered the handshake), those of them
    running a segment, and expected robots without a live executor."""
    robots = directory.robots() if directory is not None else {}
    alive = sorted(a for a, (_, live) in robots.items() if live)
    busy = sorted(a for a, (status, live) in robots.items() if live and status is not None and status.busy)
    missing = []
    for agent in expected:
        live = robots.get(agent, (None, None))[1]
        if live is False or (live is None and not (dispatcher is not None and dispatcher.ready(agent))):
            missing.append(agent)
        elif live is None:
            alive.append(agent)
    return {"alive": sorted(alive), "busy": busy, "missing": missing}


class ServerHealth:
    """Counts ended requests, logs starvation episodes, publishes /diagnostics (thread-safe)."""

    def __init__(self, node: Node, limits: HealthLimits) -> None:
        self._node = node
        self.window = OutcomeWindow(limits)
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._standing: tuple[list[str], dict[str, str]] = ([], {})

    def set_standing(self, warnings: list[str], values: dict[str, str]) -> None:
        """What configure found that holds while the engine is loaded (the hardware fit's urgency-class check):
        every warning keeps the status at least WARN, the values are shown with the others."""
        self._standing = (list(warnings), dict(values))

    def ended(self, urgency_class: str, state: RequestState) -> None:
        """A goal ended (any thread)."""
        self.window.add(time.monotonic(), urgency_class, state)

    def publish(self, state: SchedulerState, max_batch: int, robots: dict[str, list[str]], extra: dict,
                engine_failure: str | None = None) -> None:
        """The configured server's status (scheduler thread, every state period); logs starvation episodes.
        ``engine_failure``: why the loaded engine can take no more work (Engine.failure), an ERROR."""
        now = time.monotonic()
        self._log_starvation(now)
        counts = self.window.counts(now)
        backlog = state.queued + state.suspended
        health = assess(engine_failure is None, robots["missing"], counts, self.window.starving(counts),
                        self.window.limits, not_loaded_why=engine_failure or "")
        standing, fitted = self._standing
        warnings = standing + ([f"{backlog} generations waiting (max_batch {max_batch})"]
                               if backlog > 4 * max_batch else [])
        if warnings:
            health.reasons += warnings
            health.level = health.level if health.level == ERROR else WARN
            health.message = "; ".join(health.reasons)
        window = f"{self.window.limits.window_s:g} s"
        values = {"robots_alive": len(robots["alive"]), "robots_busy": len(robots["busy"]),
                  "robots_missing": ",".join(robots["missing"]) or "-",
                  **{f"class {cls}": f"{c.ended} ended in the last {window}: {c.done} done, {c.dropped} dropped, "
                                     f"{c.failed} failed" for cls, c in sorted(counts.items())},
                  "policy": state.policy, "queued": state.queued, "running": state.running,
                  "suspended": state.suspended, "executing": state.executing,
                  "last_step_time_s": f"{state.last_step_time:.4f}", "kv_device_bytes": int(state.kv_device_bytes),
                  "kv_host_bytes": int(state.kv_host_bytes), "requests_total": state.requests_total,
                  "requests_done": state.requests_done, "requests_dropped": state.requests_dropped,
                  "requests_failed": state.requests_failed, "engine_steps": state.engine_steps,
                  "interrupted_steps": state.interrupted_steps, "preemptions": state.preemptions, **fitted, **extra}
        self._send(health.level, health.message, state.engine, values)

    def publish_unloaded(self, why: str) -> None:
        """ERROR: no engine is loaded (``why``: unconfigured, or the reason configure failed)."""
        self._send(ERROR, why, "", {"engine_loaded": "false"})

    def _send(self, level: str, message: str, hardware_id: str, values: dict) -> None:
        status = DiagnosticStatus(level=_LEVELS[level], name=NAME, message=message, hardware_id=hardware_id,
                                  values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        self._pub.publish(DiagnosticArray(header=Header(stamp=self._node.get_clock().now().to_msg()),
                                          status=[status]))

    def _log_starvation(self, now: float) -> None:
        """Log once when an urgency class starts starving and once when it stops."""
        started, stopped = self.window.episodes(now)
        counts = self.window.counts(now) if started else {}
        log = self._node.get_logger()
        for cls in started:
            c = counts[cls]
            log.warning(f"urgency class {cls!r} is starving: {c.dropped} of its {c.ended} requests that ended in the "
                        f"last {self.window.limits.window_s:g} s were dropped; let it serve late plans (late: serve "
                        "in the urgency classes file), raise max_batch, or lower the load")
        for cls in stopped:
            log.info(f"urgency class {cls!r} no longer starving")
