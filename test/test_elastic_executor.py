"""The elastic worker pool behind every node's executor: threads end after a burst, no work is lost."""
from __future__ import annotations

import gc
import random
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from timely_llm_ros.ros.elastic_executor import ElasticExecutor, ElasticThreadPool


def _until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _blocked_burst(pool: ElasticThreadPool, n: int) -> tuple[threading.Event, list]:
    release = threading.Event()
    futures = [pool.submit(release.wait, 30) for _ in range(n)]
    return release, futures


@contextmanager
def _pool(*args, **kwargs) -> Iterator[ElasticThreadPool]:
    pool = ElasticThreadPool(*args, **kwargs)
    try:
        yield pool
    finally:
        pool.shutdown()


def _burst(pool: ElasticThreadPool, n: int, while_held: Callable[[], bool]) -> None:
    """n callbacks that each hold a worker until released: while_held() must become true meanwhile, then every
    one completes."""
    release, futures = _blocked_burst(pool, n)
    assert _until(while_held), pool.threads
    release.set()
    assert all(f.result(10) for f in futures)


def test_threads_of_a_burst_end_when_idle_down_to_keep():
    with _pool(32, keep=2, idle_exit_s=0.2) as pool:
        _burst(pool, 20, lambda: pool.threads == 20)     # one thread per blocked callback
        assert _until(lambda: pool.threads == 2), pool.threads
        assert pool.threads_ended == 18
        _burst(pool, 5, lambda: pool.threads == 5)       # the pool grows again for the next burst


def test_submit_never_waits_for_a_thread_to_start():
    """Thread.start waits until the new thread runs (a GIL hand-over, 0.5-0.8 ms on a busy box): the pool's
    starter thread starts the workers, so the thread that submits (the executor's spin thread) never waits.
    Observed with Python's own profiler hook on the submitting thread (sys.setprofile sees every Python call that
    thread makes, nothing is replaced): a burst that needs ten new workers makes no Thread.start call there."""
    with _pool(16, keep=0, idle_exit_s=0.2, name="observed") as pool:
        calls: list[str] = []

        def profile(frame, event, _arg) -> None:
            if event == "call":
                calls.append(frame.f_code.co_qualname)

        release = threading.Event()
        sys.setprofile(profile)
        try:
            futures = [pool.submit(release.wait, 30) for _ in range(10)]
        finally:
            sys.setprofile(None)
        assert "ElasticThreadPool.submit" in calls     # the hook saw the submits
        assert "Thread.start" not in calls, [c for c in calls if "start" in c.lower()]
        assert _until(lambda: sum(f.running() for f in futures) == 10)   # ten workers, started by the starter
        assert all(t.name.startswith("observed-") for t in pool._started)
        release.set()
        assert all(f.result(10) for f in futures)


def test_zero_idle_exit_keeps_every_thread_like_rclpys_pool():
    with _pool(32, keep=2, idle_exit_s=0.0) as pool:
        _burst(pool, 12, lambda: pool.threads == 12)
        time.sleep(0.5)
        assert pool.threads == 12 and pool.threads_ended == 0


def test_at_most_max_workers_and_queued_work_still_runs():
    with _pool(4, keep=0, idle_exit_s=0.1) as pool:
        release, futures = _blocked_burst(pool, 10)
        assert _until(lambda: pool.threads == 4)
        time.sleep(0.2)
        assert pool.threads == 4 and sum(f.running() for f in futures) == 4
        release.set()
        assert all(f.result(10) for f in futures)
        assert _until(lambda: pool.threads == 0)


def test_no_work_lost_while_workers_keep_ending():
    """Workers time out and end just as work arrives: every item still runs (the race between a worker deciding
    to end and a submit counting on it; a stranded item would wait for the next submit, and here there is none
    until it is done)."""
    pool = ElasticThreadPool(4, keep=0, idle_exit_s=0.002)
    rng = random.Random(7)
    try:
        for round_ in range(1500):
            time.sleep(rng.random() * 0.004)          # around idle_exit_s: workers end as the next items arrive
            futures = [pool.submit(pow, round_, 2) for _ in range(rng.randint(1, 3))]
            assert [f.result(2.0) for f in futures] == [round_ ** 2] * len(futures), f"round {round_}"
        assert pool.threads_ended > 100    # the case under test happened, many times
    finally:
        pool.shutdown()


def test_exceptions_reach_the_future_and_shutdown_joins_every_worker():
    pool = ElasticThreadPool(8, keep=3, idle_exit_s=60.0, name="joined")
    release, futures = _blocked_burst(pool, 5)
    failing = pool.submit(lambda: 1 / 0)
    release.set()
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    pool.shutdown(wait=True)
    assert all(f.done() for f in futures)
    assert not [t for t in threading.enumerate() if t.name.startswith("joined-")]
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)


def test_shutdown_cancel_futures_drops_queued_work():
    pool = ElasticThreadPool(1, keep=1, idle_exit_s=60.0)
    release = threading.Event()
    first = pool.submit(release.wait, 30)
    queued = [pool.submit(time.sleep, 0) for _ in range(3)]
    assert _until(first.running)
    release.set()
    pool.shutdown(wait=True, cancel_futures=True)
    assert first.result() is True
    assert all(f.cancelled() or f.done() for f in queued)


