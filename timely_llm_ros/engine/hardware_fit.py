"""Measure the loaded engine at configure for the hardware fit (core/fit.py derives from what this measures).

Through the Engine interface only (any engine: transformers, vLLM, in a child process), on real prompts: for each
robot type, requests of its worked examples (scene and task) through the model's prompt format, after its system
prompt is cached (the server's warm-up runs first), each forced to emit its example plan's tokens so that every
step is a real forward of a realistic length; the first step is the request's prefill (its first token included),
the next ones batch-1 decode steps. Then copies of the longest of those prompts decode together at a few batch
sizes (their prompts are cached whole by then, so adding them costs about a token each). Medians of wall-clock step
times (StepResult.elapsed_s). About a second per robot type on SmolLM2 on one CPU thread, milliseconds on the
embedded planner.
"""
from __future__ import annotations

import statistics
import time
from typing import Mapping, Sequence

from ..core.fit import ClassCheck, HardwareFit, Measurements, TypeTiming, check_classes, derive, plan_shapes
from ..core.prompting import PromptEncoder
from ..core.skills.skill_set import SkillSet
from ..core.tuf import TimeUtility
from .base import Engine

BATCHES = (4,)           # decode batch sizes measured beside batch 1 (the server: its max_batch, at most 8)
REQUESTS = 2            # worked examples prefilled per robot type (distinct requests: each prompt is cached whole)
DECODE_STEPS = 3        # timed decode steps per measurement
_ID = "__hardware_fit__"


def _forced(engine: Engine, plan: str, tokens: int) -> list[int]:
    """The plan's tokens repeated to at least ``tokens`` (what a step computes does not depend on their values)."""
    ids = engine.encode(plan) or [0]
    return (ids * (tokens // len(ids) + 1))[:tokens]


def _steps(engine: Engine, gen_ids: Sequence[str], n: int) -> list[float]:
    return [engine.step(list(gen_ids)).elapsed_s for _ in range(n)]


def _measure_type(engine: Engine, skill_set: SkillSet, prompts: PromptEncoder,
                  decode_steps: int) -> tuple[TypeTiming, list[int], str]:
    """One robot type's timing; also the longest prompt measured and a plan text to force (for the batch sizes)."""
    examples = list(skill_set.examples[:REQUESTS]) or [None]
    prefills, decodes, prompt, suffix, plan = [], [], [], [], "ok"
    shared = prompts.shared_tokens(skill_set)
    for i, ex in enumerate(examples):
        task, scene = (ex.task, ex.scene) if ex is not None else ("report what you see", "")
        plan = ex.plan if ex is not None else plan
        ids = prompts(skill_set, task, scene)
        gen = f"{_ID}{skill_set.name}_{i}"
        steps = decode_steps + 1 if i == 0 else 0     # the first decode step after a prefill settles its row
        engine.add(gen, ids, steps + 2, forced_ids=_forced(engine, plan, steps + 2))
        try:
            left = engine.prefill_left(gen)
            suffix.append(left if left is not None else max(len(ids) - shared, 1))
            prefills.append(engine.step([gen]).elapsed_s)
            decodes += _steps(engine, [gen], steps)[1:]
        finally:
            engine.release(gen)
        prompt = ids if len(ids) > len(prompt) else prompt
    timing = TypeTiming(prompt_tokens=len(prompt), suffix_tokens=round(statistics.median(suffix)),
                        prefill_s=statistics.median(prefills), decode_s=statistics.median(decodes),
                        plans=tuple(plan_shapes(skill_set, engine.encode)),
                        max_segment_tokens=skill_set.max_segment_tokens)
    return timing, prompt, plan


def measure(engine: Engine, skill_sets: Mapping[str, SkillSet], prompts: PromptEncoder,
            batches: Sequence[int] = BATCHES, decode_steps: int = DECODE_STEPS) -> Measurements:
    """Measure every robot type, then the decode step at ``batches`` at the longest prompt's context (the
    robot types' system prompts must be cached already: the server's warm-up)."""
    t0 = time.monotonic()
    types: dict[str, TypeTiming] = {}
    longest: tuple[str, list[int], str] = ("", [], "ok")
    for name, skill_set in skill_sets.items():
        types[name], prompt, plan = _measure_type(engine, skill_set, prompts, decode_steps)
        if len(prompt) > len(longest[1]):
            longest = (name, prompt, plan)
    name, prompt, plan = longest
    batch_decode = {1: types[name].decode_s}
    largest = max(batches, default=1)
    gens = [f"{_ID}batch_{i}" for i in range(largest)]
    steps = 1 + decode_steps     # per batch size: one to settle the rows, then the timed ones
    for gen in gens:
        engine.add(gen, prompt, steps * len(batches) + 2, forced_ids=_forced(engine, plan, steps * len(batches) + 2))
    try:
        _steps(engine, gens, 1)          # its measurement cached the prompt whole: each copy adds about a token
        for b in sorted(batches):
            chosen = gens[:b]
            for gen in gens[b:]:
                engine.suspend(gen)
            _steps(engine, chosen, 1)
            batch_decode[b] = statistics.median(_steps(engine, chosen, decode_steps))
            for gen in gens[b:]:
                engine.resume(gen)
    finally:
        for gen in gens:
            engine.release(gen)
    return Measurements(types=types, batch_decode_s=batch_decode, seconds=time.monotonic() - t0,
                        engine=type(engine).__name__)


def fit_engine(engine: Engine, skill_sets: Mapping[str, SkillSet], prompts: PromptEncoder,
               classes: Mapping[str, TimeUtility], network_delay_s: float, max_batch: int,
               scale_factor: float = 0.0) -> tuple[HardwareFit, ClassCheck]:
    """Measure the engine (batch sizes up to max_batch, at most 8), derive the fit, check the urgency classes."""
    batches = (min(max_batch, 8),) if max_batch > 1 else ()
    fit = derive(measure(engine, skill_sets, prompts, batches))
    return fit, check_classes(classes, fit, network_delay_s, scale_factor)
