"""A decode that ``interrupt_check`` can end early, with the check kept on the thread that runs the step.

The driver's interrupt_check reads scheduler state without a lock: it must run on the thread that called step()
(core/runtime.py). So while a check is set, the llama_decode call runs on a helper thread (it holds no GIL inside
llama.cpp) and the stepping thread asks interrupt_check every ``poll_s`` until the decode returns; when the check
says so it raises the context's abort flag, and llama.cpp ends the decode after the graph node in flight. The
granularity is therefore the poll interval plus one graph node (a fraction of a layer), not a layer boundary; without
a check the decode runs on the calling thread, at no cost.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Callable

from timely_llm_ros.engine.llamacpp.native import KvContext, TokenBatch


def _serve(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        ctx, batch, box, done = job
        try:
            box.append(ctx.decode(batch))
        except BaseException as exc:     # handed back to the stepping thread
            box.append(exc)
        finally:
            done.set()
            del job, ctx, batch, box, done


class AbortableDecode:
    """Runs a context's decodes; see the module docstring. ``last_abort_latency_s``: from the poll that asked for
    the abort to the decode's return (the latest aborted decode)."""

    def __init__(self, ctx: KvContext, poll_s: float = 0.002) -> None:
        self.ctx, self.poll_s = ctx, poll_s
        self.aborts = 0
        self.last_abort_latency_s = 0.0
        self._jobs: queue.SimpleQueue | None = None

    def _helper(self) -> queue.SimpleQueue:
        if self._jobs is None:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(jobs,), name="llamacpp-decode", daemon=True).start()
            weakref.finalize(self, jobs.put, None)      # the helper ends with its owner
            self._jobs = jobs
        return self._jobs

    def decode(self, batch: TokenBatch, check: Callable[[], bool] | None) -> int:
        """llama_decode of ``batch`` (KvContext.decode's return codes; 2: ended by ``check``)."""
        self.ctx.clear_abort()
        if check is None:
            return self.ctx.decode(batch)
        box: list = []
        done = threading.Event()
        self._helper().put((self.ctx, batch, box, done))
        asked_at = None
        while not done.wait(self.poll_s):
            if asked_at is None and check():
                asked_at = time.perf_counter()
                self.ctx.request_abort()
        done.wait()
        rc = box[0]
        if isinstance(rc, BaseException):
            raise rc
        if rc == 2 and asked_at is not None:
            self.aborts += 1
            self.last_abort_latency_s = time.perf_counter() - asked_at
        return rc

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None
