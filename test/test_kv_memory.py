"""KV memory comes back as soon as generations end or are cancelled, without Python's cycle collector.

Runs the real embedded planner with the collector switched off: any reference cycle that holds a tensor
(as the slot store and its cache layers once did) keeps that tensor alive for the rest of the test.

Each measurement runs in a fresh process of its own (multiprocessing, spawn): resident memory and the tensors
reachable through the collector then belong to this test alone, whichever test files shared the pytest process
before it (one process, or a pytest-xdist worker), and the parent asserts on what the child measured.
"""
from __future__ import annotations

import gc
import multiprocessing
import resource
from typing import Callable

import pytest
import torch

from timely_llm_ros.engine.factory import make_engine
from timely_llm_ros.paths import default_model_dir

pytestmark = pytest.mark.skipif(not (default_model_dir() / "config.json").is_file(),
                                reason=f"needs the trained planner at {default_model_dir()}")

PROMPTS = ["look for the cat", "evade the bird", "check for keys or wallet", "clean the desk", "find the red ball",
           "a child is too close, avoid injuring them"]


def _tensor_bytes() -> int:
    """Bytes of every tensor storage still reachable or still waiting for the cycle collector."""
    seen, total = set(), 0
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage()
                pointer = storage.data_ptr()
            except RuntimeError:   # a tensor without memory of its own (a FakeTensor an earlier compile left)
                continue
            if pointer not in seen:
                seen.add(pointer)
                total += storage.nbytes()
    return total


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _step(engine, ids: list[str], live: set[str]) -> None:
    """One step of the live ids among `ids`; finished generations are released at once."""
    run = [g for g in ids if g in live]
    if run:
        for done in engine.step(run).finished:
            engine.release(done)
            live.discard(done)


def _cancel(engine, gen_id: str, live: set[str]) -> None:
    if gen_id in live:
        engine.release(gen_id)
        live.discard(gen_id)


def _round(engine, r: int) -> None:
    """Generation, suspension (with offload to host under a tiny budget), resume and cancel in one round."""
    ids = [f"r{r}-{i}" for i in range(len(PROMPTS))]
    for gen_id, task in zip(ids, PROMPTS):
        engine.add(gen_id, engine.encode(f"task: {task}\nplan:"), 40)
    live = set(ids)
    for _ in range(6):
        _step(engine, ids, live)
    suspended = [g for g in ids[:4] if g in live]
    for gen_id in suspended:
        engine.suspend(gen_id)            # over the budget: offloaded to host
    for _ in range(4):
        _step(engine, ids[4:], live)
    _cancel(engine, ids[0], live)         # cancelled while suspended (offloaded)
    _cancel(engine, ids[4], live)         # cancelled while running
    for gen_id in suspended:
        if gen_id in live:
            engine.resume(gen_id)
    for _ in range(60):
        if not live:
            break
        _step(engine, ids, live)
    for gen_id in list(live):             # cancelled near the end
        _cancel(engine, gen_id, live)


def _in_fresh_process(measure: Callable[[], dict]) -> dict:
    """What `measure` (a module-level function) returns, run in a new interpreter (spawn, not fork)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure)


def _measure_rounds() -> dict:
    """Tensor bytes and RSS after a warm-up round and after four more; the KV the engine holds after each."""
    torch.set_num_threads(1)
    engine = make_engine("transformers", None, device="cpu", dtype="float32", kv_budget_mb=0.05, num_threads=1)
    gc.collect()
    gc.disable()
    try:
        _round(engine, 0)                 # warm-up: allocator pools, lazily built model buffers
        base_tensors, base_rss = _tensor_bytes(), _rss_bytes()
        held = []
        for r in range(1, 5):
            _round(engine, r)
            held.append(engine.held_bytes())
        after_tensors, after_rss = _tensor_bytes(), _rss_bytes()
    finally:
        gc.enable()
    store_bytes = engine.kv_shape.bytes_per_token * 8 * 64
    engine.close()
    return {"base_tensors": base_tensors, "after_tensors": after_tensors, "base_rss": base_rss,
            "after_rss": after_rss, "held": held, "store_bytes": store_bytes}


def test_kv_returns_to_baseline_after_rounds_with_the_cycle_collector_off():
    m = _in_fresh_process(_measure_rounds)
    for r, held in enumerate(m["held"], start=1):
        assert held == {"device": 0, "host": 0}, f"round {r}: KV still held by the engine: {held}"
    # the store alone grows to several MiB per round; one leaked round would exceed this tolerance
    assert m["after_tensors"] - m["base_tensors"] < m["store_bytes"] / 4, m
    assert m["after_rss"] - m["base_rss"] < 32 * 2**20, m


def _measure_lazy_zeros() -> dict:
    """RSS growth (MiB) over a 2 GiB lazy_zeros tensor: made, 64 MiB of it written, freed (collector off)."""
    from timely_llm_ros.engine.transformers.kv_cache import lazy_zeros

    def rss() -> float:
        return _rss_bytes() / 2**20

    base = rss()
    t = lazy_zeros((512, 2**20), torch.float32)                       # 2 GiB of address space
    m = {"shape": tuple(t.shape), "sampled_sum": float(t[::64, ::4096].abs().sum()), "made": rss() - base}
    t[:16].fill_(1.0)                                                  # 64 MiB written
    m.update(written=rss() - base, last_written=float(t[15, -1]), first_unwritten=float(t[16, 0]))
    gc.disable()
    try:
        del t
        m["freed"] = rss() - base
    finally:
        gc.enable()
    return m


def test_lazy_zeros_costs_address_space_until_written_and_gives_memory_back_when_freed():
    """A 2 GiB lazy_zeros tensor (the CPU slot store's reservation) reads as zeros and adds almost nothing to
    resident memory; writing 64 MiB of it adds about that much; freeing it returns the memory (collector off)."""
    m = _in_fresh_process(_measure_lazy_zeros)
    assert m["shape"] == (512, 2**20) and m["sampled_sum"] == 0.0, m
    assert m["made"] < 64, m
    assert 56 < m["written"] < 128 and m["last_written"] == 1.0 and m["first_unwritten"] == 0.0, m
    assert m["freed"] < 16, m
