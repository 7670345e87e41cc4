"""timely_server: the Plan action server hosting the LLM engine and the segmented scheduler.

A managed (lifecycle) node (docs/server.md):
  configure   load the model and engine, build the scheduler, start its thread
  activate    serve /plan          (autostart:=true does configure + activate at start-up)
  deactivate  new goals end at once with NOT_ACTIVE (42); goals already accepted run to completion
  cleanup     end what is left as SERVER_SHUTDOWN, stop the scheduler thread, free the model
The /plan action server exists in every state, so a goal sent to an unconfigured or inactive server
gets NOT_ACTIVE with a message instead of silence.

ROS plumbing only; each job has its module: configure (configure.py, composing through the composition root,
timely_llm_ros/stack.py) builds one ServerRuntime (runtime.py) that the node hands to goal intake, the scheduler's
events and state publishing, and that cleanup closes and drops; goal intake and answering (goal_intake.py), the
scheduler's events to ROS (scheduler_events.py), the state topic and /diagnostics (state.py, health.py), finding
the robots' executors (executor_discovery.py). Goals hold no thread: a goal's execution starts only once it has
ended (goal_intake.py), so the node spins on one thread (an rclpy SingleThreadedExecutor).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc

from rclpy.action import ActionServer, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile, ReliabilityPolicy

from timely_llm_ros.action import Plan

from timely_llm_ros.core.composition import PolicyChoice
from timely_llm_ros.core.health import HealthLimits
from timely_llm_ros.ros.server.configure import ConfigureError, configure
from timely_llm_ros.ros.server.goal_intake import GoalIntake
from timely_llm_ros.ros.server.parameters import ServerParams, check_runtime_update, declare_server_params
from timely_llm_ros.ros.server.runtime import ServerRuntime
from timely_llm_ros.ros.server.scheduler_events import SchedulerEvents
from timely_llm_ros.ros.server.health import ServerHealth
from timely_llm_ros.ros.server.state import ServerState
from timely_llm_ros.ros.spin import spin_node

# Goal/result/cancel requests of a burst wait in these queues while the executor catches up (the default depth of
# 10 drops requests of a burst of goals before the server ever sees them).
_DEEP = QoSProfile(depth=4096, reliability=ReliabilityPolicy.RELIABLE)


class PlanServerNode(LifecycleNode):
    """Serves /plan (timely_llm_ros/action/Plan) for many robots with one engine."""

    action_server: ActionServer | None = None     # None until __init__ makes it (a bad parameter stops it first)
    _freed = False                                # shutdown() destroyed the action server

    def __init__(self, **kwargs) -> None:
        super().__init__("timely_server", **kwargs)
        self.params: ServerParams = declare_server_params(self)
        if self.params.trace_python_heap and not tracemalloc.is_tracing():
            tracemalloc.start()          # before the model loads: the heap it reports is all the server holds
        self.stop_flag = None            # set by spin_node: SIGINT/SIGTERM
        self.exit_code = 0
        self.active = False
        self.closing = False
        self.configure_error = ""
        self.runtime: ServerRuntime | None = None   # made at configure (configure.py), dropped at cleanup
        self.clients_group = MutuallyExclusiveCallbackGroup()   # the executors' ActionClients: one callback at a time
        p = self.params
        self.health = ServerHealth(self, HealthLimits(p.health_window_s, p.warn_drop_rate, p.warn_failure_rate,
                                                      p.starvation_drops))
        self.state = ServerState(self)
        self.intake = GoalIntake(self)
        self.events = SchedulerEvents(self, self.intake)
        # while no engine is loaded the scheduler thread is not there to publish /diagnostics: ERROR from here
        self._unloaded_timer = self.create_timer(p.state_period_s, self.state.publish_unloaded)
        self._namesakes = 0              # other action servers of /plan seen by the last check
        self._namesake_timer = self.create_timer(2.0, self._watch_namesakes,
                                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.action_server = ActionServer(self, Plan, "plan", execute_callback=self.intake.answer,
                                    goal_callback=lambda goal: GoalResponse.ACCEPT,
                                    handle_accepted_callback=self.intake.on_accepted,
                                    cancel_callback=self.intake.on_cancel,
                                    goal_service_qos_profile=_DEEP, result_service_qos_profile=_DEEP,
                                    cancel_service_qos_profile=_DEEP, feedback_pub_qos_profile=QoSProfile(depth=1000),
                                    result_timeout=p.result_keep_s)
        self.add_on_set_parameters_callback(lambda params: check_runtime_update(self.params, self.runtime, params,
                                                                                self.get_logger().info))
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
        self.configure_error = ""
        try:
            runtime = configure(self)
        except ConfigureError as exc:
            if self.stopping():   # the process is going down under the model load: that, not the load, failed
                self.configure_error = f"configure stopped: the process is shutting down ({exc})"
                self.get_logger().warning(self.configure_error)
            else:
                self.configure_error = f"configure failed: {exc}"
                self.get_logger().error(self.configure_error)
            return TransitionCallbackReturn.FAILURE
        if self.stopping():   # the process was stopped while the model loaded: free it, do not start serving
            try:
                runtime.close(self.destroy_timer, self.get_logger().info)
            except Exception:      # the node may be half destroyed by now: what is left goes with the process
                pass
            self.get_logger().warning("configure stopped: the process is shutting down (the model was loaded "
                                      "and is freed again)")
            return TransitionCallbackReturn.FAILURE
        self.runtime = runtime
        for part in (self.intake, self.events, self.state):
            part.attach(runtime)
        frozen = runtime.start()
        self.get_logger().info(f"scheduler thread started ({frozen} long-lived objects frozen out of the cycle "
                               "collector)")
        self._unloaded_timer.cancel()   # the scheduler thread publishes /diagnostics now
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = True
        self.get_logger().info(f"timely_server ready: action /plan, policy={self.params.policy}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self.get_logger().info(f"deactivated: new goals get NOT_ACTIVE; {self.intake.open_goals()} accepted goal(s) "
                               "run to completion")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release(timeout_s=10.0)
        self.get_logger().info("cleaned up: model freed")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release(timeout_s=10.0)
        return TransitionCallbackReturn.SUCCESS

    def _release(self, timeout_s: float) -> None:
        """End every open goal as SERVER_SHUTDOWN (through the scheduler thread while it runs), then close the
        runtime and drop it."""
        runtime = self.runtime
        self.intake.end_all(runtime.loop if runtime is not None else None, timeout_s)
        if runtime is not None:
            self.runtime = None
            for part in (self.intake, self.events, self.state):   # from now on they see no runtime (a goal
                part.attach(None)                                  # arriving now ends SERVER_SHUTDOWN)
            runtime.close(self.destroy_timer, self.get_logger().info)
        self._unloaded_timer.reset()

    def finish(self, timeout_s: float) -> None:
        """Process stop (spin_node, from the main thread while the executor still spins): no new goals, end accepted
        ones as SERVER_SHUTDOWN and give their results time to reach the clients."""
        self.closing = True
        self.active = False
        had_goals = self.intake.open_goals() > 0
        self._release(timeout_s)
        self.intake.wait_answered(timeout_s)
        if had_goals:
            self._drain_executor(timeout_s)
            time.sleep(0.3)  # the responses are written; give the transport a moment before the participant goes

    def _drain_executor(self, timeout_s: float) -> None:
        """Wait until the executor has run the result responses of the goals just answered. rclpy sends each as a
        task it queues when the goal's result is set, on the executor's one thread; a marker task queued after a
        first marker has run is behind every such task (the first ran after the goal's execute callback, which
        queued them, had returned), so once the second has run they have all been sent. A sleep alone could end
        before a starved executor thread sent them."""
        executor = self.executor
        if executor is None:
            return
        deadline = time.monotonic() + timeout_s
        for _ in range(2):
            ran = threading.Event()
            executor.create_task(ran.set)
            if not ran.wait(max(0.0, deadline - time.monotonic())):
                return

    def shutdown(self) -> None:
        """Free ROS entities that rclpy's destroy_node does not destroy (after the executor stopped; idempotent, and
        safe for a node whose __init__ failed before making them: a bad parameter)."""
        if not self._freed and self.action_server is not None:
            self._freed = True
            self.action_server.destroy()

    def destroy_node(self) -> None:
        """Also frees what rclpy leaves to the cycle collector, the /plan action server and the LifecycleNode's state
        machine, which hold the node's handle and so its context's DDS participant: else the node would stay in the
        ROS graph of a process that embeds it (a server made again there, or a fleet on its domain, sees two)."""
        self.shutdown()
        super().destroy_node()
        machine = getattr(self, "_state_machine", None)
        if machine is not None:
            machine.destroy_when_not_in_use()

    # ------------------------------------------------------------------ another server on the same action
    def _other_plan_servers(self) -> int:
        """How many other action servers the ROS graph lists for this server's /plan (each would answer every goal
        sent to it: two planners would plan, and send segments, for the same goal)."""
        topic = self.resolve_topic_name("plan") + "/_action/status"
        try:
            return max(0, self.count_publishers(topic) - 1)
        except Exception:   # the graph cannot be read (the context is going down): no check
            return 0

    def _namesake_message(self, others: int) -> str:
        plan = self.resolve_topic_name("plan")
        domain = os.environ.get("ROS_DOMAIN_ID") or "0 (ROS_DOMAIN_ID unset)"
        return (f"{others} other action server(s) serve {plan} on ROS domain {domain}, so every goal sent there "
                "would be planned twice; stop the other server, or give this one a namespace (-r __ns:=/site_b) "
                "or a ROS domain of its own (a server killed in the last ~20 s stays listed until DDS drops it)")

    def _watch_namesakes(self) -> None:
        """Timer: say so once when another server of /plan appears (and when it is gone). Only said: a killed
        server stays in the graph for a while, so refusing to serve would also stop a restarted one."""
        others = self._other_plan_servers()
        if others and not self._namesakes:
            self.get_logger().error(self._namesake_message(others))
        elif self._namesakes and not others:
            self.get_logger().info(f"{self.resolve_topic_name('plan')} has one server again")
        self._namesakes = others

    # ------------------------------------------------------------------ what the other modules ask
    def lifecycle_state(self) -> str:
        return self._state_machine.current_state[1]

    def stopping(self) -> bool:
        """The server is going down (a process stop or its signal)."""
        return self.closing or (self.stop_flag is not None and self.stop_flag.is_set())

    def policy_choice(self) -> PolicyChoice:
        """The configured policy; every policy is offered the skill sets' segment sizes, the hardware fit's step
        times, the network delay and G measured online (core/composition.py), and the semantic policy its text
        urgency classifier (stack.py engine_provided)."""
        return PolicyChoice(self.params.policy, self.params.max_batch, network_delay_s=self.params.network_delay_s,
                            online_gen_time=True)

    def plan_rule(self, agent: str) -> str:
        """The robot's rule for a second plan while one runs (queue | urgent_preempts), as its executor advertises
        it (ExecutorStatus; queue until it has)."""
        runtime = self.runtime
        return runtime.directory.plan_rule(agent) if runtime is not None else "queue"

    def robot_skills(self, agent: str) -> frozenset[str] | None:
        """The skills the agent's executor advertises (ExecutorStatus), None while it has said none."""
        runtime = self.runtime
        status = runtime.directory.status(agent) if runtime is not None else None
        return status.skills if status is not None else None

    def executor_lost(self, agent: str) -> None:
        """The robot directory saw the agent's executor go (its status lost liveliness): end its segments out."""
        runtime = self.runtime
        last = runtime.directory.status(agent) if runtime is not None else None
        if last is not None and last.state == "stopping":
            self.get_logger().info(f"executor /{agent}/execute_segment has shut down")
        else:
            self.get_logger().warning(f"executor /{agent}/execute_segment lost its liveliness and it did not come "
                                      "back (killed, or its process hung); segments it held end EXECUTOR_UNAVAILABLE")
        if runtime is not None:
            runtime.dispatcher.executor_lost(agent, f"lost its liveliness (its executor_status lease ran out and did not "
                                            f"come back within executor_ack_timeout_s, "
                                            f"{self.params.executor_ack_timeout_s:.1f} s: the process died or hung)")


def main(args: list[str] | None = None) -> int:
    # open goals hold no thread; blocking waits run on the discovery pool
    return spin_node(PlanServerNode, args=args, make_executor=SingleThreadedExecutor,
                     exit_code=lambda node: node.exit_code)


if __name__ == "__main__":
    sys.exit(main())
