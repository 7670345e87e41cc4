"""The executor API over real DDS: a kinematic drone subclass and the simulated executor in their own processes,
driven by an in-process ExecuteSegment client (order, feedback, cancel, BUSY, unknown skill, failure, shutdown)."""
from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile  # noqa: E402

from timely_llm_ros.action import ExecuteSegment  # noqa: E402
from timely_llm_ros.msg import RobotState, Skill  # noqa: E402
from timely_llm_ros.ros.executor.base import SkillExecutorNode  # noqa: E402
from timely_llm_ros.ros.executor.skills import SkillContext, SkillRegistry, skill  # noqa: E402
from timely_llm_ros.ros.server.segment_dispatcher import CLIENT_QUEUES  # noqa: E402

from ros_harness import NodeProcess, SpinningActionClient, poll_until, runs_on_robot, wait, wait_until  # noqa: E402

R = ExecuteSegment.Result


def _segment(req: str, index: int, *calls: tuple, preempts: bool = False) -> ExecuteSegment.Goal:
    """A segment as the server sends it: its plan text (what the robot runs) and its skill calls."""
    text = "".join(f"{c[0]}({','.join(repr(a) for a in c[1:])});" for c in calls)
    return ExecuteSegment.Goal(request_id=req, index=index, text=text,
                               skills=[Skill(name=c[0], args=[str(a) for a in c[1:]]) for c in calls],
                               expected_duration=1.0, preempts=preempts)


class _Client(SpinningActionClient):
    """ExecuteSegment client for one namespace, plus the robot's published state."""

    def __init__(self, ns: str, **client_options) -> None:
        self.ns = ns
        self.states: list[RobotState] = []
        super().__init__("test_exec_client", ExecuteSegment, f"/{ns}/execute_segment", **client_options)
        assert self.client.wait_until_answering(timeout_sec=30.0)

    def add_entities(self) -> None:
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.sub = self.node.create_subscription(RobotState, f"/{self.ns}/robot_state", self.states.append, latched)

    def send(self, goal, feedback: list | None = None):
        handle = wait(self.client.send_goal_async(goal, feedback_callback=(
            (lambda m: feedback.append(m.feedback)) if feedback is not None else None)), 20.0)
        assert handle is not None and handle.accepted
        return handle

    def result(self, handle, timeout: float = 30.0):
        wrapped = wait(self.client.result_async(handle), timeout)
        assert wrapped is not None, "no result"
        return wrapped.status, wrapped.result



def _start(module: str, ns: str, *params: str) -> NodeProcess:
    args = ["-r", f"__ns:=/{ns}", "-r", "__node:=executor"]
    for p in params:
        args += ["-p", p]
    node = NodeProcess(module, args, "executor ready")
    node.wait_ready(60)
    return node


@pytest.fixture(scope="module")
def kinematic():
    node = _start("timely_llm_ros.ros.executor.kinematic", "kin_1", "speed_mps:=4.0", "turn_rate_dps:=720.0",
                  "queue_size:=1", "feedback_period_s:=0.1")
    client = _Client("kin_1")
    try:
        yield client, node
    finally:
        client.close()
        node.stop()
    assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


def _settled_state(client: _Client, reached=lambda state: True) -> RobotState:
    """The robot's state once it is idle (no current skill) and reached(state) holds: the last state message can
    arrive after the result, and the robot is also idle for a moment between skills."""
    def settled() -> RobotState | None:
        state = client.states[-1] if client.states else None
        return state if state is not None and state.current_skill == "" and reached(state) else None
    return wait_until(settled, 10.0, lambda: f"the robot did not settle; last states {client.states[-3:]}")


def test_segments_move_the_published_state_in_plan_order(kinematic):
    client, _ = kinematic
    base = _settled_state(client)
    fb: list = []
    # index 1 is sent first: the executor must still run 0 (turn left) before 1 (forward), ending at +y, not +x
    second = client.send(_segment("r1", 1, ("mf", 100), ("mu", 40)))
    first = client.send(_segment("r1", 0, ("tu", 90)), fb)
    t0 = time.monotonic()
    assert client.result(first)[1].error_code == R.ERROR_NONE
    status, result = client.result(second)
    wall = time.monotonic() - t0
    assert status == GoalStatus.STATUS_SUCCEEDED and result.success, result.error_message
    assert 0.0 < result.execution_time < wall  # timed from its own start, not from when it was queued
    s = _settled_state(client, lambda s: (s.x - base.x, s.y - base.y, s.z - base.z) == pytest.approx((0.0, 1.0, 0.4),
                                                                                                   abs=1e-6))
    assert s.yaw == pytest.approx(90.0) and s.current_skill == ""
    assert fb and fb[0].skills_total == 1 and fb[0].current_skill == "tu" and fb[-1].skills_done == 1


