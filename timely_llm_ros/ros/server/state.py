"""What the server reports about itself: the latched ~/state topic and /diagnostics (from the scheduler thread, every
state_period_s), /diagnostics ERROR while no engine is loaded, and the step trace's rows; and, once a burst of
goals is over, the C heap's free pages given back to the system (memory_trim_idle_s)."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

from rclpy.qos import DurabilityPolicy, QoSProfile

from timely_llm_ros.msg import SchedulerState

from timely_llm_ros.ros.entity_count import ros_entities
from timely_llm_ros.ros.process_memory import QuietTrim, python_heap_mib, resident_mib, thread_count
from timely_llm_ros.ros.server.health import robots_health
from timely_llm_ros.ros.server.runtime import ServerRuntime
from timely_llm_ros.ros.server.state_message import scheduler_state_msg


class ServerState:
    """Publishes the server node's state (``node``: PlanServerNode, read for its parameters, health and goal
    counts); what it reports on comes with the runtime (``attach``)."""

    def __init__(self, node) -> None:
        self._node = node
        self._runtime: ServerRuntime | None = None
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._pub = node.create_publisher(SchedulerState, "~/state", latched)
        self._last = 0.0
        self._trim = QuietTrim(node.params.memory_trim_idle_s)

    def attach(self, runtime: ServerRuntime | None) -> None:
        """The configured server's runtime (None: unconfigured: /diagnostics says ERROR, publish_unloaded)."""
        self._runtime = runtime

    def soon(self) -> None:
        """Publish at the next scheduler-loop iteration (an expected executor became ready: clients wait for it)."""
        self._last = 0.0

    def on_idle(self) -> None:
        """Each scheduler-loop iteration: the latched state topic and /diagnostics, every state_period_s."""
        node, runtime = self._node, self._runtime
        now = time.monotonic()
        if runtime is not None:
            self._trim_when_quiet(runtime, now)
        if runtime is None or now - self._last < node.params.state_period_s:
            return
        self._last = now
        scheduler = runtime.scheduler
        pending = runtime.discovery.pending()
        waiting = set(pending)
        ready = [a for a in node.params.expected_agents if a not in waiting]
        state = scheduler_state_msg(node, scheduler, node.intake.snapshot_counts(), ready, pending)
        self._pub.publish(state)
        robots = robots_health(node.params.expected_agents, runtime.directory, runtime.dispatcher)
        node.health.publish(state, scheduler.policy.max_batch, robots, self.memory(runtime),
                            engine_failure=runtime.stack.engine.failure())

    def _trim_when_quiet(self, runtime: ServerRuntime, now: float) -> None:
        """A burst of goals is over (memory_trim_idle_s): the heap's free pages back to the system."""
        node = self._node
        freed = self._trim.poll(node.intake.received, not node.intake.open_goals() and not runtime.scheduler.busy(),
                                now)
        if freed is not None:
            node.get_logger().debug(f"no goal for {self._trim.quiet_s:g} s: heap trimmed, {freed:.1f} MiB of "
                                    "resident memory given back")

    def memory(self, runtime: ServerRuntime | None) -> dict[str, str | int]:
        """What /diagnostics shows of the process: resident memory, threads (Python's, and all the kernel counts),
        the ROS entities of the server's nodes, and the Python heap while trace_python_heap traces it."""
        node = self._node
        host = runtime.robots.client_host if runtime is not None else None
        nodes = [node] if host is None or host.node is node else [node, host.node]
        values: dict[str, str | int] = {"rss_mib": f"{resident_mib():.1f}", "python_threads": threading.active_count(),
                                        "threads": thread_count(), "ros_entities": ros_entities(nodes)}
        heap = python_heap_mib()
        if heap == heap:   # tracing
            values["python_heap_mib"] = f"{heap:.2f}"
        return values

    def publish_unloaded(self) -> None:
        """/diagnostics ERROR while no engine is loaded (unconfigured, or configure failed)."""
        node = self._node
        if self._runtime is None:
            why = node.configure_error or (f"unconfigured: no engine loaded; configure it (ros2 lifecycle set "
                                           f"{node.get_fully_qualified_name()} configure) or wait for autostart")
            node.health.publish_unloaded(why)

    def trace_step(self, record) -> None:
        """Scheduler thread: one engine step into the step trace, named by the policy that chose it."""
        runtime = self._runtime
        trace = runtime.trace if runtime is not None else None
        if trace is not None:
            trace.write(replace(record, policy=self._node.params.policy))
