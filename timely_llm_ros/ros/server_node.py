"""timely_server: the Plan action server hosting the LLM engine and the segmented scheduler.

A managed (lifecycle) node (docs/server.md):
  configure   load the model and engine, build the scheduler, start its thread
  activate    serve /plan          (autostart:=true does configure + activate at start-up)
  deactivate  new goals end at once with NOT_ACTIVE (42); goals already accepted run to completion
  cleanup     end what is left as SERVER_SHUTDOWN, stop the scheduler thread, free the model
The /plan action server exists in every state, so a goal sent to an unconfigured or inactive server
gets NOT_ACTIVE with a message instead of silence.

ROS plumbing only: goals are validated into core PlanRequests, handed to the scheduler thread, and the
scheduler's events come back as Plan feedback, ExecuteSegment goals to the robots (and their cancels), and Plan
results. Feedback: every state change the scheduler reports ("queued" once it holds the goal, then generating,
suspended, executing) and each new segment, with the progress the event carries. Each accepted goal holds one
executor thread (blocked on an Event, not polling) until its result; at most ``max_queued`` goals are open at once,
a goal beyond that ends at once with OVERLOADED (41).
"""
from __future__ import annotations

import gc
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from timely_llm_ros.action import Plan
from timely_llm_ros.msg import SchedulerState

from ..core.capabilities import check_robot_type, missing_skills, unknown_skill_error
from ..core.errors import ErrorCode, RequestError
from ..core.health import HealthLimits
from ..core.request import RequestState
from ..core.runtime import SchedulerThread
from ..core.scheduler import (PlanScheduler, RequestFinished, SchedulerConfig, SegmentGenerated, SegmentReady,
                              SegmentsWithdrawn, StateChanged)
from ..core.step_trace import StepTraceWriter
from ..core.validation import GoalLimits, validate_goal
from .client_host import KINDS as CLIENT_HOST_KINDS, ClientHost
from .conversions import error_result, goal_fields, outcome_to_result
from .memory_trim import IdleTrimmer, resident_mib
from .parameters import GRAMMAR_MODES, ServerParams, declare_server_params, engine_options
from .plan_session import GoalSession, bare_outcome, goal_request_id, plan_feedback
from .robot_directory import RobotDirectory
from .segment_dispatcher import SegmentDispatcher
from .server_composition import compose_policy, compose_scheduler, policy_options
from .spin import spin_node
from .server_health import ServerHealth, robots_health
from .state_message import scheduler_state_msg

_KEEP_OUTCOMES = 256   # finished outcomes the scheduler keeps (results already went to the clients)
_FINAL = {RequestState.DONE, RequestState.CANCELLED, RequestState.DROPPED, RequestState.FAILED}
# Goal/result/cancel requests of a burst wait in these queues while the executor threads catch up (the
# default depth of 10 drops requests of a burst of goals before the server ever sees them).
_DEEP = QoSProfile(depth=4096, reliability=ReliabilityPolicy.RELIABLE)


