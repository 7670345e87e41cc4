"""ProcessEngine: the engine in a process of its own, driven over a socket pair, one call at a time.

Why: a forward pass of a small model is mostly Python (module calls, op dispatch), so it needs the GIL, and in the
ROS server it shares the GIL with the node's threads (goal intake, feedback, the executors' clients). Serialised,
their Python work stretches every engine step, the more the longer they hold the GIL. A child process has its own
GIL, so the node's threads and the forward pass run on two cores.

The scheduler does not change: this is an Engine whose calls run in the child, in order, on the real engine
(transformers or vLLM, built there by make_engine). step() and the rare calls that return something wait for the
child's answer (the result, or its error raised here). add, suspend, resume and release only send: they return at
once, the child runs them before the next step, and an error there (a scheduler bug: the engine refuses an unknown
or suspended generation) is logged when the next answer brings it; add's own checks (a new id, a prompt, room for a
token) run here first, so those still raise at the call. So a step costs one round trip, not one per segment
boundary. What the scheduler asks for every step stays local: the tokenizer (pickled from the child once), the
engine's capabilities and model facts, the KV memory accounting as of the last answer (every answer carries it) and each generation's
prompt left to prefill (all of it when added, then as each step's answer says). Other calls (output_ids,
is_offloaded, held_bytes, ...) go to the child by name and wait.

The child ignores SIGINT and SIGTERM (the server decides when the engine stops: close()), and exits when its end
of the socket closes, also when the server is killed.

A child that dies (killed by the OOM killer, a crash in native code) takes every generation's state with it: from
then on release, suspend and resume have nothing left to act on and return, the memory accounting holds nothing,
and add, step and every call that waits raise an EngineError that names the child's exit and says what to do.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Sequence

from timely_llm_ros.core.engine import Engine, EngineError, MemoryStats, StepResult
from timely_llm_ros.engine.generation_table import check_new

log = logging.getLogger(__name__)
START_TIMEOUT_S = 600.0   # the child loads the model (vLLM may compile) before its first answer
_LOCAL_FACTS = ("capabilities", "eos_token_id", "bos_token_id", "max_context")   # read here, as the child's engine declares them


class ProcessEngine(Engine):
    """make_engine(kind, model_path, **options) in a child process (see the module docstring)."""

    def __init__(self, kind: str, model_path: str | None = None, **options: Any) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                                      env=env)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._lock = threading.Lock()
        self._closed = False
        self._death: EngineError | None = None   # set when the child is found gone; raised by every later call
        self._prefill_left: dict[str, int | None] = {}
        try:
            hello = self._call("make", kind, model_path, options, timeout=START_TIMEOUT_S)
        except BaseException:
            self._stop(kill=True)
            raise
        self.tokenizer = pickle.loads(hello["tokenizer"])
        for name in _LOCAL_FACTS:
            setattr(self, name, hello[name])
        # interrupt_check is a callable of this process: the child's engine cannot ask it, so no step ends early
        self.capabilities = dataclasses.replace(self.capabilities, interruptible=False, interrupt_granularity="step")
        self._memory: MemoryStats = hello["memory"]
        self.pid = self._proc.pid

    # ----- the tokenizer runs here -----
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def text_stream(self):
        table = getattr(self.tokenizer, "byte_table", None)   # byte-level BPE: incremental (as TransformersEngine)
        return table.stream() if table is not None else super().text_stream()

    # ----- generations: calls into the child -----
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        check_new(self._prefill_left, gen_id, prompt_ids, max_new_tokens)   # the child's own checks, here
        self._send("add", gen_id, list(prompt_ids), int(max_new_tokens),
                   None if forced_ids is None else list(forced_ids), grammar)
        self._prefill_left[gen_id] = len(prompt_ids) if self.capabilities.prefill_left else None

    def prepare_grammar(self, grammar: str) -> None:
        self._call("call", "prepare_grammar", grammar)

    def step(self, gen_ids: Sequence[str]) -> StepResult:
        (tokens, finished, prefilled, elapsed), left = self._call("step", list(gen_ids))
        self._prefill_left.update(left)
        return StepResult(tokens, set(finished), elapsed, prefilled)

    def suspend(self, gen_id: str) -> None:
        self._send("suspend", gen_id)

    def resume(self, gen_id: str) -> None:
        self._send("resume", gen_id)

    def release(self, gen_id: str) -> None:
        self._send("release", gen_id)
        self._prefill_left.pop(gen_id, None)

    def memory(self) -> MemoryStats:
        return self._memory

    def prefill_left(self, gen_id: str) -> int | None:
        return self._prefill_left.get(gen_id)

    def reload_s(self, gen_id: str) -> float:
        return self._call("reload_s", gen_id) if self.capabilities.reload else 0.0

    def describe(self) -> str:
        return self._call("call", "describe")

    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        if not self.capabilities.evict_prompt_kv:
            return super().evict_prompt_kv(gen_id, ratio)
        return self._call("evict_prompt_kv", gen_id, ratio)

    def set_prompt_tokens(self, gen_id: str, n: int, cached: int | None = None) -> None:
        if not self.capabilities.set_prompt_tokens:
            return super().set_prompt_tokens(gen_id, n, cached)
        self._send("set_prompt_tokens", gen_id, n, cached)

    def __getattr__(self, name: str):
        """Any other engine method (output_ids, is_offloaded, held_bytes, ...) runs in the child."""
        if name.startswith("_") or name in ("tokenizer", *_LOCAL_FACTS):
            raise AttributeError(name)
        return lambda *args: self._call("call", name, *args)

    # ----- lifecycle -----
    def close(self) -> None:
        """Free the model and end the child (joined; killed if it does not end within 10 s)."""
        if self._closed:
            return
        try:
            self._call("close", timeout=10.0)
        except EngineError:
            pass
        self._stop(kill=False)

    def _stop(self, kill: bool) -> None:
        self._closed = True
        try:
            self._conn.close()           # the child's recv ends: it exits
        except OSError:
            pass
        try:
            self._proc.wait(0.1 if kill else 10.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10.0)

    def _send(self, op: str, *args: Any) -> None:
        """A call without an answer (see the module docstring). With the child gone, only add raises: what release,
        suspend and resume would act on died with it."""
        with self._lock:
            self._check_open(op)
            try:
                if self._death is None:
                    self._conn.send((op, args, False))
                    return
            except (EOFError, OSError) as exc:
                self._gone(op, exc)
            if op == "add":
                raise self._death

    def _call(self, op: str, *args: Any, timeout: float | None = None) -> Any:
        with self._lock:
            self._check_open(op)
            if self._death is not None:
                raise self._death
            try:
                self._conn.send((op, args, True))
                if timeout is not None and not self._conn.poll(timeout):
                    raise EngineError(f"engine process did not answer {op} within {timeout:g} s")
                ok, value, memory, deferred = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise self._gone(op, exc) from None
        for message in deferred:
            log.error(f"engine process: {message} (the call returned before; the engine went on without it)")
        if memory is not None:
            self._memory = memory
        if not ok:
            kind, message = value
            raise (EngineError if kind == "EngineError" else RuntimeError)(message if kind == "EngineError"
                                                                            else f"{kind}: {message}")
        return value

    def failure(self) -> str | None:
        """The child's death, found by a call or now (a child that died between calls is reaped here, unless a
        call holds the pipe: that call finds it)."""
        if self._death is None and not self._closed and self._proc.poll() is not None \
                and self._lock.acquire(blocking=False):
            try:
                self._gone("a wait for work", EOFError("the process ended"))
            finally:
                self._lock.release()
        return None if self._death is None else str(self._death)

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise EngineError(f"engine process closed ({op} after close)")

    def _gone(self, op: str, exc: BaseException) -> EngineError:
        """The error of a call that found the child gone; the first one is kept (and logged) as the engine's death,
        and its generations' state is dropped."""
        if self._death is not None:
            return self._death
        try:
            code = self._proc.wait(1.0)    # its end of the socket closed as it died: reap it for its exit code
        except subprocess.TimeoutExpired:
            code = None
        state = f"exited with code {code}" if code is not None else "stopped answering"
        self._death = EngineError(f"engine process (pid {self._proc.pid}) {state} during {op} "
                                  f"({str(exc) or type(exc).__name__}); its generations are lost: restart the "
                                  "server, or take it through cleanup and configure, to start a new engine")
        log.error(str(self._death))
        self._prefill_left.clear()
        if hasattr(self, "_memory"):     # not yet during the child's start
            self._memory = dataclasses.replace(self._memory, kv_device_bytes=0.0, kv_host_bytes=0.0, generations=0)
        return self._death


