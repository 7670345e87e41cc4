"""What a configured server holds, as one typed object: configure (configure.py) builds a ServerRuntime, the node
hands it to goal intake, scheduler events and state publishing (their ``attach``), and cleanup closes and drops it.
While the node is unconfigured there is none, and they see ``None``.

Its parts, in the order they are made: the composition root's Stack (engine as loaded, model setup, hardware fit,
policy, scheduler), the goal limits, the step trace, the scheduler thread (made here, started by ``start``), then the
robots' side: the node their ActionClients live on, the segment dispatcher, the robot directory (their
ExecutorStatus), the presence timer and executor discovery. ``close`` undoes them in reverse: nothing calls into a
part after it is closed (the scheduler thread stops before the clients go, the clients before the engine).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from timely_llm_ros.core.fit import HardwareFit
from timely_llm_ros.core.models import ModelSpec
from timely_llm_ros.core.runtime import SchedulerThread
from timely_llm_ros.core.scheduler import PlanScheduler
from timely_llm_ros.core.skills import SkillSet
from timely_llm_ros.core.step_trace import StepTraceWriter
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.core.validation import GoalLimits
from timely_llm_ros.ros.server.client_host import ClientHost
from timely_llm_ros.ros.server.executor_discovery import ExecutorDiscovery
from timely_llm_ros.ros.server.robot_directory import RobotDirectory
from timely_llm_ros.ros.server.segment_dispatcher import SegmentDispatcher


@dataclass(frozen=True)
class RobotSide:
    """The robots' side of a configured server: where their clients live and who talks to them."""

    client_host: ClientHost
    dispatcher: SegmentDispatcher      # ExecuteSegment goals to the robots, their cancels and presence
    directory: RobotDirectory          # each robot's ExecutorStatus (robot type, skills, alive)
    discovery: ExecutorDiscovery       # finding the expected (and first-seen) robots' executors
    presence_timer: Any                # rclpy Timer: executors that left, checked off the scheduler thread


@dataclass(frozen=True)
class ServerRuntime:
    """Everything configure made; frozen: a new configuration is a new ServerRuntime."""

    model_spec: ModelSpec              # the config/models.yaml entry loaded (with the adapter parameter applied)
    grammar: bool                      # requests decode under their grounded grammar (parameter grammar)
    stack: Any                         # timely_llm_ros.stack.Stack: engine, setup, policy, scheduler, fit
    limits: GoalLimits
    loop: SchedulerThread              # the scheduler's thread: every scheduler call goes through it
    trace: StepTraceWriter | None      # one row per engine step (parameter step_trace_csv), or None
    robots: RobotSide

    @property
    def scheduler(self) -> PlanScheduler:
        return self.stack.scheduler

    @property
    def fit(self) -> HardwareFit | None:
        return self.stack.fit

    @property
    def skill_sets(self) -> Mapping[str, SkillSet]:
        return self.stack.setup.skill_sets

    @property
    def urgency_classes(self) -> Mapping[str, TimeUtility]:
        """After the hardware fit's check (scaled where asked)."""
        return self.stack.urgency_classes

    @property
    def dispatcher(self) -> SegmentDispatcher:
        return self.robots.dispatcher

    @property
    def directory(self) -> RobotDirectory:
        return self.robots.directory

    @property
    def discovery(self) -> ExecutorDiscovery:
        return self.robots.discovery

    def start(self) -> int:
        """Start the scheduler thread. The model, the tokenizer and the ROS entities live as long as the
        configuration: they are moved out of the cycle collector's reach first, so that a full collection during
        a burst (one took 253 ms with everything in it, stopping the engine loop) walks only what was made since.
        Returns the number of objects frozen."""
        gc.collect()
        gc.freeze()
        self.loop.start()
        return gc.get_freeze_count()

    def close(self, destroy_timer: Callable[[Any], None], log: Callable[[str], None]) -> None:
        """Stop the scheduler thread, close the step trace, free the robots' clients, then the engine (open goals
        are the caller's to end first, through the running loop)."""
        destroy_timer(self.robots.presence_timer)
        self.loop.stop()
        if self.trace is not None:   # after the loop stopped: nothing writes to it any more
            self.trace.close()
            log(f"step trace in {self.trace.path}: {self.trace.summary()}")
        self.robots.discovery.close()

        def destroy_entities() -> None:
            self.robots.directory.destroy()
            self.robots.dispatcher.destroy()
        self.robots.client_host.close(destroy_entities)
        self.stack.engine.close()
        gc.unfreeze()   # what configure froze may be garbage now; a new configure freezes again
