"""The server's configure: the robot types, then engine, model setup, hardware fit, policy and scheduler through the
composition root (timely_llm_ros/stack.py build_stack), the scheduler thread and the robots' clients, built into one
ServerRuntime (runtime.py; its ``close`` undoes them). ``node`` is the PlanServerNode: configure reads its
parameters and the callbacks its parts call, and writes none of its fields."""
from __future__ import annotations

import time
from dataclasses import replace

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from timely_llm_ros.core.runtime import SchedulerThread
from timely_llm_ros.core.scheduler import SchedulerConfig
from timely_llm_ros.core.step_trace import StepTraceWriter
from timely_llm_ros.core.validation import GoalLimits
from timely_llm_ros.ros.server.client_host import KINDS as CLIENT_HOST_KINDS, ClientHost
from timely_llm_ros.ros.server.executor_discovery import ExecutorDiscovery
from timely_llm_ros.ros.server.parameters import GRAMMAR_MODES, engine_options
from timely_llm_ros.ros.server.robot_directory import RobotDirectory
from timely_llm_ros.ros.server.runtime import RobotSide, ServerRuntime
from timely_llm_ros.ros.server.segment_dispatcher import SegmentDispatcher

KEEP_OUTCOMES = 256   # finished outcomes the scheduler keeps (results already went to the clients)


class ConfigureError(Exception):
    """What configure could not do, said so that the user knows what to change."""


def configure(node) -> ServerRuntime:
    """Everything configure makes, as a ServerRuntime whose scheduler thread is not started yet (the node attaches
    the runtime to its parts, then starts it); raises ConfigureError (nothing left loaded) when it cannot."""
    p = node.params
    log = node.get_logger()
    engine = p.engine or "(the model entry's)"
    log.info(f"configuring: engine={engine} model={p.model_path or p.model} device={p.device}")
    if p.grammar not in GRAMMAR_MODES:
        raise ConfigureError(f"grammar must be one of {', '.join(GRAMMAR_MODES)}, got {p.grammar!r}")
    if p.segment_clients not in CLIENT_HOST_KINDS:
        raise ConfigureError(f"segment_clients must be one of {', '.join(CLIENT_HOST_KINDS)}, got "
                             f"{p.segment_clients!r}")
    trace = None
    if p.step_trace_csv:       # before the model loads: a bad path fails at once
        try:
            trace = StepTraceWriter(p.step_trace_csv)
        except OSError as exc:
            raise ConfigureError(f"step_trace_csv {p.step_trace_csv!r}: {exc}; give a writable path or leave it "
                                 "empty") from exc
        log.info(f"step trace: one row per engine step in {p.step_trace_csv}")
    t0 = time.monotonic()
    try:
        spec, grammar, stack = _load(node)
    except Exception as exc:  # a bad model path, device or file: say so, stay unconfigured
        if trace is not None:
            trace.close()
        raise ConfigureError(f"{type(exc).__name__}: {exc}") from exc
    limits = GoalLimits(max_task_chars=p.max_task_chars, max_context_chars=p.max_context_chars,
                        max_new_tokens=p.max_new_tokens, max_plan_calls=p.max_plan_calls)
    loop = SchedulerThread(stack.scheduler, node.events.handle, on_idle=node.state.on_idle,
                           trace=node.state.trace_step if trace is not None else None)
    runtime = ServerRuntime(spec, grammar, stack, limits, loop, trace, _robot_side(node, loop))
    log.info(f"configured: policy={p.policy} max_batch={p.max_batch} max_queued={p.max_queued} "
             f"robot types={sorted(runtime.skill_sets)} urgency classes={sorted(runtime.urgency_classes)} "
             f"(engine loaded in {time.monotonic() - t0:.1f} s)")
    return runtime