class PlanServerNode(LifecycleNode):
    """Serves /plan (timely_llm_ros/action/Plan) for many robots with one engine."""

    def __init__(self, **kwargs) -> None:
        super().__init__("timely_server", **kwargs)
        self.params: ServerParams = declare_server_params(self)
        self.stop_flag = None            # set by spin_node: SIGINT/SIGTERM
        self.exit_code = 0
        self.scheduler: PlanScheduler | None = None
        self.base_engine = None          # the engine configure loaded, before a policy wraps it (server_composition)
        self.model_spec = None           # config/models.yaml entry loaded at configure (core.models.ModelSpec)
        self.grammar = False             # requests decode under their skill-set grammar (parameter grammar)
        self.loop: SchedulerThread | None = None
        self.dispatcher: SegmentDispatcher | None = None
        self.directory: RobotDirectory | None = None   # robots' ExecutorStatus (robot type, skills, alive)
        self._client_host: ClientHost | None = None
        self._clients_group = MutuallyExclusiveCallbackGroup()   # the executors' ActionClients: one callback at a time
        self.skill_sets: dict = {}
        self.urgency_classes: dict = {}
        self.fit = None                  # core.fit.HardwareFit measured at configure (parameter hardware_fit)
        self.limits = GoalLimits()
        self._active = False
        self._closing = False
        self._sessions: dict[str, GoalSession] = {}
        self._sessions_lock = threading.Lock()
        self._early_cancels: set[str] = set()   # cancelled before their execute callback registered a session
        self._counts = {"total": 0, "done": 0, "dropped": 0, "failed": 0, "overloaded": 0}
        self._last_state = 0.0
        self._trimmer = IdleTrimmer(self.params.trim_memory_idle_s)
        self._undiscovered: list[str] = []
        self._handshakes: dict[str, Future] = {}   # expected agent -> its background discovery, while it runs
        self._discovery_timer = None
        self._presence_timer = None
        self._discovery_lock = threading.Lock()
        self._discovery_pool: ThreadPoolExecutor | None = None
        self._trace: StepTraceWriter | None = None
        self._group = ReentrantCallbackGroup()
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._state_pub = self.create_publisher(SchedulerState, "~/state", latched)
        p = self.params
        self.health = ServerHealth(self, HealthLimits(p.health_window_s, p.warn_drop_rate, p.warn_failure_rate,
                                                      p.starvation_drops))
        self._configure_error = ""
        # while no engine is loaded the scheduler thread is not there to publish /diagnostics: ERROR from here (a
        # timer only then: every periodic callback keeps a worker of the node's elastic executor from ending)
        self._unloaded_timer = self.create_timer(p.state_period_s, self._publish_unloaded,
                                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._action = ActionServer(self, Plan, "plan", execute_callback=self._execute,
                                    goal_callback=lambda goal: GoalResponse.ACCEPT,
                                    cancel_callback=self._on_cancel, callback_group=self._group,
                                    goal_service_qos_profile=_DEEP, result_service_qos_profile=_DEEP,
                                    cancel_service_qos_profile=_DEEP, feedback_pub_qos_profile=QoSProfile(depth=1000))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(f"timely_server up (unconfigured): action /plan, autostart={self.params.autostart}")

    # ------------------------------------------------------------------ lifecycle
    def before_spin(self) -> None:
        """Called by spin_node before the node spins: autostart drives configure and activate."""
        if not self.params.autostart:
            self.get_logger().info("autostart is false: waiting for configure/activate (ros2 lifecycle set)")
            return
        for step in (self.trigger_configure, self.trigger_activate):
            if self.stop_flag is not None and self.stop_flag.is_set():
                return
            if step() != TransitionCallbackReturn.SUCCESS:
                self.get_logger().error(f"autostart: {step.__name__} failed; exiting")
                self.exit_code = 1
                if self.stop_flag is not None:
                    self.stop_flag.set()
                return

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        log = self.get_logger()
        self._configure_error = ""
        log.info(f"configuring: engine={p.engine} model={p.model_path or p.model} device={p.device}")
        if p.grammar not in GRAMMAR_MODES:
            log.error(f"configure failed: grammar must be one of {', '.join(GRAMMAR_MODES)}, got {p.grammar!r}")
            return TransitionCallbackReturn.FAILURE
        if p.segment_clients not in CLIENT_HOST_KINDS:
            self._configure_error = (f"configure failed: segment_clients must be one of "
                                     f"{', '.join(CLIENT_HOST_KINDS)}, got {p.segment_clients!r}")
            log.error(self._configure_error)
            return TransitionCallbackReturn.FAILURE
        self._trace = None
        if p.step_trace_csv:       # before the model loads: a bad path fails at once
            try:
                self._trace = StepTraceWriter(p.step_trace_csv)
            except OSError as exc:
                self._configure_error = (f"configure failed: step_trace_csv {p.step_trace_csv!r}: {exc}; give a "
                                         "writable path or leave it empty")
                log.error(self._configure_error)
                return TransitionCallbackReturn.FAILURE
            log.info(f"step trace: one row per engine step in {p.step_trace_csv}")
        t0 = time.monotonic()
        try:
            from ..core.robot_types import check_profiles, load_robot_types
            robot_types = load_robot_types(p.skills_dir or None)   # before the model: a bad folder fails at once
            check_profiles(robot_types)
            if robot_types.replaced:
                log.info(f"skills_dir {p.skills_dir}: replaces the package's {', '.join(robot_types.replaced)}")
            if p.engine_process:          # torch is imported only in the engine's process
                from ..engine.process_engine import ProcessEngine as make_engine
            else:
                from ..engine.factory import make_engine  # torch is imported only here
            from ..core.models import ModelSpec, model_spec
            from ..engine.model_setup import model_setup, setup_engine_options
            from ..engine.models import weights_folder
            self.model_spec = ModelSpec.for_path(p.model_path) if p.model_path else model_spec(p.model)
            self.grammar = self.model_spec.grammar if p.grammar == "auto" else p.grammar == "on"
            log.info(f"grammar-constrained decoding {'on' if self.grammar else 'off'} (grammar={p.grammar}, model "
                     f"entry {self.model_spec.name!r})")
            folder = weights_folder(self.model_spec)
            dtype = p.dtype if p.dtype not in ("", "auto") else self.model_spec.dtype
            engine = make_engine(p.engine, str(folder), device=p.device, dtype=dtype,
                                 kv_budget_mb=p.kv_budget_mb if p.kv_budget_mb > 0 else None,
                                 num_threads=p.num_threads or None, **engine_options(p),
                                 **setup_engine_options(self.model_spec))
            if p.engine_process:
                log.info(f"engine runs in process {engine.pid}")
            from ..core.urgency import load_urgency_classes
            # the model's prompt format, and the skill sets with their limits in the model's tokens
            setup = model_setup(self.model_spec, engine, robot_types.skill_sets)
            for line in setup.describe(p.engine):
                log.info(line)
            self.skill_sets = setup.skill_sets
            for prompt in setup.warm_up_prompts():
                warm_up(engine, prompt)
            self.urgency_classes = load_urgency_classes(p.urgency_classes_file or None)
            self.fit, fit_warnings, fit_values = None, [], {}
            if p.hardware_fit:    # the step times of this model on this machine, and the classes checked against them
                from ..engine.hardware_fit import fit_engine
                self.fit, check = fit_engine(engine, self.skill_sets, setup.prompts, self.urgency_classes,
                                             p.network_delay_s, p.max_batch, p.scale_unmet_classes)
                for line in self.fit.describe():
                    log.info(line)
                for line in check.scaled:
                    log.warning(f"{line} (scale_unmet_classes={p.scale_unmet_classes:g}; goals with their own "
                                "ert/alpha/beta are not changed)")
                for line in check.warnings:
                    log.warning(line)
                if not check.unmet:
                    log.info(f"every urgency class can be met on this engine ({', '.join(self.urgency_classes)})")
                self.urgency_classes = check.classes
                fit_warnings, fit_values = check.warnings, check.diagnostic_values(self.fit)
            else:
                log.info("hardware_fit is false: the policies use the configured step-time constants and the urgency "
                         "classes are not checked against this engine")
            self.health.set_standing(fit_warnings, fit_values)
            self.base_engine = engine
            stack = compose_policy(engine, p.policy, p.max_batch, self.policy_options())
            self.scheduler = compose_scheduler(engine, stack, self.skill_sets, robot_types.exec_models,
                                               SchedulerConfig(network_delay_s=p.network_delay_s,
                                                               max_prompt_tokens=p.max_prompt_tokens,
                                                               max_waiting=p.max_queued,
                                                               replan_on_failure=p.replan_on_failure,
                                                               keep_outcomes=_KEEP_OUTCOMES,
                                                               ack_timeout_s=p.executor_ack_timeout_s,
                                                               exec_timeout_s=p.executor_timeout_s),
                                               self.plan_rule, setup.prompts)
            if self.grammar:      # compiled now, not when the first goal of each robot type arrives (~0.3-1 s)
                t_grammar = time.monotonic()
                self.scheduler.prepare_grammars()
                log.info(f"grammars compiled in {time.monotonic() - t_grammar:.2f} s")
        except Exception as exc:  # a bad model path, device or file: say so, stay unconfigured
            self._configure_error = f"configure failed: {type(exc).__name__}: {exc}"
            log.error(self._configure_error)
            self.scheduler = self.base_engine = None
            if self._trace is not None:
                self._trace.close()
                self._trace = None
            return TransitionCallbackReturn.FAILURE
        self.limits = GoalLimits(max_task_chars=p.max_task_chars, max_context_chars=p.max_context_chars,
                                 max_new_tokens=p.max_new_tokens)
        self.loop = SchedulerThread(self.scheduler, self._on_events, on_idle=self._on_idle,
                                    trace=self._trace_step if self._trace is not None else None)
        self.loop.post(stack.install)   # as a live policy change installs it (ros/server_composition.py)
        self._client_host = ClientHost(self, p.segment_clients)
        self.dispatcher = SegmentDispatcher(self._client_host.node, self.loop.post, self._clients_group,
                                            log_timing=p.log_timing)
        self.directory = RobotDirectory(self._client_host.node, on_lost=self._executor_lost,
                                        grace_s=p.executor_ack_timeout_s)
        for agent in p.expected_agents:
            self.directory.track(agent)
        # graph queries for executors that left, off the scheduler thread (they stalled its engine steps there)
        self._presence_timer = self.create_timer(0.5, self.dispatcher.check_presence,
                                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._discovery_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="discovery")
        self._undiscovered = list(p.expected_agents)
        self._handshakes = {}
        for agent in self._undiscovered:  # start discovering their executors now, not on the first goal
            self.dispatcher.client(agent)
        if self._undiscovered:
            self._discovery_timer = self.create_timer(0.2, self._report_discovery,
                                                      callback_group=MutuallyExclusiveCallbackGroup())
            log.info(f"discovering {len(self._undiscovered)} expected executors in the background (a goal to one "
                     "not yet discovered waits for it)")
        # The model, the tokenizer and the ROS entities live as long as the configuration: move them out of the
        # cycle collector's reach, so that a full collection during a burst (one took 253 ms with everything in it,
        # stopping the engine loop) walks only what was made since.
        gc.collect()
        gc.freeze()
        self.loop.start()
        self._unloaded_timer.cancel()   # the scheduler thread publishes /diagnostics now
        log.info(f"configured: policy={p.policy} max_batch={p.max_batch} max_queued={p.max_queued} "
                 f"robot types={sorted(self.skill_sets)} urgency classes={sorted(self.urgency_classes)} "
                 f"(engine loaded in {time.monotonic() - t0:.1f} s; {gc.get_freeze_count()} long-lived objects "
                 "frozen out of the cycle collector)")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        self.get_logger().info(f"timely_server ready: action /plan, policy={self.params.policy}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self.get_logger().info(f"deactivated: new goals get NOT_ACTIVE; {len(self._sessions)} accepted goal(s) "
                               "run to completion")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_engine(timeout_s=10.0)
        self.get_logger().info("cleaned up: model freed")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self._release_engine(timeout_s=10.0)
        return TransitionCallbackReturn.SUCCESS

    def _release_engine(self, timeout_s: float) -> None:
        """End every open goal as SERVER_SHUTDOWN, stop the scheduler thread, free the model."""
        self._end_all_goals(timeout_s)
        for timer in (self._discovery_timer, self._presence_timer):
            if timer is not None:
                self.destroy_timer(timer)
        self._discovery_timer = self._presence_timer = None
        if self.loop is not None:
            self.loop.stop()
            self.loop = None
        if self._trace is not None:   # after the loop stopped: nothing writes to it any more
            self._trace.close()
            self.get_logger().info(f"step trace in {self._trace.path}: {self._trace.summary()}")
            self._trace = None
        if self._discovery_pool is not None:
            self._discovery_pool.shutdown(wait=True, cancel_futures=True)
            self._discovery_pool = None
        dispatcher, host, directory = self.dispatcher, self._client_host, self.directory
        self.dispatcher = self._client_host = self.directory = None

        def destroy_entities() -> None:
            if directory is not None:
                directory.destroy()
            if dispatcher is not None:
                dispatcher.destroy()
        if host is not None:
            host.close(destroy_entities)
        if self.scheduler is not None:
            self.scheduler.engine.close()
            self.scheduler = self.base_engine = None
            gc.unfreeze()   # what configure froze may be garbage now; a new configure freezes again
        self._unloaded_timer.reset()

    def _end_all_goals(self, timeout_s: float) -> None:
        """Finish every accepted goal with SERVER_SHUTDOWN (through the scheduler when it holds the request,
        so its engine state and executor goals are released) and wait until their callbacks returned."""
        with self._sessions_lock:
            sessions = list(self._sessions.values())
        if not sessions:
            return
        msg = "server shutting down (or cleaning up); send the goal again when it is active"
        for s in sessions:
            if s.submitted and self.loop is not None:
                self.loop.post(lambda sch, r=s.req_id: sch.cancel(r, ErrorCode.SERVER_SHUTDOWN, msg))
            else:
                s.end(bare_outcome(s, ErrorCode.SERVER_SHUTDOWN, msg))
        deadline = time.monotonic() + timeout_s
        while self._sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._sessions_lock:
            left = list(self._sessions.values())
        for s in left:  # the scheduler thread did not answer in time: end them here
            s.end(bare_outcome(s, ErrorCode.SERVER_SHUTDOWN, msg))
        while self._sessions and time.monotonic() < deadline + 2.0:
            time.sleep(0.02)

    def finish(self, timeout_s: float) -> None:
        """Process stop (spin_node, executor still spinning): no new goals, end accepted ones as
        SERVER_SHUTDOWN and give their results time to reach the clients."""
        self._closing = True
        self._active = False
        had_goals = bool(self._sessions)
        self._release_engine(timeout_s)
        if had_goals:
            time.sleep(0.3)  # result responses go out on the executor threads

    def shutdown(self) -> None:
        """Free ROS entities that destroy_node does not destroy (after the executor stopped)."""
        self._action.destroy()

    def policy_options(self) -> dict:
        """Options every policy gets (those a policy does not use are ignored): segment sizes from the skill
        sets, the hardware fit's step times (parameter hardware_fit), the network delay, and G measured online."""
        fitted = self.fit.policy_options() if self.fit is not None else {}
        return policy_options(self.skill_sets, fitted, self.params.network_delay_s)

    def _report_discovery(self) -> None:
        """Shake hands with each expected robot's executor once it is matched (in the background, on the discovery
        pool), and log it once it is ready for goals: its first goal then goes straight to the scheduler."""
        dispatcher, pool = self.dispatcher, self._discovery_pool
        if dispatcher is None:
            return
        # A lock and a set difference, not list.remove: a second run of this callback (a re-configure's
        # timer, or any executor that dispatches it concurrently) must not remove an agent twice (a
        # ValueError that used to end the spin at start-up with ~60 expected agents).
        with self._discovery_lock:
            pending = list(self._undiscovered)
            if not pending:
                return
            found = [agent for agent in pending if dispatcher.ready(agent)]
            for agent in pending:
                running = self._handshakes.get(agent)
                if agent in found or (running is not None and not running.done()) or pool is None:
                    continue
                if dispatcher.client(agent).server_is_ready():
                    try:
                        self._handshakes[agent] = pool.submit(dispatcher.discover, agent,
                                                              self.params.executor_discovery_timeout_s,
                                                              lambda: self._closing)
                    except RuntimeError:   # the pool was shut down meanwhile (cleanup)
                        return
            self._undiscovered = [agent for agent in pending if agent not in set(found)]
            for agent in found:
                self._handshakes.pop(agent, None)
            done = not self._undiscovered
        if found:
            self._last_state = 0.0   # the state topic tells clients (fleet_workload waits for it) at once
        for agent in found:
            self.get_logger().info(f"executor discovered: {agent}/execute_segment")
        if done:
            timer = self._discovery_timer
            if timer is not None:
                timer.cancel()
            self.get_logger().info("all expected executors discovered")

    # ------------------------------------------------------------------ action callbacks
    def _on_cancel(self, goal_handle) -> CancelResponse:
        req_id = goal_request_id(goal_handle)
        with self._sessions_lock:
            session = self._sessions.get(req_id)
            if session is None:   # accepted, its execute callback not started yet: it ends CANCELLED when it does
                self._early_cancels.add(req_id)
                return CancelResponse.ACCEPT
        if session.submitted and self.loop is not None:   # its segments at the robot are withdrawn with it
            self.loop.post(lambda s: s.cancel(req_id))
        else:
            session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle) -> Plan.Result:
        try:   # an early cancel is remembered until its goal has ended (registration reads it)
            return self._execute_goal(goal_handle)
        finally:
            with self._sessions_lock:
                self._early_cancels.discard(goal_request_id(goal_handle))

    def _execute_goal(self, goal_handle) -> Plan.Result:
        arrival = time.monotonic()
        req_id = goal_request_id(goal_handle)
        goal: Plan.Goal = goal_handle.request
        log = self.get_logger()
        if not self._active or self.loop is None:
            state = "shutting down" if self._closing else self._state_machine.current_state[1]
            code = ErrorCode.SERVER_SHUTDOWN if self._closing else ErrorCode.NOT_ACTIVE
            return self._abort(goal_handle, req_id, code,
                               f"the plan server is {state}, not active; activate it (ros2 lifecycle set "
                               f"{self.get_fully_qualified_name()} activate) or wait for autostart")
        try:
            req = validate_goal(goal_fields(goal), req_id, arrival, self.skill_sets, self.urgency_classes, self.limits,
                                grammar=self.grammar)
        except RequestError as err:
            log.warning(f"[{req_id}] rejected goal from {goal.agent_id!r}: {err.code.name}: {err.message}")
            return self._abort(goal_handle, req_id, err.code, err.message)
        req.dry_run = bool(goal.dry_run)
        session = GoalSession(req_id, req.agent_id, req.dry_run, goal_handle)
        with self._sessions_lock:
            full = len(self._sessions) >= self.params.max_queued
            if full:
                self._counts["overloaded"] += 1
            else:
                self._sessions[req_id] = session
                self._counts["total"] += 1
                if req_id in self._early_cancels:   # the client cancelled before this callback ran (see _execute)
                    session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        if full:
            return self._abort(goal_handle, req_id, ErrorCode.OVERLOADED,
                               f"the server already holds max_queued={self.params.max_queued} goals; retry later "
                               "(or raise max_queued)")
        try:
            return self._serve(goal_handle, session, req)
        finally:
            self._drop_session(req_id)

    def _serve(self, goal_handle, session: GoalSession, req) -> Plan.Result:
        log = self.get_logger()
        if not session.dry_run and not self._discover(session):
            if session.outcome is None:
                msg = (f"no executor at /{req.agent_id}/execute_segment (waited "
                       f"{self.params.executor_discovery_timeout_s:.1f} s); start the robot's executor node or "
                       "set dry_run")
                log.warning(f"[{session.req_id}] {msg}")
                session.end(bare_outcome(session, ErrorCode.EXECUTOR_UNAVAILABLE, msg))
        if session.outcome is None and not session.dry_run:
            self._check_robot(session, req)
        loop = self.loop
        if session.outcome is None and loop is not None:
            session.submitted = True
            loop.post(lambda s: self._submit(s, req, session))
            loop.announce(req)      # an engine step in flight may end early for it (policy parameter interrupt)
            log.info(f"[{session.req_id}] {req.agent_id} ({req.robot_type}, {req.urgency or 'custom TUF'}): "
                     f"{req.task!r}")
        elif session.outcome is None:
            session.end(bare_outcome(session, ErrorCode.SERVER_SHUTDOWN, "server shutting down"))
        session.done.wait()
        outcome = session.outcome
        self.health.ended(req.urgency, outcome.state)
        self._log_outcome(session, outcome)
        result = outcome_to_result(session.req_id, outcome)
        if outcome.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.ok:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _discover(self, session: GoalSession) -> bool:
        """True once the agent's executor is discoverable (known agents at once); no ActionClient is made for
        an agent whose executor never shows up in the ROS graph."""
        dispatcher, directory = self.dispatcher, self.directory
        if dispatcher is None or directory is None:
            return False
        if dispatcher.ready(session.agent_id) and directory.alive(session.agent_id) is not False:
            return True
        self.get_logger().info(f"[{session.req_id}] waiting for /{session.agent_id}/execute_segment to answer "
                               "(a first goal to a robot not in expected_agents, or its executor restarted)")
        pool = self._discovery_pool
        if pool is None:
            return False
        try:
            fut = pool.submit(dispatcher.discover, session.agent_id, self.params.executor_discovery_timeout_s,
                              session.done.is_set)
        except RuntimeError:  # pool shut down meanwhile
            return False
        try:
            return bool(fut.result())
        except Exception:
            return False

    def _check_robot(self, session: GoalSession, req) -> None:
        """End the goal WRONG_ROBOT_TYPE, before anything is generated, when its agent's executor serves another
        robot type (its status: waited for while the executor publishes one, see RobotDirectory.wait_status)."""
        directory = self.directory
        if directory is None:
            return
        status = directory.wait_status(req.agent_id, self.params.executor_discovery_timeout_s, session.done.is_set)
        try:
            check_robot_type(req.agent_id, req.robot_type, status)
        except RequestError as err:
            self.get_logger().warning(f"[{session.req_id}] {err.code.name}: {err.message}")
            session.end(bare_outcome(session, err.code, err.message))

    def _executor_lost(self, agent: str) -> None:
        """The robot directory saw the agent's executor go (its status lost liveliness): end its segments out."""
        last = self.directory.status(agent) if self.directory is not None else None
        if last is not None and last.state == "stopping":
            self.get_logger().info(f"executor /{agent}/execute_segment has shut down")
        else:
            self.get_logger().warning(f"executor /{agent}/execute_segment lost its liveliness and it did not come "
                                      "back (killed, or its process hung); segments it held end EXECUTOR_UNAVAILABLE")
        dispatcher = self.dispatcher
        if dispatcher is not None:
            dispatcher.executor_lost(agent, f"lost its liveliness (its executor_status lease ran out and did not "
                                            f"come back within executor_ack_timeout_s, "
                                            f"{self.params.executor_ack_timeout_s:.1f} s: the process died or hung)")

    @staticmethod
    def _abort(goal_handle, req_id: str, code: ErrorCode, message: str) -> Plan.Result:
        goal_handle.abort()
        return error_result(req_id, code, message)

    # ------------------------------------------------------------------ scheduler thread side
    def _submit(self, scheduler: PlanScheduler, req, session: GoalSession) -> None:
        if session.outcome is None and session.goal_handle.is_cancel_requested:   # cancelled meanwhile
            session.end(bare_outcome(session, ErrorCode.CANCELLED, "cancelled by the client"))
        if session.outcome is not None:  # cancelled or shut down before it reached the scheduler
            return
        try:
            events = scheduler.submit(req)
        except RequestError as err:
            self.get_logger().warning(f"[{req.req_id}] not accepted: {err.code.name}: {err.message}")
            session.end(bare_outcome(session, err.code, err.message))
            return
        self._on_events(events)

    def plan_rule(self, agent: str) -> str:
        """The robot's rule for a second plan while one runs (queue | urgent_preempts), as its executor advertises
        it (ExecutorStatus; queue until it has)."""
        directory = self.directory
        return directory.plan_rule(agent) if directory is not None else "queue"

    def _on_events(self, events) -> None:
        """Runs on the scheduler thread for every event the scheduler produces."""
        for ev in events:
            session = self._sessions.get(ev.req_id)
            if session is None:
                continue
            if isinstance(ev, SegmentReady):
                if session.outcome is not None or self._refuse_unknown_skills(session, ev):
                    continue
                if self.params.log_timing:
                    self.get_logger().info(f"segment timing {ev.req_id} {ev.segment.index} published "
                                           f"{time.monotonic():.6f}")
                if self.dispatcher is not None:
                    self.dispatcher.send(ev.req_id, session.agent_id, ev.segment, ev.preempts)
            elif isinstance(ev, SegmentGenerated):
                self._publish(session, plan_feedback(ev.req_id, ev.progress, ev.segment))
            elif isinstance(ev, SegmentsWithdrawn):
                if self.dispatcher is not None:
                    self.dispatcher.withdraw(ev.req_id, ev.indices)
                    if ev.reason == ErrorCode.EXECUTOR_UNAVAILABLE:   # it did not answer: shake hands again
                        self.dispatcher.forget_handshake(session.agent_id)
            elif isinstance(ev, StateChanged) and ev.state not in _FINAL:
                self._publish(session, plan_feedback(ev.req_id, ev.progress))
            elif isinstance(ev, RequestFinished):
                outcome = ev.outcome
                stopping = self._closing or (self.stop_flag is not None and self.stop_flag.is_set())
                if stopping and outcome.error_code in (ErrorCode.EXECUTION_FAILED, ErrorCode.EXECUTOR_UNAVAILABLE):
                    # SIGINT reaches the robots' executors too (one process group): their segments end "executor
                    # shutting down" while the server itself is going down, which is SERVER_SHUTDOWN for the client
                    outcome = replace(outcome, error_code=ErrorCode.SERVER_SHUTDOWN,
                                      message=f"server shutting down ({outcome.message})")
                with self._sessions_lock:
                    key = {RequestState.DONE: "done", RequestState.DROPPED: "dropped"}.get(outcome.state, "failed")
                    self._counts[key] += 1
                session.end(outcome)

    def _refuse_unknown_skills(self, session: GoalSession, ev: SegmentReady) -> bool:
        """Scheduler thread: end the request UNKNOWN_SKILL if the segment calls a skill its robot's executor lacks
        (by the executor's status; nothing is sent). True when it did."""
        directory = self.directory
        if session.dry_run or directory is None:
            return False
        status = directory.status(session.agent_id)
        missing = missing_skills(ev.segment.skills, status)
        if not missing:
            return False
        err = unknown_skill_error(session.agent_id, ev.segment.index, missing, status)
        self._on_events(self.scheduler.cancel(ev.req_id, err.code, err.message))
        return True

    @staticmethod
    def _publish(session: GoalSession, feedback: Plan.Feedback) -> None:
        try:
            if session.goal_handle.is_active:
                session.goal_handle.publish_feedback(feedback)
        except Exception:  # the goal ended meanwhile; feedback is best effort
            pass

    def _on_idle(self) -> None:
        """Each scheduler-loop iteration: the latched state topic, and giving freed heap back to the OS once the work
        has ended."""
        if self.scheduler is not None:
            self._trimmer.tick(self.scheduler.busy() or bool(self._sessions))
        now = time.monotonic()
        if now - self._last_state >= self.params.state_period_s and self.scheduler is not None:
            self._last_state = now
            with self._sessions_lock:
                counts = dict(self._counts)
            with self._discovery_lock:
                pending = list(self._undiscovered)
            waiting = set(pending)
            ready = [a for a in self.params.expected_agents if a not in waiting]
            state = scheduler_state_msg(self, self.scheduler, counts, ready, pending)
            self._state_pub.publish(state)
            memory = {"rss_mib": f"{resident_mib():.1f}", "heap_trims": self._trimmer.trims,
                      "python_threads": threading.active_count()}
            robots = robots_health(self.params.expected_agents, self.directory, self.dispatcher)
            self.health.publish(state, self.scheduler.policy.max_batch, robots, memory)

    def _publish_unloaded(self) -> None:
        """/diagnostics ERROR while no engine is loaded (unconfigured, or configure failed)."""
        if self.loop is None:
            why = self._configure_error or (f"unconfigured: no engine loaded; configure it (ros2 lifecycle set "
                                            f"{self.get_fully_qualified_name()} configure) or wait for autostart")
            self.health.publish_unloaded(why)

    def _trace_step(self, record) -> None:
        """Scheduler thread: one engine step into the step trace, named by the policy that chose it."""
        trace = self._trace
        if trace is not None:
            trace.write(replace(record, policy=self.params.policy))

    # ------------------------------------------------------------------ misc
    def _drop_session(self, req_id: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(req_id, None)

    def _log_outcome(self, session: GoalSession, outcome) -> None:
        log = self.get_logger()
        if outcome.ok:
            log.info(f"[{session.req_id}] {session.agent_id} done: {len(outcome.segments)} segments, "
                     f"response {outcome.response_time:.2f} s, waiting {outcome.waiting_time:.2f} s, "
                     f"utility {outcome.utility:.2f} (segments {outcome.total_utility:.2f})")
        else:
            log.warning(f"[{session.req_id}] {session.agent_id} ended {outcome.state.value}: "
                        f"{outcome.error_code.name}: {outcome.message}")

    def _on_set_parameters(self, params):
        from .parameters import check_runtime_update
        return check_runtime_update(self, params)


def warm_up(engine, prompt_ids: list[int], tokens: int = 4) -> None:
    """Run one short generation so the first robot's request does not pay one-time start-up costs (and, with a
    prefix cache, finds its robot type's system prompt cached)."""
    engine.add("__warm_up__", prompt_ids, tokens)
    try:
        for _ in range(tokens):
            if engine.step(["__warm_up__"]).finished:
                break
    finally:
        engine.release("__warm_up__")


def main(args: list[str] | None = None) -> int:
    # every open Plan goal holds an executor thread (blocked, not polling); goals beyond max_queued are
    # answered at once with OVERLOADED, which needs a few threads more; idle threads end after worker_idle_exit_s
    code = spin_node(PlanServerNode, lambda node: node.params.max_queued + 16, args,
                     exit_code=lambda node: node.exit_code, idle_exit_s=lambda node: node.params.worker_idle_exit_s)
    return code


if __name__ == "__main__":
    sys.exit(main())
