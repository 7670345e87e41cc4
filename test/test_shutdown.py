"""Ctrl-C as a terminal delivers it: SIGINT to the process group of server + executors + workload, mid-run.
Every process exits 0 without a traceback, and every goal the workload sent got a terminal result."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from ros_harness import NodeProcess, start_executor, start_server  # noqa: E402

from timely_llm_ros.core.step_trace import read_step_trace  # noqa: E402


def test_sigint_to_the_process_group_ends_every_process_cleanly_and_loses_no_goal(tmp_path):
    table = tmp_path / "results.csv"
    trace = tmp_path / "steps.csv"
    nodes = []
    try:
        server = start_server("executor_timeout_s:=5.0", f"step_trace_csv:={trace}",
                              group=0)       # leads a new process group
        pgid = server.proc.pid
        nodes.append(server)
        nodes.append(start_executor("drone_1", "drone", 0.5, group=pgid))
        nodes.append(start_executor("arm_1", "arm", 0.5, group=pgid))
        workload = NodeProcess("timely_llm_ros.ros.fleet.workload_node",
                               ["-p", "agents:=['drone_1:drone', 'arm_1:arm']", "-p", "requests_per_agent:=4",
                                "-p", "stagger_s:=0.0", "-p", f"results_csv:={table}"], "fleet of", group=pgid)
        nodes.append(workload)
        workload.wait_ready(60)
        workload.wait_for("-> robot", 90)        # plans are being generated and executed
        os.killpg(pgid, signal.SIGINT)
        for node in nodes:
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                dump = node.thread_dump()
                pytest.fail("a process did not exit within 30 s of SIGINT:\n" + node.output()[-3000:]
                            + "\n---- its threads (SIGUSR2):\n" + dump[-6000:])
        for node in nodes:
            out = node.output()
            # with the server's own log: a goal the workload got no result for is explained (or not) there
            seen = out[-3000:] + ("" if node is server else "\n---- the server's log:\n" + server.output()[-4000:])
            assert node.proc.returncode == 0, seen
            assert "Traceback" not in out and "terminate called" not in out, seen
        rows = list(csv.DictReader(table.open()))
        assert rows, workload.output()[-3000:]
        assert all(r["status"] != "no result" for r in rows), rows
        # A goal whose segment is at a robot ends SERVER_SHUTDOWN when the server has handled its SIGINT before the
        # robot's "executor shutting down" result arrives, EXECUTION_FAILED with that message otherwise (a race
        # between two processes that one loaded fresh-clone run lost: both goals were at their robots)
        assert any(r["status"] == "SERVER_SHUTDOWN" or (
            r["status"] == "EXECUTION_FAILED" and "executor shutting down" in r["message"]) for r in rows), rows
        assert "SERVER_SHUTDOWN" in server.output() or "shutting down" in server.output()
        # the step trace is complete and closed at Ctrl-C: one row per engine step, as the server counted them
        steps = read_step_trace(trace)
        assert steps and f"step trace in {trace}: {len(steps)} engine steps; per step (ms): forward" in server.output()
        assert {r.policy for r in steps} == {"timely"}
        assert all(r.engine_s > 0 and r.iteration_s >= r.engine_s + r.inbox_s + r.events_s + r.idle_s for r in steps)
        assert any(r.events_s > 0 for r in steps)    # segments went out as feedback and to the robots
        assert any(r.prefills for r in steps) and any(r.decode_batch for r in steps)
    finally:
        for node in reversed(nodes):
            node.stop()


def test_a_step_trace_path_that_cannot_be_written_fails_configure_with_the_reason(tmp_path):
    """Checked before the model loads; autostart's failed configure exits 1, without a traceback."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    server = start_server(f"step_trace_csv:={blocker / 'steps.csv'}", ready="configure failed")
    try:
        assert server.proc.wait(30) == 1
        out = server.output()
        assert f"configure failed: step_trace_csv '{blocker / 'steps.csv'}'" in out and "give a writable path" in out
        assert "engine loaded" not in out and "Traceback" not in out
    finally:
        server.stop()