def test_cancel_stops_the_robot_mid_move_and_a_full_queue_answers_busy(kinematic):
    client, _ = kinematic
    base = _settled_state(client)
    fb: list = []
    running = client.send(_segment("long", 0, ("mb", 2000)), fb)  # 5 s at 4 m/s
    assert _wait(lambda: len(fb) >= 3), "no periodic feedback from the running segment"
    queued = client.send(_segment("other", 0, ("d", 1)))            # fills queue_size 1
    busy = client.send(_segment("third", 0, ("d", 1)))
    status, result = client.result(busy, 5.0)
    assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.BUSY and "queue_size" in result.error_message
    wait(queued.cancel_goal_async(), 5.0)
    status, result = client.result(queued, 5.0)
    assert status == GoalStatus.STATUS_CANCELED and result.error_code == R.CANCELLED
    t0 = time.monotonic()
    wait(running.cancel_goal_async(), 5.0)
    status, result = client.result(running, 5.0)
    assert status == GoalStatus.STATUS_CANCELED and result.error_code == R.CANCELLED
    assert time.monotonic() - t0 < 2.0
    s = _settled_state(client, lambda s: (s.x, s.y) != (base.x, base.y))   # one skill: idle again only when stopped
    moved = ((s.x - base.x) ** 2 + (s.y - base.y) ** 2) ** 0.5
    assert 0.0 < moved < 20.0, "the robot must have stopped part-way"
    assert min(f.time_remaining for f in fb) < max(f.time_remaining for f in fb) <= 5.0  # it counts down


def test_unknown_skill_is_refused_at_once_with_the_skills_it_has(kinematic):
    client, _ = kinematic
    status, result = client.result(client.send(_segment("u", 0, ("grasp", "cup"), ("mf", 10))), 5.0)
    assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.UNKNOWN_SKILL
    assert "grasp" in result.error_message and "mf" in result.error_message


def _wait(pred, timeout: float = 10.0) -> bool:
    return bool(poll_until(pred, timeout))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_simulated_executor_faults_and_clean_exit_on_signal(sig):
    """abort_probability 1: FAILED with the reason; a hanging segment still ends when the process is signalled."""
    ns = f"sim_{sig.name.lower()}"
    node = _start("timely_llm_ros.ros.executor.node", ns, "robot_type:=drone", "time_scale:=0.01",
                  "abort_probability:=0.7", "hang_probability:=0.3", "seed:=3")
    client = _Client(ns)
    try:
        outcomes = []
        for i in range(30):  # each segment either fails or hangs
            handle = client.send(_segment(f"f{i}", 0, ("mf", 50)))
            wrapped = wait(client.client.result_async(handle), 2.0)
            if wrapped is None:
                break
            outcomes.append(wrapped.result.error_code)
            assert "injected fault" in wrapped.result.error_message
        assert set(outcomes) <= {R.FAILED}, outcomes
        assert wrapped is None, "a segment should hang (hang_probability 0.3)"
        node.proc.send_signal(sig)
        status, result = client.result(handle, 10.0)  # the hanging segment gets its result before the exit
        assert status == GoalStatus.STATUS_ABORTED and "shutting down" in result.error_message
        assert node.proc.wait(15) == 0
        assert "Traceback" not in node.output()
    finally:
        client.close()
        node.stop()


@contextlib.contextmanager
def _pausable(ns: str, time_scale: float):
    """A simulated drone executor in its own process and a client with the server's queues (CLIENT_QUEUES: a
    burst of answers comes back at once; with rclpy's default of 10 this client itself dropped 19 of 30 once, in a
    full `make test`)."""
    node = _start("timely_llm_ros.ros.executor.node", ns, "robot_type:=drone", f"time_scale:={time_scale}",
                  "queue_size:=100")
    client = _Client(ns, **CLIENT_QUEUES)
    try:
        yield client, node
    finally:
        client.close()
        node.stop()


