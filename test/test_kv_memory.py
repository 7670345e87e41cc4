"""KV memory comes back as soon as generations end or are cancelled, without Python's cycle collector.

Runs the real embedded planner with the collector switched off: any reference cycle that holds a tensor
(as the slot store and its cache layers once did) keeps that tensor alive for the rest of the test.
"""
from __future__ import annotations

import gc
import resource

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


def test_kv_returns_to_baseline_after_rounds_with_the_cycle_collector_off():
    engine = make_engine("transformers", None, device="cpu", dtype="float32", kv_budget_mb=0.05, num_threads=1)
    gc.collect()
    gc.disable()
    try:
        _round(engine, 0)                 # warm-up: allocator pools, lazily built model buffers
        base_tensors, base_rss = _tensor_bytes(), _rss_bytes()
        peak_tensors = 0
        for r in range(1, 5):
            _round(engine, r)
            peak_tensors = max(peak_tensors, _tensor_bytes())
            assert engine.held_bytes() == {"device": 0, "host": 0}, f"round {r}: KV still held by the engine"
        after_tensors, after_rss = _tensor_bytes(), _rss_bytes()
    finally:
        gc.enable()
    # the store alone grows to several MiB per round; one leaked round would exceed this tolerance
    store_bytes = engine.kv_shape.bytes_per_token * 8 * 64
    assert after_tensors - base_tensors < store_bytes / 4, (base_tensors, after_tensors)
    assert after_rss - base_rss < 32 * 2**20, (base_rss, after_rss)
    engine.close()


def test_lazy_zeros_costs_address_space_until_written_and_gives_memory_back_when_freed():
    """A 2 GiB lazy_zeros tensor (the CPU slot store's reservation) reads as zeros and adds almost nothing to
    resident memory; writing 64 MiB of it adds about that much; freeing it returns the memory (collector off)."""
    from timely_llm_ros.engine.transformers.kv_cache import lazy_zeros

    def rss() -> float:
        return _rss_bytes() / 2**20

    base = rss()
    t = lazy_zeros((512, 2**20), torch.float32)                       # 2 GiB of address space
    assert t.shape == (512, 2**20) and float(t[::64, ::4096].abs().sum()) == 0.0
    assert rss() - base < 64
    t[:16].fill_(1.0)                                                  # 64 MiB written
    assert 56 < rss() - base < 128 and float(t[15, -1]) == 1.0 and float(t[16, 0]) == 0.0
    gc.disable()
    try:
        del t
        assert rss() - base < 16
    finally:
        gc.enable()
