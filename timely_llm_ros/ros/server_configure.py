"""The server's configure and cleanup: load the model and its engine, measure the hardware fit, compose policy,
engine and scheduler (ros/server_composition.py), start the scheduler thread and the robots' clients; and undo all
of it. ``node`` is the PlanServerNode, whose attributes hold what configure made."""
from __future__ import annotations

import gc
import time

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from ..core.runtime import SchedulerThread
from ..core.scheduler import SchedulerConfig
from ..core.step_trace import StepTraceWriter
from ..core.validation import GoalLimits
from .client_host import KINDS as CLIENT_HOST_KINDS, ClientHost
from .executor_discovery import ExecutorDiscovery
from .parameters import GRAMMAR_MODES, engine_options
from .robot_directory import RobotDirectory
from .segment_dispatcher import SegmentDispatcher
from .server_composition import compose_policy, compose_scheduler

KEEP_OUTCOMES = 256   # finished outcomes the scheduler keeps (results already went to the clients)


class ConfigureError(Exception):
    """What configure could not do, said so that the user knows what to change."""


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


def configure(node) -> None:
    """Everything configure makes, on ``node``; raises ConfigureError (nothing left loaded) when it cannot."""
    p = node.params
    log = node.get_logger()
    log.info(f"configuring: engine={p.engine} model={p.model_path or p.model} device={p.device}")
    if p.grammar not in GRAMMAR_MODES:
        raise ConfigureError(f"grammar must be one of {', '.join(GRAMMAR_MODES)}, got {p.grammar!r}")
    if p.segment_clients not in CLIENT_HOST_KINDS:
        raise ConfigureError(f"segment_clients must be one of {', '.join(CLIENT_HOST_KINDS)}, got "
                             f"{p.segment_clients!r}")
    node.trace = None
    if p.step_trace_csv:       # before the model loads: a bad path fails at once
        try:
            node.trace = StepTraceWriter(p.step_trace_csv)
        except OSError as exc:
            raise ConfigureError(f"step_trace_csv {p.step_trace_csv!r}: {exc}; give a writable path or leave it "
                                 "empty") from exc
        log.info(f"step trace: one row per engine step in {p.step_trace_csv}")
    t0 = time.monotonic()
    try:
        stack = _load(node)
    except Exception as exc:  # a bad model path, device or file: say so, stay unconfigured
        node.scheduler = node.base_engine = None
        if node.trace is not None:
            node.trace.close()
            node.trace = None
        raise ConfigureError(f"{type(exc).__name__}: {exc}") from exc
    node.limits = GoalLimits(max_task_chars=p.max_task_chars, max_context_chars=p.max_context_chars,
                             max_new_tokens=p.max_new_tokens)
    node.loop = SchedulerThread(node.scheduler, node.events.handle, on_idle=node.state.on_idle,
                                trace=node.state.trace_step if node.trace is not None else None)
    node.loop.post(stack.install)   # as a live policy change installs it (ros/server_composition.py)
    _start_clients(node)
    # The model, the tokenizer and the ROS entities live as long as the configuration: move them out of the
    # cycle collector's reach, so that a full collection during a burst (one took 253 ms with everything in it,
    # stopping the engine loop) walks only what was made since.
    gc.collect()
    gc.freeze()
    node.loop.start()
    log.info(f"configured: policy={p.policy} max_batch={p.max_batch} max_queued={p.max_queued} "
             f"robot types={sorted(node.skill_sets)} urgency classes={sorted(node.urgency_classes)} "
             f"(engine loaded in {time.monotonic() - t0:.1f} s; {gc.get_freeze_count()} long-lived objects "
             "frozen out of the cycle collector)")