# ----------------------------------------------------------------------------------------------- the child
def _serve(conn: Connection) -> None:
    """Answer calls until the parent closes its end or asks to close."""
    engine = None
    deferred: list[str] = []       # errors of calls nobody waits for, sent with the next answer
    settled: set[str] = set()      # generations whose prompt is prefilled: the owner knows they have none left
    while True:
        try:
            op, args, answered = conn.recv()
        except (EOFError, OSError):
            break
        try:
            value = _run(engine, op, args, settled)
            if op == "make":
                engine, value = value
            answer = (True, value, _memory(engine), deferred)
        except BaseException as exc:   # the parent raises it (or logs it); the child keeps serving
            if not answered:
                deferred.append(f"{op}{args[:1]} failed: {type(exc).__name__}: {exc}")
                continue
            answer = (False, (type(exc).__name__, str(exc)), _memory(engine), deferred)
        if not answered:
            continue
        deferred = []
        try:
            conn.send(answer)
        except (EOFError, OSError):
            break
        if op == "close":
            return
    if engine is not None:     # the parent went away without close()
        engine.close()


def _memory(engine: Engine | None) -> MemoryStats | None:
    return None if engine is None else engine.memory()


def _run(engine: Engine | None, op: str, args: tuple, settled: set[str]) -> Any:
    if op == "make":
        from timely_llm_ros.engine.factory import make_engine

        kind, model_path, options = args
        made = make_engine(kind, model_path, **options)
        return made, {"tokenizer": pickle.dumps(made.tokenizer), "memory": made.memory(),
                      "capabilities": made.capabilities, "eos_token_id": made.eos_token_id,
                      "bos_token_id": made.bos_token_id, "max_context": made.max_context}
    if engine is None:
        raise EngineError(f"engine process: {op} before the engine was made")
    if op == "step":      # plain tuples and only what changed: this answer is on every step's critical path
        ids = args[0]
        result = engine.step(ids)
        left = {g: engine.prefill_left(g) for g in ids if g not in settled}
        settled.update(g for g, n in left.items() if n == 0)
        return (result.tokens, list(result.finished), result.prefilled, result.elapsed_s), left
    if op == "release":
        settled.discard(args[0])
    if op == "close":
        engine.close()
        return None
    if op == "call":
        return getattr(engine, args[0])(*args[1:])
    return getattr(engine, op)(*args)


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    conn = Connection(int(sys.argv[1]))
    try:
        _serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
