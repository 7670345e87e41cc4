"""Time to first segment with and without the cached system prompt, side by side on one model; or (--pair adapter)
with and without the model entry's adapter, both with the cached system prompt.

    .venv/bin/python benchmarks/prompt_cache.py [--model smollm2] [--robot drone] [--reps 6] [--threads 1]
        [--pair cache|adapter]

Two transformers engines share the loaded weights: one keeps prompt-prefix KV (the model entry's prefix_cache_mb,
warmed once with each robot type's prompt as the server does at configure), the other has no prefix cache. Each
repetition sends one new request (the next task of benchmarks/prompt_style.py's list for the robot type, through
the model's chat template) to a PlanScheduler on each engine, alternating which goes first, and measures request
arrival to its first executable segment (TTFS) on the wall clock; the request is then cancelled. Reported: TTFS of
both, their ratio (median and range over the repetitions), the prompt's tokens and how many of them the cache
supplied, and whether both produced the same first segment (they must: the cache is token-exact).

With --pair adapter the two engines are the model with its entry's adapter merged (timely_adapt) and the model
without it, each with the prefix cache as the server runs it: per token they cost the same (the adapter is merged
into the weights), so a difference in TTFS is the plans' (how many tokens the first segment takes).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from prompt_style import TASKS  # noqa: E402
from timely_llm_ros.core.exec_time import load_exec_models  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.composition import PolicyChoice  # noqa: E402
from timely_llm_ros.core.request import PlanRequest  # noqa: E402
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SegmentReady  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.engine.transformers.loader import load_pretrained  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from timely_llm_ros.stack import EngineChoice, StackOptions, build_stack  # noqa: E402


def first_segment(sched: PlanScheduler, req: PlanRequest) -> tuple[float, str]:
    """(seconds from submit to the first SegmentReady, its text); (nan, reason) when the plan gave none."""
    t0 = time.perf_counter()
    req.arrival = time.monotonic()
    events = sched.submit(req)
    try:
        while True:
            for ev in events:
                if isinstance(ev, SegmentReady):
                    return time.perf_counter() - t0, ev.segment.text.strip()
                if isinstance(ev, RequestFinished):
                    return float("nan"), f"no segment: {ev.outcome.message[:80]}"
            events = sched.step()
    finally:
        sched.cancel(req.req_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model entry of config/models.yaml")
    parser.add_argument("--robot", default="drone", help="robot type of the requests")
    parser.add_argument("--reps", type=int, default=6, help="alternated repetitions (one new task each)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pair", choices=("cache", "adapter"), default="cache",
                        help="cache: with/without the cached system prompt; adapter: with/without the entry's adapter")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = model_spec(args.model)
    if args.pair == "adapter":
        compare_adapter(spec, args)
        return
    loaded = load_pretrained(weights_folder(spec), "cpu", spec.dtype, adapter=spec.adapter_folder())
    skill_sets = load_skill_sets()
    engines = {"cached": TransformersEngine(loaded, prefix_cache_mb=spec.prefix_cache_size_mb() or 256.0),
               "uncached": TransformersEngine(loaded)}
    scheds = {}
    options = StackOptions(model=spec, engine=EngineChoice("transformers"),   # warmed up as at configure
                           policy=PolicyChoice("fcfs", max_batch=8))
    for name, engine in engines.items():
        stack = build_stack(options, skill_sets, load_exec_models(), engine=engine)
        scheds[name], setup = stack.scheduler, stack.setup
    prompts = scheds["cached"].prompts
    shared = prompts.shared_tokens(setup.skill_sets[args.robot])
    tasks = [t for t in TASKS if t[0] == args.robot]
    print(f"model {spec.name}, {args.threads} thread(s), robot type {args.robot}: shared prompt {shared} tokens; "
          f"{args.reps} repetitions alternated")
    rows = []
    cache = engines["cached"].prefix_cache
    for rep in range(args.reps):
        _, scene, task, _ = tasks[rep % len(tasks)]
        row: dict = {}
        for name in (("cached", "uncached") if rep % 2 == 0 else ("uncached", "cached")):
            req = PlanRequest(req_id=f"{name}{rep}", agent_id=f"{args.robot}_1", robot_type=args.robot, task=task,
                              tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, context=scene, urgency="normal")
            reused = cache.reused_tokens
            row[name] = first_segment(scheds[name], req)
            if name == "cached":
                row["reused"] = cache.reused_tokens - reused
        row["prompt"] = len(prompts(setup.skill_sets[args.robot], task, scene))
        rows.append(row)
        same = "same" if row["cached"][1] == row["uncached"][1] else "DIFFERENT"
        print(f"  rep {rep}: TTFS cached {row['cached'][0]:6.3f} s, uncached {row['uncached'][0]:6.3f} s; cache "
              f"supplied {row['reused']} of {row['prompt']} prompt tokens; first segment {same}: "
              f"{row['cached'][1][:50]!r}")
    ok = [r for r in rows if r["cached"][0] == r["cached"][0] and r["uncached"][0] == r["uncached"][0]]
    if not ok:
        print("no repetition produced a first segment: nothing to compare")
        return
    ratios = [r["uncached"][0] / r["cached"][0] for r in ok]
    med = {k: statistics.median(r[k][0] for r in ok) for k in ("cached", "uncached")}
    print(f"TTFS median over {len(ok)} repetitions: with the cached system prompt {med['cached']:.3f} s, without "
          f"{med['uncached']:.3f} s; uncached / cached = {statistics.median(ratios):.2f}x (range "
          f"{min(ratios):.2f}-{max(ratios):.2f}); cached {statistics.median(r['reused'] for r in ok):.0f} of "
          f"{statistics.median(r['prompt'] for r in ok):.0f} prompt tokens (median)")


def compare_adapter(spec, args) -> None:
    """TTFS of the model with its entry's adapter and without, both with the prefix cache, alternated."""
    if spec.adapter_folder() is None:
        raise SystemExit(f"model entry {spec.name} has no adapter: nothing to compare")
    folder = weights_folder(spec)
    cache_mb = spec.prefix_cache_size_mb() or 256.0
    engines = {"adapted": TransformersEngine(load_pretrained(folder, "cpu", spec.dtype, adapter=spec.adapter_folder()),
                                             prefix_cache_mb=cache_mb),
               "base": TransformersEngine(load_pretrained(folder, "cpu", spec.dtype), prefix_cache_mb=cache_mb)}
    skill_sets = load_skill_sets()
    scheds = {}
    for name, engine in engines.items():
        options = StackOptions(model=spec, policy=PolicyChoice("fcfs", max_batch=8))
        scheds[name] = build_stack(options, skill_sets, load_exec_models(), engine=engine).scheduler
    tasks = [t for t in TASKS if t[0] == args.robot]
    print(f"model {spec.name} with and without adapter {spec.adapter_folder()}, {args.threads} thread(s), robot type "
          f"{args.robot}, prefix cache on both; {args.reps} repetitions alternated")
    rows = []
    for rep in range(args.reps):
        _, scene, task, _ = tasks[rep % len(tasks)]
        row: dict = {}
        for name in (("adapted", "base") if rep % 2 == 0 else ("base", "adapted")):
            req = PlanRequest(req_id=f"{name}{rep}", agent_id=f"{args.robot}_1", robot_type=args.robot, task=task,
                              tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, context=scene, urgency="normal")
            row[name] = first_segment(scheds[name], req)
        rows.append(row)
        print(f"  rep {rep}: TTFS adapted {row['adapted'][0]:6.3f} s {row['adapted'][1][:40]!r}; base "
              f"{row['base'][0]:6.3f} s {row['base'][1][:40]!r}")
    ok = [r for r in rows if r["adapted"][0] == r["adapted"][0] and r["base"][0] == r["base"][0]]
    if not ok:
        print("no repetition produced a first segment on both: nothing to compare")
        return
    ratios = [r["adapted"][0] / r["base"][0] for r in ok]
    med = {k: statistics.median(r[k][0] for r in ok) for k in ("adapted", "base")}
    print(f"TTFS median over {len(ok)} repetitions: with the adapter {med['adapted']:.3f} s, without "
          f"{med['base']:.3f} s; adapted / base = {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-"
          f"{max(ratios):.2f})")


if __name__ == "__main__":
    main()
