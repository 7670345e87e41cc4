"""ProcessEngine: the real engine in a child process gives the same tokens as in this one, reports its errors, and
never outlives its owner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.engine import EngineError  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.process_engine import ProcessEngine  # noqa: E402
from waiting import wait_until  # noqa: E402


def _script(engine) -> list:
    """Tokens of every step of a run that prefills two prompts of similar length together, suspends one
    mid-generation (KV kept), prefills a third beside the other, resumes, releases; plus memory accounting."""
    done: set[str] = set()
    out = []

    def step(ids):
        ids = [i for i in ids if i not in done]
        if ids:
            r = engine.step(ids)
            done.update(r.finished)
            out.append((sorted(r.tokens.items()), sorted(r.finished), sorted(r.prefilled)))
    drone = load_skill_sets()["drone"]
    a = engine.encode(drone.build_prompt("look for the cat", "cat, chair, table"))
    b = engine.encode(drone.build_prompt("look for the dog", "dog, tree, bench"))
    engine.add("a", a, 24)
    engine.add("b", b, 24)
    out.append((engine.prefill_left("a"), engine.prefill_left("b")))
    for _ in range(4):
        step(["a", "b"])
    out.append(engine.prefill_left("a"))
    engine.suspend("a")
    for _ in range(3):
        step(["b"])
    engine.add("c", a, 24)
    for _ in range(3):
        step(["b", "c"])
    engine.resume("a")
    for _ in range(8):
        step(["a", "b", "c"])
    out.append(engine.output_ids("a"))
    mem = engine.memory()
    out.append((mem.kv_device_bytes, mem.kv_host_bytes, mem.generations))
    engine.release("b")
    out.append(len(engine.output_ids("c")))     # an answered call: the memory it brings counts the release
    out.append(engine.memory().generations)
    return out


def _engine_args(config: str) -> tuple[str, str | None, dict]:
    """(kind, model path, options) of a configuration: the embedded planner, a tiny random model, SmolLM2's GGUF."""
    if config == "llamacpp":
        pytest.importorskip("llama_cpp")
        from timely_llm_ros.core.models import model_spec

        return "llamacpp", str(model_spec("smollm2").gguf.locate()), {}
    return "transformers", None, {} if config == "embedded" else {"random_config": "tiny"}


@pytest.mark.parametrize("config", ["embedded", "tiny", "llamacpp"])
def test_the_child_process_gives_the_same_tokens_and_accounting_as_the_engine_in_this_process(config):
    kind, path, kw = _engine_args(config)
    local = make_engine(kind, path, num_threads=1, **kw)
    remote = ProcessEngine(kind, path, num_threads=1, **kw)
    try:
        assert remote.pid != os.getpid()
        assert (remote.eos_token_id, remote.max_context) == (local.eos_token_id, local.max_context)
        expected = _script(local)
        steps = [e for e in expected if isinstance(e, tuple) and len(e) == 3 and isinstance(e[0], list)]
        assert sum(len(tokens) for tokens, _, _ in steps) > 10     # the run generated something to compare
        assert _script(remote) == expected
    finally:
        remote.close()
        local.close()
    assert remote._proc.returncode == 0


def test_an_engine_error_in_the_child_is_raised_here_and_the_child_keeps_serving(caplog):
    engine = ProcessEngine("transformers", None, num_threads=1, random_config="tiny")
    try:
        with pytest.raises(EngineError, match="zzz"):
            engine.step(["zzz"])
        engine.add("a", engine.encode("look for the cat"), 3)
        with pytest.raises(EngineError, match="already exists"):    # add's own checks raise at the call
            engine.add("a", [1, 2], 3)
        engine.suspend("nobody")                                      # sent, not answered: no error yet
        with caplog.at_level("ERROR", logger="timely_llm_ros.engine.process_engine"):
            assert engine.step(["a"]).tokens.keys() == {"a"}
        assert any("suspend('nobody',) failed: EngineError" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        engine.close()


def test_a_child_that_dies_is_an_engine_error_naming_its_exit_and_close_still_returns():
    """What died with the child (its generations) cannot be released, suspended or resumed: those return, so a
    scheduler can end the generation's request; a call that needs the engine says what happened and what to do."""
    engine = ProcessEngine("transformers", None, num_threads=1, random_config="tiny")
    engine.add("a", [1, 2, 3], 4)
    engine.step(["a"])
    assert engine.memory().generations == 1
    engine._proc.kill()
    engine._proc.wait(10)
    with pytest.raises(EngineError, match="exited with code -9 during step .*restart the server"):
        engine.step(["a"])
    engine.suspend("a")
    engine.resume("a")
    engine.release("a")
    assert engine.memory().generations == 0 and engine.memory().kv_device_bytes == 0
    with pytest.raises(EngineError, match="exited with code -9 during step"):   # the first call that found it
        engine.add("b", [1, 2, 3], 2)
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.add("b", [1, 2, 3], 2)


def test_a_child_that_dies_between_calls_is_reported_by_failure_without_a_call():
    """The server's /diagnostics asks failure() every state period: an engine whose child died while nothing was
    asked of it says so then (exit code and what to do), and the next call raises the same."""
    engine = ProcessEngine("transformers", None, num_threads=1, random_config="tiny")
    try:
        assert engine.failure() is None
        engine._proc.kill()
        engine._proc.wait(10)
        failure = engine.failure()
        assert failure is not None and "exited with code -9 during a wait for work" in failure, failure
        assert "restart the server" in failure
        with pytest.raises(EngineError, match="exited with code -9 during a wait for work"):
            engine.add("a", [1, 2, 3], 2)
    finally:
        engine.close()


def test_a_bad_engine_kind_fails_at_construction_with_the_factorys_reason_and_leaves_no_process():
    before = _children()
    with pytest.raises(RuntimeError, match="unknown engine kind 'nope'"):
        ProcessEngine("nope")
    assert _children() == before


def test_the_child_exits_when_its_owner_is_killed_without_closing_it():
    """SIGKILL of the server: its end of the socket closes, the child's wait for the next call ends."""
    code = ("import os, sys; from timely_llm_ros.engine.process_engine import ProcessEngine; "
            "e = ProcessEngine('transformers', None, num_threads=1, random_config='tiny'); "
            "print(e.pid, flush=True); os._exit(0)")
    owner = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = int(owner.stdout.split()[-1])
    wait_until(lambda: not _alive(child), 20, f"engine process {child} outlived its owner", 0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _children() -> set[int]:
    """This process's live child processes (/proc/<pid>/task/*/children, as make stress reads them)."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return {pid for pid in out if _alive(pid)}


def test_the_owner_never_loads_torch():
    """The server's process keeps only the tokenizer (unpickled from the child): torch stays in the child."""
    code = ("import sys\n"
            "from timely_llm_ros.core.skills import load_skill_sets\n"
            "from timely_llm_ros.engine.process_engine import ProcessEngine\n"
            "e = ProcessEngine('transformers', None, num_threads=1)\n"
            "ids = e.encode(load_skill_sets()['drone'].build_prompt('look for the cat', 'cat'))\n"
            "e.add('a', ids, 8)\n"
            "print(e.decode(e.step(['a']).tokens.values()) is not None, 'torch' in sys.modules)\n"
            "e.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0 and out.stdout.split() == ["True", "False"], out.stderr[-2000:]