@contextlib.contextmanager
def _paused(node: NodeProcess, seconds: float = 1.0):
    """The executor's process stopped (SIGSTOP: a GIL-bound host that falls behind, at its worst) while the body
    runs and `seconds` after it, then resumed."""
    node.proc.send_signal(signal.SIGSTOP)
    try:
        yield
        time.sleep(seconds)
    finally:
        node.proc.send_signal(signal.SIGCONT)


def test_goals_sent_while_the_executor_process_is_paused_are_all_answered():
    """30 segments sent while the executor's process is stopped all get a goal response once it resumes. With
    rclpy's default action queues (depth 10) the executor kept 10 and the other 20 were lost without a word: the
    server then failed them as EXECUTOR_UNAVAILABLE after executor_ack_timeout_s (in 1 of 14 short `make stress`
    runs)."""
    with _pausable("paused_1", 0.01) as (client, node):
        with _paused(node):
            futures = [client.client.send_goal_async(_segment(f"p{i}", 0, ("mf", 5))) for i in range(30)]
        assert _wait(lambda: all(f.done() for f in futures), 15.0), \
            f"{sum(not f.done() for f in futures)} of 30 goals never answered"
        assert all(f.result().accepted for f in futures)


@pytest.mark.parametrize("stalled_s", [0.0, 1.5], ids=["at-once", "after-a-1.5s-stall"])
def test_cancels_sent_while_the_executor_process_is_paused_all_take_effect(stalled_s):
    """The server cancels a robot's segments without waiting for an answer (fire and forget): 30 cancels sent
    while the executor is stopped must all stop their segments, or a robot would go on with a plan its server
    has ended. After a stall of over a second Fast DDS stops handing the stopped process samples through shared
    memory and resends them from the client's history later: with the server's cancel queue at rclpy's default
    of 10, only the last 10 cancels took effect (seen once in a full `make test`; every time with the stall)."""
    with _pausable(f"paused_{2 + int(stalled_s > 0)}", 1.0) as (client, node):
        handles = [client.send(_segment(f"c{i}", 0, ("mf", 2000))) for i in range(30)]   # 16 s each: all wait
        with _paused(node):
            time.sleep(stalled_s)
            for handle in handles:
                handle.cancel_goal_async()
        # a lost cancel leaves its segment queued or running for 16 s: judge the statuses, not one result after another
        _wait(lambda: all(h.status == GoalStatus.STATUS_CANCELED for h in handles), 15.0)
        statuses = [handle.status for handle in handles]
        missed = [i for i, st in enumerate(statuses) if st != GoalStatus.STATUS_CANCELED]
        assert not missed, f"{len(missed)} of 30 cancelled segments ran anyway (statuses {statuses})"


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_a_plan_stops_at_a_segment_that_was_cancelled_or_failed(ending):
    """Segments 1 and 2 of a plan wait behind segment 0. When 0 is cancelled (only 0) or fails, they end NOT_RUN
    without starting. Before, the robot moved on to segment 1 the moment 0 ended: until the server's
    separate cancel for it came, or to its end after a failure, although the plan past a failed step no longer
    holds. A segment of the same plan sent afterwards (the new plan after a failure) runs as usual."""
    fault = "abort_probability:=1.0" if ending == "failed" else "abort_probability:=0.0"
    node = _start("timely_llm_ros.ros.executor.node", f"stop_{ending}", "robot_type:=drone", "time_scale:=1.0",
                  fault)
    client = _Client(f"stop_{ending}")
    try:
        fb: list[list] = [[], [], [], []]
        first = client.send(_segment("plan", 0, ("mf", 500)), fb[0])   # 5.4 s; with the fault it fails half-way
        later = [client.send(_segment("plan", i, ("mf", 5)), fb[i]) for i in (1, 2)]
        assert _wait(lambda: fb[0]), "segment 0 never started"
        if ending == "cancelled":
            wait(first.cancel_goal_async(), 5.0)
        status, result = client.result(first, 15.0)
        assert (status, result.error_code) == ((GoalStatus.STATUS_CANCELED, R.CANCELLED) if ending == "cancelled"
                                               else (GoalStatus.STATUS_ABORTED, R.FAILED))
        for handle, seen in zip(later, fb[1:3]):
            status, result = client.result(handle, 5.0)
            assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.NOT_RUN, result.error_message
            assert result.error_message.startswith("not run: segment 0 of this plan ended first"), \
                result.error_message
            assert not seen, "a segment after the one that ended must not start"
        status, result = client.result(client.send(_segment("plan", 3, ("mf", 5)), fb[3]), 15.0)
        assert fb[3], "a segment sent after the plan stopped must run"
        if ending == "cancelled":
            assert status == GoalStatus.STATUS_SUCCEEDED, result.error_message
        else:
            assert "injected fault" in result.error_message
    finally:
        client.close()
        node.stop()
    assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