def test_sigusr2_prints_every_threads_stack_and_the_node_carries_on():
    """`kill -USR2 <pid>`: where a stuck node waits (faulthandler); the node keeps serving and exits 0 on SIGINT."""
    node = start_executor("dump_1", "drone", 0.5)
    try:
        dump = node.thread_dump()
        assert "Thread 0x" in dump and "most recent call first" in dump, dump
        assert "run_executor" in dump, dump            # the main thread, spinning
        assert "_dispatch_loop" in dump, dump          # the robot's segment dispatcher, waiting
        assert node.proc.poll() is None
        node.proc.send_signal(signal.SIGINT)
        assert node.proc.wait(30) == 0, node.output()[-3000:]
        assert "Traceback" not in node.output()
    finally:
        node.stop()


@pytest.mark.parametrize("role", ["server", "executor"])
def test_ctrl_c_pressed_again_and_again_until_the_node_is_gone_still_ends_it_cleanly(role):
    """Ctrl-C pressed again while a node shuts down (or a terminal's SIGINT plus a launcher's, or a parent-death
    SIGTERM repeated per exiting thread): a stop signal every 2 ms, SIGINT and SIGTERM in turn, until the
    process is gone. Every later signal must change nothing, up to the last instant: exit 0, no traceback. With
    Python's own handlers put back at the end, the server died of the signal (-2) with a KeyboardInterrupt
    traceback from torch's exit hooks in 4 of 4 runs."""
    node = start_server() if role == "server" else start_executor("burst_1", "drone", 0.5)
    try:
        sent, end = 0, time.monotonic() + 30
        while node.proc.poll() is None and time.monotonic() < end:
            try:
                node.proc.send_signal(signal.SIGINT if sent % 2 else signal.SIGTERM)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(0.002)
        assert node.proc.wait(5) == 0, node.output()[-3000:]
        assert sent > 1
        assert "Traceback" not in node.output() and "KeyboardInterrupt" not in node.output(), node.output()[-3000:]
    finally:
        node.stop()


def test_sigterm_while_the_model_loads_for_a_configure_call_ends_the_server_0_without_a_traceback():
    """A lifecycle configure asked from outside is loading the model when SIGTERM comes: the configure callback
    outlives the spin's wait, and answering it into the destroyed node used to print a traceback."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    server = start_server("autostart:=false", ready="autostart is false")
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("configure_caller", context=context)
    try:
        client = node.create_client(ChangeState, "/timely_server/change_state")
        assert client.wait_for_service(timeout_sec=30)
        client.call_async(ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE)))
        server.wait_for("configuring:", 30)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0, server.output()[-3000:]
        out = server.output()
        assert "Traceback" not in out and "a callback raised" not in out, out[-3000:]
        if "configure stopped" in out or "configure failed" in out:   # the load was cut short, not finished
            assert "configure stopped: the process is shutting down" in out and "configure failed" not in out, \
                out[-3000:]
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        server.stop()


def test_a_stop_waits_for_a_callback_that_outlives_the_spin_join_before_it_destroys_the_node():
    """A configure callback loading a model can run past the stop's join of the spin thread (on a loaded machine
    the load took 10 s). Destroying the node under it crashed the server in rcl (SIGSEGV) when configure went on to
    make its entities. Here the join is cut to 0.2 s and a callback sleeps 2 s, then makes a publisher on its node:
    the stop must wait for it, and the process must end 0 with the publisher made on a live node."""
    import sys
    import textwrap
    code = textwrap.dedent("""
        import os, signal, threading, time
        import rclpy
        from rclpy.node import Node
        from std_msgs.msg import String
        from timely_llm_ros.ros import spin

        spin.SPIN_JOIN_S = 0.2

        class Slow(Node):
            def __init__(self):
                super().__init__("slow_callback")
                self.timer = self.create_timer(0.05, self.load)

            def load(self):
                self.timer.cancel()
                os.kill(os.getpid(), signal.SIGTERM)        # the stop comes while the callback runs
                time.sleep(2.0)
                self.create_publisher(String, "made_after_stop", 1)
                print("publisher made", flush=True)

        from rclpy.executors import SingleThreadedExecutor   # as the server: callbacks run on the spin thread
        raise SystemExit(spin.spin_node(Slow, make_executor=SingleThreadedExecutor))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "publisher made" in done.stdout, done.stdout + done.stderr
    assert "waiting for a callback that is still running" in done.stderr
    assert "Traceback" not in done.stderr and "a callback raised" not in done.stderr, done.stderr