def _load(node):
    """Robot types, model, engine, prompt format, hardware fit and the composed scheduler; returns the policy stack
    for the scheduler thread to install."""
    p = node.params
    log = node.get_logger()
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
    from ..core.urgency import load_urgency_classes
    from ..engine.model_setup import model_setup, setup_engine_options
    from ..engine.models import weights_folder
    node.model_spec = ModelSpec.for_path(p.model_path) if p.model_path else model_spec(p.model)
    node.grammar = node.model_spec.grammar if p.grammar == "auto" else p.grammar == "on"
    log.info(f"grammar-constrained decoding {'on' if node.grammar else 'off'} (grammar={p.grammar}, model entry "
             f"{node.model_spec.name!r})")
    dtype = p.dtype if p.dtype not in ("", "auto") else node.model_spec.dtype
    engine = make_engine(p.engine, str(weights_folder(node.model_spec)), device=p.device, dtype=dtype,
                         kv_budget_mb=p.kv_budget_mb if p.kv_budget_mb > 0 else None,
                         num_threads=p.num_threads or None, **engine_options(p),
                         **setup_engine_options(node.model_spec))
    if p.engine_process:
        log.info(f"engine runs in process {engine.pid}")
    # the model's prompt format, and the skill sets with their limits in the model's tokens
    setup = model_setup(node.model_spec, engine, robot_types.skill_sets)
    for line in setup.describe(p.engine):
        log.info(line)
    node.skill_sets = setup.skill_sets
    for prompt in setup.warm_up_prompts():
        warm_up(engine, prompt)
    node.urgency_classes = load_urgency_classes(p.urgency_classes_file or None)
    _fit(node, engine, setup)
    node.base_engine = engine
    stack = compose_policy(engine, p.policy, p.max_batch, node.policy_options())
    config = SchedulerConfig(network_delay_s=p.network_delay_s, max_prompt_tokens=p.max_prompt_tokens,
                             max_waiting=p.max_queued, replan_on_failure=p.replan_on_failure,
                             keep_outcomes=KEEP_OUTCOMES, ack_timeout_s=p.executor_ack_timeout_s,
                             exec_timeout_s=p.executor_timeout_s)
    node.scheduler = compose_scheduler(engine, stack, node.skill_sets, robot_types.exec_models, config,
                                       node.plan_rule, setup.prompts)
    if node.grammar:      # compiled now, not when the first goal of each robot type arrives (~0.3-1 s)
        t_grammar = time.monotonic()
        node.scheduler.prepare_grammars()
        log.info(f"grammars compiled in {time.monotonic() - t_grammar:.2f} s")
    return stack


def _fit(node, engine, setup) -> None:
    """The hardware fit (parameter hardware_fit): this model's step times on this machine, and the urgency classes
    checked (or scaled) against them."""
    p = node.params
    log = node.get_logger()
    node.fit, fit_warnings, fit_values = None, [], {}
    if p.hardware_fit:
        from ..engine.hardware_fit import fit_engine
        node.fit, check = fit_engine(engine, node.skill_sets, setup.prompts, node.urgency_classes,
                                     p.network_delay_s, p.max_batch, p.scale_unmet_classes)
        for line in node.fit.describe():
            log.info(line)
        for line in check.scaled:
            log.warning(f"{line} (scale_unmet_classes={p.scale_unmet_classes:g}; goals with their own "
                        "ert/alpha/beta are not changed)")
        for line in check.warnings:
            log.warning(line)
        if not check.unmet:
            log.info(f"every urgency class can be met on this engine ({', '.join(node.urgency_classes)})")
        node.urgency_classes = check.classes
        fit_warnings, fit_values = check.warnings, check.diagnostic_values(node.fit)
    else:
        log.info("hardware_fit is false: the policies use the configured step-time constants and the urgency "
                 "classes are not checked against this engine")
    node.health.set_standing(fit_warnings, fit_values)


def _start_clients(node) -> None:
    """The robots' side: their ActionClients (on a node of their own by default), their status, discovery."""
    p = node.params
    node.client_host = ClientHost(node, p.segment_clients)
    node.dispatcher = SegmentDispatcher(node.client_host.node, node.loop.post, node.clients_group,
                                        log_timing=p.log_timing)
    node.directory = RobotDirectory(node.client_host.node, on_lost=node.executor_lost,
                                    grace_s=p.executor_ack_timeout_s)
    for agent in p.expected_agents:
        node.directory.track(agent)
    # graph queries for executors that left, off the scheduler thread (they stalled its engine steps there)
    node.presence_timer = node.create_timer(0.5, node.dispatcher.check_presence,
                                            callback_group=MutuallyExclusiveCallbackGroup())
    node.discovery = ExecutorDiscovery(node, node.dispatcher, node.directory, list(p.expected_agents),
                                       p.executor_discovery_timeout_s, lambda: node.closing, node.state.soon)


def release(node, timeout_s: float) -> None:
    """End every open goal as SERVER_SHUTDOWN, stop the scheduler thread, free the robots' clients and the model."""
    node.intake.end_all(node.loop, timeout_s)
    if node.presence_timer is not None:
        node.destroy_timer(node.presence_timer)
        node.presence_timer = None
    if node.loop is not None:
        node.loop.stop()
        node.loop = None
    if node.trace is not None:   # after the loop stopped: nothing writes to it any more
        node.trace.close()
        node.get_logger().info(f"step trace in {node.trace.path}: {node.trace.summary()}")
        node.trace = None
    if node.discovery is not None:
        node.discovery.close()
        node.discovery = None
    dispatcher, host, directory = node.dispatcher, node.client_host, node.directory
    node.dispatcher = node.client_host = node.directory = None

    def destroy_entities() -> None:
        if directory is not None:
            directory.destroy()
        if dispatcher is not None:
            dispatcher.destroy()
    if host is not None:
        host.close(destroy_entities)
    if node.scheduler is not None:
        node.scheduler.engine.close()
        node.scheduler = node.base_engine = None
        gc.unfreeze()   # what configure froze may be garbage now; a new configure freezes again