def test_skill_registry_collects_marked_functions_and_methods():
    class Robot:
        def rate(self, args):
            return args[0] / 2

        @skill("mf", estimate="rate")
        def move(self, ctx, cm):
            return cm

    @skill("g")
    def goto(ctx, obj):
        return obj

    reg = SkillRegistry()
    assert reg.add_marked(Robot()) == 1 and reg.add_marked({"tp": lambda ctx: None}) == 1
    import types
    mod = types.ModuleType("m")
    mod.goto = goto
    assert reg.add_marked(mod) == 1
    assert reg.names() == ["g", "mf", "tp"]
    assert reg.estimate("mf", (10,)) == 5.0 and reg.estimate("g", ("x",)) == 0.0
    stop = threading.Event()
    ctx = SkillContext("r", 0, "d", (), stop.is_set)
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(Exception, match="cancelled"):
        ctx.sleep(float("inf"))


def test_two_plans_for_one_robot_never_interleave_and_the_robot_does_not_go_back_to_a_plan_it_left():
    """Plan b's segment arrives (with preempts, which the default plan_rule queue ignores) between plan a's segments
    0 and 1: the robot runs a0, a1, then b0, one at a time. a's segment 2, arriving after b took the robot, ends
    NOT_RUN."""
    node = _start("timely_llm_ros.ros.executor.node", "one_plan", "robot_type:=drone", "time_scale:=0.25",
                  "log_timing:=true")
    client = _Client("one_plan")
    try:
        handles = [client.send(_segment("a", 0, ("mf", 200))), client.send(_segment("b", 0, ("mf", 20), preempts=True)),
                   client.send(_segment("a", 1, ("mf", 20)))]
        assert all(client.result(h)[1].success for h in handles)
        status, late = client.result(client.send(_segment("a", 2, ("mf", 20))), 10.0)
        assert late.error_code == R.NOT_RUN and "plan b took the robot" in late.error_message
        runs = runs_on_robot(node.output())
        assert [key for key, _, _ in runs] == [("a", 0), ("a", 1), ("b", 0)]
        assert all(end <= nxt for (_, _, end), (_, nxt, _) in zip(runs, runs[1:])), runs
    finally:
        client.close()
        node.stop()
    assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


def test_a_segment_whose_predecessor_never_arrives_ends_not_run_and_frees_the_robot():
    """A hand-written client sends plan a's segments 0 and 1, then 3 (never 2), and plan b's segment 0; and a
    plan n from its segment 2 only. Without a bound a3 held the robot for plan a for ever and b never ran; after
    predecessor_timeout_s a3 and n2 end NOT_RUN, naming what never came, and b runs."""
    node = _start("timely_llm_ros.ros.executor.node", "gap", "robot_type:=drone", "time_scale:=0.25",
                  "log_timing:=true", "predecessor_timeout_s:=1.5")
    client = _Client("gap")
    try:
        assert all(client.result(client.send(_segment("a", k, ("mf", 20))))[1].success for k in (0, 1))
        t0 = time.monotonic()
        gap, stray, other = (client.send(_segment("a", 3, ("mf", 20))), client.send(_segment("n", 2, ("mf", 20))),
                             client.send(_segment("b", 0, ("mf", 20))))
        for handle, missing in ((gap, "segment 2 of"), (stray, "segment 0, 1 of")):
            status, result = client.result(handle, 15.0)
            assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.NOT_RUN, result
            assert missing in result.error_message and "predecessor_timeout_s" in result.error_message
        assert time.monotonic() - t0 >= 1.5
        assert client.result(other, 15.0)[1].success
        assert [key for key, _, _ in runs_on_robot(node.output())] == [("a", 0), ("a", 1), ("b", 0)]
    finally:
        client.close()
        node.stop()
    assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