def _load(node):
    """Robot types, then model, engine, prompt format, warm-up, hardware fit, policy and scheduler in one call to
    the composition root: (model entry, grammar on, Stack)."""
    p = node.params
    log = node.get_logger()
    from timely_llm_ros.core.models import ModelSpec, model_spec
    from timely_llm_ros.core.robot_types import check_profiles, load_robot_types
    from timely_llm_ros.core.urgency import load_urgency_classes
    from timely_llm_ros.stack import EngineChoice, FitChoice, StackOptions, build_stack
    robot_types = load_robot_types(p.skills_dir or None)   # before the model: a bad folder fails at once
    check_profiles(robot_types)
    if robot_types.replaced:
        log.info(f"skills_dir {p.skills_dir}: replaces the package's {', '.join(robot_types.replaced)}")
    spec = ModelSpec.for_path(p.model_path) if p.model_path else model_spec(p.model)
    if p.adapter:
        spec = replace(spec, adapter="" if p.adapter == "none" else p.adapter)
    grammar = spec.grammar if p.grammar == "auto" else p.grammar == "on"
    log.info(f"grammar-constrained decoding {'on' if grammar else 'off'} (grammar={p.grammar}, model entry "
             f"{spec.name!r})")
    stack = build_stack(StackOptions(
        model=spec,
        engine=EngineChoice(p.engine, p.device, p.dtype, kv_budget_mb=p.kv_budget_mb if p.kv_budget_mb > 0 else None,
                            num_threads=p.num_threads or None, own_process=p.engine_process,
                            options=engine_options(p)),
        policy=node.policy_choice(),
        scheduler=SchedulerConfig(network_delay_s=p.network_delay_s, max_prompt_tokens=p.max_prompt_tokens,
                                  max_waiting=p.max_queued, replan_on_failure=p.replan_on_failure,
                                  keep_outcomes=KEEP_OUTCOMES, ack_timeout_s=p.executor_ack_timeout_s,
                                  exec_timeout_s=p.executor_timeout_s, max_plan_calls=p.max_plan_calls),
        fit=FitChoice(p.hardware_fit, p.scale_unmet_classes),
        urgency_classes=load_urgency_classes(p.urgency_classes_file or None),
        model_cache_dir=p.model_cache_dir, progress=log.info),
        robot_types.skill_sets, robot_types.exec_models, time.monotonic, node.plan_rule)
    if p.engine_process:
        log.info(f"engine runs in process {stack.engine.pid}")
    for level, line in stack.report():   # one call site per severity: rclpy refuses to change a site's severity
        if level == "warning":
            log.warning(line)
        else:
            log.info(line)
    stack.scheduler.robot_skills = node.robot_skills
    check = stack.class_check
    node.health.set_standing(check.warnings if check else [], check.diagnostic_values(stack.fit) if check else {})
    if grammar:      # each robot type's grammar with free object slots, compiled now rather than at its first goal
        t_grammar = time.monotonic()
        try:
            stack.scheduler.prepare_grammars()
        except Exception:
            stack.engine.close()
            raise
        log.info(f"grammars compiled in {time.monotonic() - t_grammar:.2f} s")
    return spec, grammar, stack


def _robot_side(node, loop: SchedulerThread) -> RobotSide:
    """The robots' side: their ActionClients (on a node of their own by default), their status, discovery."""
    p = node.params
    host = ClientHost(node, p.segment_clients)
    directory = RobotDirectory(host.node, on_lost=node.executor_lost, grace_s=p.executor_ack_timeout_s)
    dispatcher = SegmentDispatcher(host.node, loop.post, node.clients_group, log_timing=p.log_timing,
                                   alive=directory.alive, live_executors=directory.live_executors)
    for agent in p.expected_agents:
        directory.track(agent)
    # graph queries for executors that left, off the scheduler thread (they stalled its engine steps there)
    presence_timer = node.create_timer(0.5, dispatcher.check_presence, callback_group=MutuallyExclusiveCallbackGroup())
    discovery = ExecutorDiscovery(node, dispatcher, directory, list(p.expected_agents),
                                  p.executor_discovery_timeout_s, lambda: node.closing, node.state.soon)
    return RobotSide(host, dispatcher, directory, discovery, presence_timer)
