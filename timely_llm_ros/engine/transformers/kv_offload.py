"""The device KV budget of the transformers engine: accounting, and suspended generations' KV moved to host memory.

``memory_stats`` counts KV logically (tokens of context x bytes per token, device vs host); ``held_bytes`` what the
tensors physically hold (the store, the prefix cache, generations' own tensors). When device KV exceeds the budget,
suspended generations' KV goes to host memory, least recently suspended first (pinned host memory on cuda; a resident
row is copied straight to host); ``reload`` brings it back on resume.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

from timely_llm_ros.core.engine import MemoryStats
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.transformers.prefix_cache import PrefixCache
from timely_llm_ros.engine.transformers.slot_rows import SlotRows


def memory_stats(gens: Iterable[GenerationState], bytes_per_token: int, budget_bytes: float) -> MemoryStats:
    """KV of prefilled generations on the device and of offloaded ones on the host, by tokens of context."""
    device = host = 0
    count = 0
    for gen in gens:
        count += 1
        if gen.offloaded:
            host += gen.kv_len * bytes_per_token
        elif gen.prefilled:
            device += gen.kv_len * bytes_per_token
    return MemoryStats(float(device), float(host), budget_bytes, float(bytes_per_token), count)


def held_bytes(gens: Iterable[GenerationState], rows: SlotRows, prefix_cache: PrefixCache | None) -> dict[str, int]:
    """Bytes physically held by KV tensors (the store and the prefix cache included), by location."""
    held = {"device": rows.nbytes(), "host": 0}
    if prefix_cache is not None:
        held["device"] += prefix_cache.nbytes()
    for gen in gens:
        if gen.kv is not None:
            held["host" if gen.offloaded else "device"] += gen.kv.untyped_storage().nbytes()
    return held


def offload_over_budget(gens: Iterable[GenerationState], rows: SlotRows, bytes_per_token: int,
                        budget_bytes: float, pin: bool) -> None:
    """Offload suspended generations' KV to host, least recently suspended first, until under budget."""
    if math.isinf(budget_bytes):
        return
    gens = list(gens)
    used = memory_stats(gens, bytes_per_token, budget_bytes).kv_device_bytes
    if used <= budget_bytes:
        return
    victims = sorted((g for g in gens if g.suspended and g.prefilled and not g.offloaded),
                     key=lambda g: g.suspended_seq)
    with torch.inference_mode():
        for gen in victims:
            if used <= budget_bytes:
                break
            offload(gen, rows, pin)
            used -= gen.kv_len * bytes_per_token


def offload(gen: GenerationState, rows: SlotRows, pin: bool) -> None:
    """Move a generation's KV to host memory, from its store row or its own device tensor."""
    if gen.row is not None:
        rows.clone_out(gen, to_host=True, pin=pin)
        return
    host = torch.empty(gen.kv.shape, dtype=gen.kv.dtype, device="cpu", pin_memory=pin)
    host.copy_(gen.kv, non_blocking=pin)
    gen.kv, gen.offloaded = host, True


def reload(gen: GenerationState, device: torch.device) -> None:
    """Bring an offloaded generation's KV back to the device (asynchronously from pinned memory); it rejoins a
    store row at its next decode."""
    with torch.inference_mode():
        gen.kv, gen.offloaded = gen.kv.to(device, non_blocking=True), False