def test_urgent_preempts_interrupts_the_running_skill_and_the_plans_segments_end_preempted():
    """plan_rule urgent_preempts: a segment sent with preempts stops plan a in its skill in progress, as a cancel
    would (a0's first skill never ends on its own here: hang_probability 1), a's queued and later segments end
    PREEMPTED, and plan u runs once a0 has stopped."""
    node = _start("timely_llm_ros.ros.executor.node", "preempting", "robot_type:=drone", "time_scale:=0.25",
                  "log_timing:=true", "plan_rule:=urgent_preempts", "hang_probability:=1.0")
    client = _Client("preempting")
    try:
        fb: list = []
        first = client.send(_segment("a", 0, ("mf", 300), ("mf", 300)), fb)
        queued = client.send(_segment("a", 1, ("mf", 20)))
        assert _wait(lambda: fb), "a0 never started"
        urgent = client.send(_segment("u", 0, ("mf", 20), preempts=True))
        status, result = client.result(first)
        assert result.error_code == R.PREEMPTED and "plan u took the robot" in result.error_message
        assert "stopped in mf" in result.error_message, result.error_message
        assert [s.name for s in result.executed_skills] == ["mf"]          # interrupted in its first call
        assert client.result(queued)[1].error_code == R.PREEMPTED
        assert _wait(lambda: ("u", 0) in [key for key, _, _ in runs_on_robot(node.output())]), "u0 never started"
        wait(urgent.cancel_goal_async(), 10.0)                            # u0 hangs too: cancelled, it ends
        assert client.result(urgent)[1].error_code == R.CANCELLED
        assert client.result(client.send(_segment("a", 2, ("mf", 20))))[1].error_code == R.PREEMPTED
        runs = runs_on_robot(node.output())
        assert [key for key, _, _ in runs] == [("a", 0), ("u", 0)] and runs[0][2] <= runs[1][1], runs
    finally:
        client.close()
        node.stop()
    assert node.proc.returncode == 0 and "Traceback" not in node.output(), node.output()[-3000:]


class _SlowToAnnounce(SkillExecutorNode):
    """The real executor with one timing change (a test double for timing only): a status update outside the
    dispatch thread takes 0.3 s, so the plan's running segment ends while a later segment's arrival is still
    being handled."""

    ROBOT_TYPE = "drone"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.executions: list[bytes] = []     # the goal of each run of the execute callback

    def _status_changed(self) -> None:
        if threading.current_thread().name != "segment-dispatch":
            time.sleep(0.3)
        super()._status_changed()

    def _execute(self, handle) -> ExecuteSegment.Result:
        self.executions.append(bytes(handle.goal_id.uuid))
        return super()._execute(handle)

    @skill("tc")
    def turn(self, ctx, degrees):
        ctx.sleep(0.2)      # segment 0 still runs when 1 and 2 are queued, and ends inside their 0.3 s


def test_a_segment_that_arrives_as_its_plan_returns_is_answered_once_with_not_run():
    """Segments 1 and 2 arrive while segment 0 (which returns) runs, and 0 ends before their arrival is fully
    handled. Each gets one NOT_RUN; CI once saw segment 1 started twice (its second start aborted an ABORTED goal
    and the client got an empty result)."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = _SlowToAnnounce(namespace="race", context=context)
    executor = MultiThreadedExecutor(num_threads=6, context=context)
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    node.publish_status()
    client = _Client("race")
    try:
        for attempt in range(3):
            plan = f"ret{attempt}"
            first = _segment(plan, 0, ("tc", 10))
            first.text += "->'early';"
            handles = [client.send(goal) for goal in (first, _segment(plan, 1, ("tc", 10)),
                                                       _segment(plan, 2, ("tc", 10)))]
            results = [client.result(h, 15.0) for h in handles]
            assert results[0][1].success and results[0][1].return_value == "early"
            for status, result in results[1:]:
                assert status == GoalStatus.STATUS_ABORTED and result.error_code == R.NOT_RUN, result
                assert "returned at segment 0" in result.error_message
        assert _wait(lambda: len(node.executions) >= 9), node.executions
        time.sleep(1.0)     # a second start of a segment comes 0.3 s after its first
        assert len(node.executions) == len(set(node.executions)) == 9, "a segment was started twice"
    finally:
        client.close()
        node.shutdown()
        executor.shutdown(timeout_sec=5.0)
        spin.join(5.0)
        node.destroy_node()
        rclpy.shutdown(context=context)