def test_a_finished_item_keeps_nothing_alive_without_the_cycle_collector():
    class Payload:
        pass

    pool = ElasticThreadPool(2, keep=2, idle_exit_s=60.0)
    gc.disable()
    try:
        payload = Payload()
        ref = weakref.ref(payload)
        future = pool.submit(lambda p: p, payload)
        assert future.result(10) is payload
        del payload, future
        assert _until(lambda: ref() is None, 5.0)   # freed by reference counting: no frame or item holds it
    finally:
        gc.enable()
        pool.shutdown()


def test_an_rclpy_node_on_the_elastic_executor_gives_its_threads_back():
    """Real rclpy: a service whose callback blocks holds one thread per open call (as a goal does); when the
    calls are answered the threads end."""
    import rclpy
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.context import Context
    from rcl_interfaces.srv import GetParameters

    context = Context()
    rclpy.init(context=context)
    executor = ElasticExecutor(32, keep=2, idle_exit_s=0.3, context=context)
    release = threading.Event()
    node = rclpy.create_node("elastic_server", context=context)
    client_node = rclpy.create_node("elastic_client", context=context)

    def handle(_request, response):
        release.wait(30)
        response.values = []
        return response

    node.create_service(GetParameters, "/elastic_test/get", handle, callback_group=ReentrantCallbackGroup())
    client = client_node.create_client(GetParameters, "/elastic_test/get", callback_group=ReentrantCallbackGroup())
    executor.add_node(node)
    executor.add_node(client_node)
    spinning = threading.Event()

    def spin() -> None:
        while not spinning.is_set():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        assert client.wait_for_service(10)
        calls = [client.call_async(GetParameters.Request()) for _ in range(8)]   # within the service queue (depth 10)
        assert _until(lambda: executor.pool.threads >= 8), executor.pool.threads
        release.set()
        assert _until(lambda: all(c.done() for c in calls))
        assert all(c.result() is not None for c in calls)
        assert _until(lambda: executor.pool.threads <= 2), executor.pool.threads
    finally:
        release.set()
        spinning.set()
        spinner.join()
        executor.shutdown()
        node.destroy_node()
        client_node.destroy_node()
        rclpy.shutdown(context=context)


@pytest.mark.parametrize("executor_class", ["elastic", "rclpy"])
def test_callbacks_running_at_shutdown_finish_before_the_guard_condition_goes(executor_class):
    """A callback still running when the executor shuts down may wake it or create a task (a future completing
    does both), which triggers the executor's guard condition. rclpy's MultiThreadedExecutor destroys that guard
    condition at once (a trigger racing the destruction raised "cannot use Destroyable", seen once at a node's
    exit); ElasticExecutor lets the running callbacks finish first. The guard is rclpy's private ``_guard``."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import MultiThreadedExecutor

    context = Context()
    rclpy.init(context=context)
    if executor_class == "elastic":
        executor = ElasticExecutor(4, context=context)
    else:
        executor = MultiThreadedExecutor(num_threads=4, context=context)
    node = rclpy.create_node("shutdown_order", context=context)
    started, guard_at_end = threading.Event(), []

    def slow_callback() -> None:
        timer.cancel()
        started.set()
        time.sleep(0.3)                     # the executor is shut down meanwhile
        guard_at_end.append(executor._guard is not None)
        executor.create_task(lambda: None)

    timer = node.create_timer(0.01, slow_callback)
    executor.add_node(node)
    try:
        while not started.is_set():
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown(timeout_sec=5.0)
        assert _until(lambda: bool(guard_at_end), 5.0)
        # rclpy's order documents the behaviour this executor fixes; if rclpy fixes it, that case can go
        assert guard_at_end == [executor_class == "elastic"]
        assert executor._guard is None      # and the shutdown did complete
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_ended_workers_are_not_kept():
    with _pool(16, keep=1, idle_exit_s=0.05, name="forgotten") as pool:
        _burst(pool, 12, lambda: pool.threads == 12)
        assert _until(lambda: pool.threads == 1)
        time.sleep(0.1)
        assert len(pool._started) <= 2, len(pool._started)   # the one kept, and at most the last to end


def test_shutdown_gives_up_on_a_callback_that_never_returns(capsys):
    """A hung callback must not keep a node from exiting on Ctrl-C: the shutdown waits timeout_sec, reports the
    callback's stack on stderr and goes on (the pool's workers are daemon threads)."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context)
    executor = ElasticExecutor(4, context=context)
    node = rclpy.create_node("hung_callback", context=context)
    release, started = threading.Event(), threading.Event()

    def hung_callback() -> None:
        timer.cancel()
        started.set()
        release.wait(60)                    # a callback stuck on something that never comes

    timer = node.create_timer(0.01, hung_callback)
    executor.add_node(node)
    try:
        while not started.is_set():
            executor.spin_once(timeout_sec=0.05)
        t0 = time.monotonic()
        assert executor.shutdown(timeout_sec=0.5) is False
        assert time.monotonic() - t0 < 5.0
        err = capsys.readouterr().err
        assert "1 callback thread(s) still running 0.5 s after shutdown began" in err, err
        assert "in hung_callback" in err and "release.wait(60)" in err, err
    finally:
        release.set()
        node.destroy_node()
        rclpy.shutdown(context=context)
