"""Measure the loaded engine at configure for the hardware fit (core/fit.py derives from what this measures).

Through the Engine interface only (any engine: transformers, vLLM, in a child process), on real prompts: for each
robot type, requests of its worked examples (scene and task) through the model's prompt format, after its system
prompt is cached (the server's warm-up runs first), each forced to emit its example plan's tokens so that every
step is a real forward of a realistic length; a request's first step is its prefill (its first token included),
the first request's next ones batch-1 decode steps. Then the requests measured decode together at the server's
max_batch (their prompts are cached whole by then, so adding them again costs about a token each).

The fastest of each kind of step counts (StepResult.elapsed_s, wall clock): what the engine does when it has the
machine, which is what "can this class be met at all" asks; other work on a shared machine at configure (a fleet
starting beside the server) only adds, and the scheduler measures the steps it runs from then on. Each kind is
sampled at least 3 times and more while cheap (up to 12 within 0.15 s), so a fast engine, whose margins are read
from a few milliseconds, is sampled most. About a second per robot type on SmolLM2 on one CPU thread, 0.1-0.2 s in
all on the embedded planner. When an urgency class looks unmet, everything is measured once more and the faster of
each kind of step of the two counts (fit_engine).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from timely_llm_ros.core.fit import ClassCheck, HardwareFit, Measurements, TypeTiming, check_classes, derive, plan_shapes
from timely_llm_ros.core.prompting import PromptEncoder
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.core.engine import Engine, EngineError

BATCHES = (4,)           # decode batch sizes measured beside batch 1 (the server: its max_batch, at most 8)
LEAST, MOST = 3, 12      # samples of each kind of step: at least LEAST, more while they take under BUDGET_S in all
BUDGET_S = 0.15          # (a fast engine is sampled more: its margins are read from fewer milliseconds)
_ID = "__hardware_fit__"


def _forced(engine: Engine, plan: str, tokens: int) -> list[int]:
    """The plan's tokens repeated to at least ``tokens`` (what a step computes does not depend on their values)."""
    ids = engine.encode(plan) or [0]
    return (ids * (tokens // len(ids) + 1))[:tokens]


def _add(engine: Engine, gen: str, prompt: Sequence[int], plan: str, tokens: int) -> None:
    """Add a measuring request: forced to emit ``tokens`` tokens of its plan where the engine replays forced ids;
    elsewhere (vLLM) it generates freely, capped at ``tokens``, and may finish earlier (at its EOS)."""
    forced = _forced(engine, plan, tokens) if engine.capabilities.replays_forced_ids else None
    engine.add(gen, prompt, tokens, forced_ids=forced)


def _sampled(step: Callable[[int], float | None], most: int = MOST) -> list[float]:
    """Seconds of ``step(i)`` for i = 0, 1, ...: at least LEAST (or ``most`` if fewer), at most ``most``, and no
    more once they took BUDGET_S in all or ``step`` returned None (nothing left to step)."""
    times: list[float] = []
    while len(times) < most and (len(times) < LEAST or sum(times) < BUDGET_S):
        seconds = step(len(times))
        if seconds is None:
            break
        times.append(seconds)
    return times


def _stepper(engine: Engine, gens: Sequence[str]) -> Callable[[int], float | None]:
    """Steps of ``gens`` together, timed; None once one of them has finished (a freely generating request)."""
    finished = False

    def step(_: int) -> float | None:
        nonlocal finished
        if finished:
            return None
        result = engine.step(gens)
        finished = bool(result.finished.intersection(gens))
        return result.elapsed_s
    return step


def _measure_type(engine: Engine, skill_set: SkillSet, prompts: PromptEncoder,
                  again: bool = False) -> tuple[TypeTiming, list[tuple[list[int], str]]]:
    """One robot type's timing; also the requests it prefilled, with a plan text to force (for the batch sizes).
    ``again``: the requests' own tokens (after the shared system prompt) reversed, so that a second measurement
    prefills as many tokens as the first, none of them cached by it (what a step computes does not depend on the
    tokens' values)."""
    examples = [(ex.task, ex.scene, ex.plan) for ex in skill_set.examples] or [("report what you see", "", "ok")]
    shared = prompts.shared_tokens(skill_set)
    requests = [(prompts(skill_set, task, scene), plan) for task, scene, plan in examples]
    if again:
        requests = [(ids[:shared] + ids[shared:][::-1], plan) for ids, plan in requests]
    prefills: list[tuple[float, int, int]] = []   # (seconds, tokens prefilled, prompt tokens) per request
    decodes: list[float] = []

    def prefill(i: int) -> float:   # distinct requests: a prompt measured is cached whole
        ids, plan = requests[i]
        gen = f"{_ID}{skill_set.name}_{i}"
        steps = MOST + 2 if not decodes else 1
        _add(engine, gen, ids, plan, steps)
        try:
            left = engine.prefill_left(gen)
            first = engine.step([gen])
            prefills.append((first.elapsed_s, left if left is not None else max(len(ids) - shared, 1), len(ids)))
            # batch-1 decode steps at its context, on the first request that goes on (the first step after a prefill
            # settles its row)
            if not decodes and gen not in first.finished and gen not in engine.step([gen]).finished:
                decodes.extend(_sampled(_stepper(engine, [gen])))
        finally:
            engine.release(gen)
        return prefills[-1][0]

    measured = len(_sampled(prefill, most=len(requests)))
    if not decodes:
        raise EngineError(f"hardware fit: the model ended every {skill_set.name} request it was measured with at "
                          "its first token, so no decode step could be timed; set hardware_fit:=false to keep the "
                          "policies' configured step times")
    seconds, suffix, prompt_tokens = min(prefills)
    timing = TypeTiming(prompt_tokens=prompt_tokens, suffix_tokens=suffix, prefill_s=seconds, decode_s=min(decodes),
                        plans=tuple(plan_shapes(skill_set, engine.encode)),
                        max_segment_tokens=skill_set.max_segment_tokens)
    return timing, requests[:measured]


def measure(engine: Engine, skill_sets: Mapping[str, SkillSet], prompts: PromptEncoder,
            batches: Sequence[int] = BATCHES, again: bool = False) -> Measurements:
    """Measure every robot type, then decode steps at ``batches`` over the requests measured, longest first (the
    robot types' system prompts must be cached already: the server's warm-up). Distinct requests, as a fleet's are:
    on the transformers engine a batch of prompts of different lengths decodes more slowly than copies of one."""
    t0 = time.monotonic()
    types: dict[str, TypeTiming] = {}
    requests: list[tuple[list[int], str]] = []
    for name, skill_set in skill_sets.items():
        types[name], measured = _measure_type(engine, skill_set, prompts, again)
        requests += measured
    requests.sort(key=lambda r: -len(r[0]))
    longest = max(types, key=lambda n: types[n].prompt_tokens)
    batch_decode = {1: types[longest].decode_s}
    gens = [f"{_ID}batch_{i}" for i in range(max(batches, default=1))]
    tokens = (MOST + 1) * len(batches) + 2
    for i, gen in enumerate(gens):   # each prompt was measured, so is cached whole: adding it costs about a token
        prompt, plan = requests[i % len(requests)]
        _add(engine, gen, prompt, plan, tokens)
    try:
        finished = engine.step(gens).finished
        for b in sorted(batches):
            live = [gen for gen in gens if gen not in finished]
            if len(live) < b:     # freely generating requests ended: this batch size cannot be measured
                break
            chosen, waiting = live[:b], live[b:]
            for gen in waiting:
                engine.suspend(gen)
            finished = finished | engine.step(chosen).finished    # settles the rows
            if not finished.intersection(chosen):
                batch_decode[b] = min(_sampled(_stepper(engine, chosen)))
            for gen in waiting:
                engine.resume(gen)
    finally:
        for gen in gens:
            engine.release(gen)
    return Measurements(types=types, batch_decode_s=batch_decode, seconds=time.monotonic() - t0,
                        engine=type(engine).__name__)


def fastest(a: Measurements, b: Measurements) -> Measurements:
    """Two measurements of the same engine as one: the faster of each kind of step (the fit counts the fastest)."""
    types = {name: replace(t, prefill_s=min(t.prefill_s, b.types[name].prefill_s),
                           decode_s=min(t.decode_s, b.types[name].decode_s)) if name in b.types else t
             for name, t in a.types.items()}
    batch = {n: min(s, b.batch_decode_s.get(n, s)) for n, s in a.batch_decode_s.items()}
    return Measurements(types=types, batch_decode_s=batch, seconds=a.seconds + b.seconds, engine=a.engine,
                        rounds=a.rounds + b.rounds)


def fit_engine(engine: Engine, skill_sets: Mapping[str, SkillSet], prompts: PromptEncoder,
               classes: Mapping[str, TimeUtility], network_delay_s: float, max_batch: int,
               scale_factor: float = 0.0) -> tuple[HardwareFit, ClassCheck]:
    """Measure the engine (batch sizes up to max_batch, at most 8), derive the fit, check the urgency classes. A
    class found unmet is checked again on a second measurement (the faster of each kind of step of both): a
    moment of other load on the machine (about a second of measuring) must not change the classes it serves."""
    batches = (min(max_batch, 8),) if max_batch > 1 else ()
    measured = measure(engine, skill_sets, prompts, batches)
    fit = derive(measured)
    check = check_classes(classes, fit, network_delay_s, scale_factor)
    if check.unmet:
        fit = derive(fastest(measured, measure(engine, skill_sets, prompts, batches, again=True)))
        check = check_classes(classes, fit, network_delay_s, scale_factor)
    return fit, check
