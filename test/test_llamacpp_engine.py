"""The llamacpp engine on the real SmolLM2-135M-Instruct GGUF (Q4_1, as stored): batching, suspension, the shared
system prompt, the KV pool's budget, release, interrupts, grammar masks, and GGUF files it must refuse."""
from __future__ import annotations

import functools
import random

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from timely_llm_ros.core.engine import EngineError  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.grammar import plan_grammar  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.llamacpp.engine import LlamaCppEngine  # noqa: E402
from timely_llm_ros.engine.llamacpp.native import GgufModel  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402

SKILLS = load_skill_sets()


@functools.lru_cache(maxsize=1)
def kv_bytes_per_token() -> int:
    model = GgufModel(SPEC.gguf.locate())
    try:
        return model.kv_bytes_per_token()
    finally:
        model.close()


SPEC = model_spec("smollm2-base")
TASKS = [("drone", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
         ("arm", "stack the red block on the blue block", "table: green block, red block, blue block"),
         ("drone", "find a toy under the bed", "room: bedroom; objects: bed, chair, cup"),
         ("arm", "sort the fruits", "table: apple, carrot")]


def engine(context_tokens: int = 1024, sequences: int = 5, **kw) -> LlamaCppEngine:
    """SmolLM2's GGUF on one thread; a pool of ``sequences`` sequences of ``context_tokens`` tokens (the chat prompts
    are 820-900)."""
    return make_engine("llamacpp", str(SPEC.gguf.locate()), num_threads=1, llamacpp_context_tokens=context_tokens,
                       kv_budget_mb=sequences * context_tokens * kv_bytes_per_token() / 2**20, **kw)


@pytest.fixture(scope="module")
def prompts():
    """The chat prompts of TASKS (system prompt with the skills and worked examples, then the task)."""
    e = engine()
    try:
        setup = model_setup(SPEC, e, SKILLS)
        yield [setup.prompts(SKILLS[robot], task, scene) for robot, task, scene in TASKS]
    finally:
        e.close()


def run_alone(e: LlamaCppEngine, gid: str, ids: list[int], max_new: int, grammar: str | None = None) -> list[int]:
    e.add(gid, ids, max_new, grammar=grammar)
    while gid not in e.step([gid]).finished:
        pass
    out = e.output_ids(gid)
    e.release(gid)
    return out


@pytest.fixture(scope="module")
def alone(prompts):
    """Each prompt's greedy output run alone on a fresh engine without a prefix cache (the reference)."""
    e = engine()
    try:
        yield [run_alone(e, f"ref{i}", p, 24) for i, p in enumerate(prompts)]
    finally:
        e.close()


def _decode_rounds(schedule: list[list[int]] | None, prompts, suspend: bool, rng=None, sequences: int = 5):
    """Each prompt prefilled in a step of its own, then decode steps over the chosen generations: ``schedule``'s
    sets in turn (then all that are left), or random ones drawn from ``rng`` (and returned as the schedule). With
    ``suspend`` a generation left out of a step is suspended and one back in is resumed; without, it only sits the
    step out. A pool of fewer ``sequences`` than prompts sends suspended generations to host memory and back.
    Returns (outputs in prompt order, the schedule ran, suspensions, generations found in host memory)."""
    e = engine(sequences=sequences)
    keys = list(range(len(prompts)))
    offloaded = 0
    for k in keys:
        e.add(str(k), prompts[k], 24)
        e.step([str(k)])
        if suspend:
            e.suspend(str(k))
    done: dict[int, list[int]] = {}
    ran: list[list[int]] = []
    suspended = 0
    while len(done) < len(keys):
        live = [k for k in keys if k not in done]
        if schedule is None:
            chosen = ([k for k in live if rng.random() < 0.6] or live[:1])[:sequences]
        else:
            chosen = [k for k in schedule[len(ran)] if k in live] if len(ran) < len(schedule) else live
        ran.append(chosen)
        if not chosen:
            continue
        if suspend:
            for k in live:
                if k not in chosen:
                    e.suspend(str(k))
                    suspended += 1
            for k in chosen:
                offloaded += e.is_offloaded(str(k))
                e.resume(str(k))
        for k in e.step([str(k) for k in chosen]).finished:
            done[int(k)] = e.output_ids(k)
            e.release(k)
    e.close()
    return [done[k] for k in keys], ran, suspended, offloaded


def test_suspension_changes_no_token(prompts, alone):
    """One generation a step, the others suspended (in a pool of two sequences, so most of them wait in host
    memory), gives each its output alone, token for token; and random batches with suspensions (a pool of three)
    give the very tokens of the same batches without them (a pool holding all four). (Which generations share a step
    can change llama.cpp's last bits, bare llama-cpp-python's too: benchmarks/engine_llamacpp.py counts how often a
    greedy output changes with it, so outputs of random batches are compared with the same batches, not alone.)"""
    one_at_a_time = [[k] for _ in range(24) for k in range(len(prompts))]
    outputs, _, suspended, offloaded = _decode_rounds(one_at_a_time, prompts, suspend=True, sequences=2)
    assert suspended >= 24 and offloaded >= 24 and outputs == alone     # most resumes come back from host memory
    with_suspensions, schedule, suspended, offloaded = _decode_rounds(None, prompts, suspend=True,
                                                                      rng=random.Random(5), sequences=3)
    assert suspended >= 5 and offloaded >= 1
    without, _, _, _ = _decode_rounds(schedule, prompts, suspend=False)
    assert with_suspensions == without


def test_a_step_feeds_llama_cpp_its_sequences_in_order_and_new_ones_take_the_lowest_free_sequence(prompts):
    """With a stream per sequence, llama.cpp puts only a run of consecutive, increasing sequence ids into one
    micro-batch: whatever order the scheduler names the generations in, the step's tokens go in sequence order, and
    sequences freed in any order are handed out lowest first, so that the running ones stay one run."""
    e = engine(sequences=5)
    ids = ["a", "b", "c", "d"]
    for gid in ids:
        e.add(gid, prompts[0][:24], 8)
    e.step(ids)
    for gid in ("a", "c"):                      # sequences 0 and 2 come free, 2 last
        e.release(gid)
    e.add("x", prompts[1][:24], 8)
    e.step(["x"])
    assert e._gens["x"].seq == 0
    e.add("y", prompts[1][:24], 8)
    e.step(["y"])
    assert e._gens["y"].seq == 2
    e.step(["y", "d", "x", "b"])                # named out of sequence order
    assert list(e._batch.seq[:e._batch.n]) == [0, 1, 2, 3]
    e.close()


def test_resume_decodes_one_token_and_prefills_nothing(prompts):
    e = engine()
    e.add("g", prompts[0], 12)
    e.step(["g"])
    e.step(["g"])
    e.suspend("g")
    e.add("o", prompts[1], 4)
    e.step(["o"])
    e.resume("g")
    assert e.prefill_left("g") == 0
    e.step(["g"])
    assert e.last_step_tokens == 1
    e.close()


def test_each_robot_types_system_prompt_is_prefilled_once_and_reused_token_exact(prompts, alone):
    """A prompt that loads its robot type's cached prefix runs only the rest, and gives the very tokens of the same
    prompt prefilled without a cache in two steps split where the cached prefix ends. (Against one whole-prompt
    prefill, llama.cpp's KV differs in its last bits when a prompt is split into other micro-batches, which can
    flip a greedy near-tie; docs/engine.md.)"""
    e = engine(prefix_cache_mb=64)
    setup = model_setup(SPEC, e, SKILLS)
    shared = setup.prompts.shared_tokens(SKILLS["drone"])
    assert shared > 100
    run_alone(e, "first", prompts[0], 24)                 # the first drone request prefills its whole prompt
    e.add("second", prompts[2], 24)
    left = e.prefill_left("second")
    assert left <= len(prompts[2]) - shared
    e.step(["second"])
    assert e.last_step_tokens == left                     # only the part after the cached prefix ran
    while "second" not in e.step(["second"]).finished:
        pass
    cached = e.output_ids("second")
    again = run_alone(e, "again", prompts[0], 24)        # the same prompt again: all but its last token reused
    assert e.prefix_cache.reused_tokens == (len(prompts[2]) - left) + (len(prompts[0]) - 1)
    e.close()
    split = engine()
    for ids, reused, out in ((prompts[2], len(prompts[2]) - left, cached), (prompts[0], len(prompts[0]) - 1, again)):
        split.step_token_budget = reused                  # the first step prefills what the cache held
        assert out == run_alone(split, "split", ids, 24)
    split.close()


def test_release_gives_the_sequence_and_its_memory_back(prompts):
    e = engine(sequences=2)
    assert e.ctx.n_seq_max == 2
    for i, p in enumerate(prompts[:2]):
        e.add(str(i), p, 6)
    e.step(["0", "1"])
    assert e.memory().kv_device_bytes == (len(prompts[0]) + len(prompts[1])) * e.kv_bytes_per_token
    e.release("0")
    e.release("1")
    assert e.memory().kv_device_bytes == 0 and e.memory().generations == 0
    e.add("a", prompts[2], 2)          # both sequences are free again: two new prompts run side by side
    e.add("b", prompts[3], 2)
    assert set(e.step(["a", "b"]).tokens) == {"a", "b"}
    e.close()


def test_suspended_generations_move_to_host_memory_when_no_sequence_is_free_and_come_back_token_exact(prompts, alone):
    """A pool of two sequences and four generations: each new prompt pushes the least recently suspended generation
    out to host memory, and each comes back on resume with its output unchanged."""
    e = engine(sequences=2)
    for i, p in enumerate(prompts):
        e.add(str(i), p, 24)
        e.step([str(i)])
        e.suspend(str(i))
    assert [e.is_offloaded(str(i)) for i in range(4)] == [True, True, False, False]
    assert e.memory().kv_host_bytes > 0 and e.reload_s("0") > 0
    outs = {}
    for i in range(len(prompts)):
        e.resume(str(i))
        assert not e.is_offloaded(str(i))
        while str(i) not in e.step([str(i)]).finished:
            pass
        outs[i] = e.output_ids(str(i))
        e.release(str(i))
    assert [outs[i] for i in range(len(prompts))] == alone
    e.close()


def test_more_running_generations_than_sequences_fail_with_an_error_that_says_what_to_raise(prompts):
    e = engine(sequences=2)
    for i in range(3):
        e.add(str(i), prompts[i], 8)
    with pytest.raises(EngineError, match="KV budget exhausted.*raise kv_budget_mb"):
        e.step(["0", "1", "2"])
    e.close()


def test_an_interrupt_ends_the_decode_in_flight_and_leaves_every_generation_as_before(prompts, alone):
    """interrupt_check turns true during a long prefill beside a decoding generation: the step ends early with no
    token, and both generations then give their outputs alone, token for token."""
    e = engine(context_tokens=4096, sequences=2)
    e.add("d", prompts[0], 24)
    e.step(["d"])
    e.add("p", prompts[1] * 4, 24)             # a prompt long enough for several polls
    polls = []

    def check() -> bool:
        polls.append(1)
        return len(polls) >= 2
    e.interrupt_check = check
    res = e.step(["d", "p"])
    e.interrupt_check = None
    assert res.interrupted and res.tokens == {} and e.runner.aborts == 1
    assert e.prefill_left("p") == len(prompts[1]) * 4 and e._gens["d"].kv_len == len(prompts[0])
    e.release("p")
    while "d" not in e.step(["d"]).finished:
        pass
    assert e.output_ids("d") == alone[0]
    e.close()


def test_constrained_rows_get_their_grammar_and_unconstrained_rows_their_own_output(prompts, alone):
    from timely_llm_ros.core.skills.minispec import parse

    e = engine()
    drone = SKILLS["drone"]
    e.add("free", prompts[1], 24)
    e.add("plan", prompts[0], 48, grammar=plan_grammar(drone))
    done = set()
    while len(done) < 2:
        done |= e.step([g for g in ("free", "plan") if g not in done]).finished
    text = e.decode(e.output_ids("plan"))
    assert not parse(text, drone.skills, drone.statement_forms).problems, text
    assert e.output_ids("free") == alone[1]
    e.close()


def test_a_gguf_of_an_architecture_llama_cpp_does_not_know_fails_naming_the_file_and_the_architecture(tmp_path):
    import gguf

    path = tmp_path / "mystery.gguf"
    writer = gguf.GGUFWriter(str(path), "mysterynet")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(EngineError) as err:
        make_engine("llamacpp", str(path))
    assert str(path) in str(err.value) and "'mysterynet'" in str(err.value), err.value


def test_a_model_folder_is_not_a_gguf_file_and_says_which_engines_serve_it():
    from timely_llm_ros.paths import default_model_dir

    with pytest.raises(ValueError, match="serves GGUF files.*transformers or vllm"):
        make_engine("llamacpp", str(default_model_dir()))


def test_the_hardware_fits_second_measurement_prefills_requests_the_first_did_not_cache():
    """A second measurement (a class looked unmet on the first) must time real request prefills, not the whole
    prompts the first left in the prefix cache (engine/hardware_fit.py, again=True)."""
    from timely_llm_ros.engine.hardware_fit import measure
    from timely_llm_ros.stack import warm_up

    e = engine(prefix_cache_mb=64)
    try:
        setup = model_setup(SPEC, e, SKILLS)
        for prompt in setup.warm_up_prompts():
            warm_up(e, prompt)
        drone = {"drone": SKILLS["drone"]}
        first = measure(e, drone, setup.prompts, ())
        second = measure(e, drone, setup.prompts, (), again=True)
        assert first.types["drone"].suffix_tokens > 10
        assert second.types["drone"].suffix_tokens >= 0.5 * first.types["drone"].suffix_tokens, (first, second)
    finally:
        e.close()
